-- Named queries of the gauges beat exports (docpipe.worker.state_collector): each block
-- starts with "-- name: <name>" and a line saying what it reads.

-- name: metrics_runs_by_status
-- Runs not yet ended, and runs awaiting a person, per status and lane: counted from their
-- partial indexes (pipeline_run_active_idx, pipeline_run_review_idx), so the count costs
-- what is in flight and waiting, never the history.
SELECT status, lane, count(*) AS runs FROM pipeline_run
WHERE status IN ('queued', 'running')
GROUP BY status, lane
UNION ALL
SELECT status, lane, count(*) FROM pipeline_run
WHERE status = 'needs_review'
GROUP BY status, lane;

-- name: metrics_runs_ended_estimate
-- Ended runs per status and lane, estimated without reading a row: the table's row count as
-- the planner estimates it (its statistics' rows per page times its pages now) times each
-- (status, lane)'s share in the extended statistics pipeline_run_status_lane, which ANALYZE
-- (autovacuum) keeps. Nothing before the table's first ANALYZE.
SELECT v.status, v.lane, round(v.share * t.rows)::bigint AS runs
FROM (SELECT c.reltuples / c.relpages
             * (pg_relation_size(c.oid) / current_setting('block_size')::integer) AS rows
      FROM pg_class c
      WHERE c.oid = 'pipeline_run'::regclass AND c.relpages > 0 AND c.reltuples > 0) t
CROSS JOIN (
    SELECT s.most_common_vals[i][array_position(s.attnames, 'status')] AS status,
           s.most_common_vals[i][array_position(s.attnames, 'lane')] AS lane,
           s.most_common_freqs[i] AS share
    FROM pg_stats_ext s
    CROSS JOIN generate_subscripts(s.most_common_freqs, 1) i
    WHERE s.statistics_schemaname = current_schema()
      AND s.statistics_name = 'pipeline_run_status_lane'
) v
WHERE v.status NOT IN ('queued', 'running', 'needs_review');

-- name: metrics_backlogs
-- Batch runs awaiting admission; unpublished outbox rows: due (and the oldest's age), parked.
SELECT
    (SELECT count(*) FROM pipeline_run
     WHERE lane = 'batch' AND status = 'queued' AND admitted_at IS NULL) AS batch_backlog,
    count(*) FILTER (WHERE available_at <= now()) AS outbox_due,
    count(*) FILTER (WHERE available_at > now()) AS outbox_parked,
    coalesce(extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now())),
             0)::float AS outbox_oldest_age_s
FROM outbox
WHERE published_at IS NULL;

-- name: metrics_review_backlog
-- Runs awaiting a person per tenant and pipeline, and how long the oldest has waited (the
-- review queue's own index).
SELECT tenant_id, pipeline, count(*) AS runs,
       coalesce(extract(epoch FROM now() - min(review_since)), 0)::float AS oldest_age_s
FROM pipeline_run
WHERE status = 'needs_review'
GROUP BY tenant_id, pipeline;

-- name: metrics_periodic_jobs
-- When each periodic job last finished.
SELECT name, extract(epoch FROM last_finished_at)::float AS last_finished
FROM periodic_job
WHERE last_finished_at IS NOT NULL;

-- name: metrics_evaluation_accuracy
-- The overall accuracy of the latest reported evaluation of each pipeline version on each
-- evaluation set.
SELECT DISTINCT ON (e.tenant_id, e.set_id, e.pipeline)
       e.tenant_id, s.name AS set_name, e.pipeline, e.step,
       (e.report -> 'overall' ->> 'accuracy')::float AS accuracy
FROM evaluation e
JOIN evaluation_set s ON s.id = e.set_id
WHERE e.report IS NOT NULL AND e.report -> 'overall' ->> 'accuracy' IS NOT NULL
ORDER BY e.tenant_id, e.set_id, e.pipeline, e.reported_at DESC;

-- name: metrics_provider_batches
-- Provider batches open (their partial index) or ended in the last day, by state.
SELECT provider, state, count(*) AS batches
FROM provider_batch
WHERE state IN ('packing', 'submitted') OR ended_at > now() - interval '1 day'
GROUP BY provider, state;

-- name: metrics_provider_batch_calls
-- Calls waiting for a provider batch (not yet packed, or sent in one), and the oldest wait.
SELECT provider, model, state, count(*) AS calls,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float AS oldest_age_s
FROM provider_batch_call
WHERE state IN ('waiting', 'packed')
GROUP BY provider, model, state;
