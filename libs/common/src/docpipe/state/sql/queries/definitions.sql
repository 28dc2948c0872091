-- Named queries of docpipe.state.definitions: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: active_run_definitions
-- The pipeline definitions that runs not yet ended started with, and a few of their ids.
SELECT pipeline, pipeline_hash, count(*) AS runs,
       (array_agg(id::text ORDER BY created_at))[1:3] AS examples
FROM pipeline_run
WHERE status IN ('queued', 'running')
GROUP BY pipeline, pipeline_hash
ORDER BY pipeline;
