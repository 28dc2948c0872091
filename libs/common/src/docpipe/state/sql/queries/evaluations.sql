-- name: create_evaluation
-- An evaluation of a pipeline version on a set's version, run as the batch made with it.
INSERT INTO evaluation (id, tenant_id, set_id, set_version, pipeline, step, batch_id, models)
VALUES (%(id)s, %(tenant_id)s, %(set_id)s, %(set_version)s, %(pipeline)s, %(step)s,
        %(batch_id)s, %(models)s);

-- name: mark_evaluation_runs
-- An evaluation's runs reuse the tenant's answers to identical requests and measure their
-- review rules instead of pausing; a model asked for a step (or "*": every step that asks
-- one) replaces the step's own.
WITH runs AS (
    UPDATE pipeline_run SET reuse_answers = true, review_pauses = false
    WHERE batch_id = %(batch_id)s
    RETURNING id
)
-- The steps by their runs' keys (an array, not a join): a join's generic plan takes a batch
-- for any size and hashes every step of the table.
UPDATE pipeline_step_result s
SET model_override = coalesce(%(models)s::jsonb ->> s.step, %(models)s::jsonb ->> '*')
WHERE s.run_id = ANY (ARRAY(SELECT id FROM runs)) AND s.status = 'pending'
  AND s.step = ANY(%(steps)s::text[])
  AND (%(models)s::jsonb ? s.step OR %(models)s::jsonb ? '*');

-- name: evaluation
-- One of a tenant's evaluations, with its set's name and its batch's state.
SELECT e.id::text, e.tenant_id, e.set_id::text, s.name AS set_name, e.set_version, e.pipeline, e.step,
       e.batch_id::text, e.models, e.report, e.reported_at, e.created_at,
       coalesce(b.status, 'done') AS batch_status
FROM evaluation e
JOIN evaluation_set s ON s.id = e.set_id
LEFT JOIN batch b ON b.id = e.batch_id
WHERE e.id = %(id)s::uuid AND e.tenant_id = %(tenant_id)s;

-- name: evaluations
-- A tenant's evaluations, newest first.
SELECT e.id::text, e.tenant_id, e.set_id::text, s.name AS set_name, e.set_version, e.pipeline, e.step,
       e.batch_id::text, e.models, e.report, e.reported_at, e.created_at,
       coalesce(b.status, 'done') AS batch_status
FROM evaluation e
JOIN evaluation_set s ON s.id = e.set_id
LEFT JOIN batch b ON b.id = e.batch_id
WHERE e.tenant_id = %(tenant_id)s
ORDER BY e.created_at DESC
LIMIT %(limit)s;

-- name: evaluation_runs
-- An ended evaluation's runs a page at a time (by run id after `after`): each with its
-- document's hash, every step output it has and what its calls cost and took.
SELECT r.id::text AS run_id, r.document_id, r.status, r.error, d.content_sha256,
       extract(epoch FROM r.finished_at - r.admitted_at)::float AS run_s,
       o.outputs, c.cost_usd, c.input_tokens, c.output_tokens, c.calls, c.reused,
       c.latencies_ms
FROM pipeline_run r
LEFT JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(s.step, s.output), '{}'::jsonb) AS outputs
    FROM pipeline_step_result s
    WHERE s.run_id = r.id AND s.status = 'done'
) o
CROSS JOIN LATERAL (
    SELECT coalesce(sum(l.cost_usd), 0) AS cost_usd,
           coalesce(sum(l.input_tokens), 0)::bigint AS input_tokens,
           coalesce(sum(l.output_tokens), 0)::bigint AS output_tokens,
           count(*) FILTER (WHERE u.call_id IS NULL AND l.status <> 'sent') AS calls,
           count(u.call_id) AS reused,
           coalesce(array_agg(l.latency_ms) FILTER (WHERE u.call_id IS NULL
                                                   AND l.latency_ms IS NOT NULL), '{}')
               AS latencies_ms
    FROM llm_call_log l
    LEFT JOIN reused_answer u ON u.call_id = l.id
    -- A run's calls are written after it: the call log's partitions of the weeks before
    -- the run are not looked into (it is partitioned by created_at).
    WHERE l.run_id = r.id AND l.created_at >= r.created_at
) c
WHERE r.batch_id = %(batch_id)s::uuid AND r.id > %(after)s::uuid
ORDER BY r.id
LIMIT %(limit)s;

-- name: save_evaluation_documents
-- Each document's result of an evaluation being reported (once: a second report of the same
-- evaluation at the same time writes nothing).
INSERT INTO evaluation_document (evaluation_id, document_id, run_id, status, accuracy, wrong,
                                 paused_by)
SELECT %(evaluation_id)s::uuid, d.document_id, d.run_id, d.status, d.accuracy, d.wrong,
       d.paused_by
FROM jsonb_to_recordset(%(documents)s::jsonb)
     AS d (document_id text, run_id uuid, status text, accuracy double precision, wrong jsonb,
           paused_by jsonb)
ON CONFLICT (evaluation_id, document_id) DO NOTHING;

-- name: save_evaluation_report
-- The report of an evaluation whose batch ended, written once.
UPDATE evaluation SET report = %(report)s, reported_at = now()
WHERE id = %(id)s::uuid AND report IS NULL
RETURNING id;

-- name: evaluation_documents
-- A reported evaluation's documents a page at a time, by document id after `after`.
SELECT document_id, run_id::text, status, accuracy, wrong, paused_by
FROM evaluation_document
WHERE evaluation_id = %(evaluation_id)s::uuid AND document_id > %(after)s
ORDER BY document_id
LIMIT %(limit)s;

-- name: evaluation_document
-- One document of a reported evaluation.
SELECT document_id, run_id::text, status, accuracy, wrong, paused_by
FROM evaluation_document
WHERE evaluation_id = %(evaluation_id)s::uuid AND document_id = %(document_id)s;
