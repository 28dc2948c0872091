-- Named queries of docpipe.state.batches: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: create_batch
-- Insert a batch unless this tenant already used the idempotency key.
WITH new_batch AS (
    INSERT INTO batch (id, tenant_id, pipeline, runs_total, budget_usd, run_budget_usd,
                       callback_url, deadline_at, idempotency_key, request_hash,
                       provider_batch)
    VALUES (%(id)s, %(tenant_id)s, %(pipeline)s, %(runs_total)s, %(budget_usd)s,
            %(run_budget_usd)s, %(callback_url)s, %(deadline_at)s, %(idempotency_key)s,
            %(request_hash)s, %(provider_batch)s)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING id, request_hash
)
SELECT id, request_hash, true AS created FROM new_batch
UNION ALL
SELECT id, request_hash, false AS created
FROM batch
WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s
  AND NOT EXISTS (SELECT 1 FROM new_batch);

-- name: put_documents
-- Store many documents at once; returns the ids that already hold other text.
WITH incoming AS (
    SELECT *
    FROM unnest(%(ids)s::text[], %(contents)s::text[], %(sha256s)s::text[],
                %(sizes)s::integer[]) AS d (id, content, sha256, size_bytes)
), inserted AS (
    INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes)
    SELECT %(tenant_id)s, id, content, sha256, size_bytes FROM incoming
    ON CONFLICT (tenant_id, id) DO NOTHING
)
SELECT i.id
FROM incoming i
JOIN document d ON d.tenant_id = %(tenant_id)s AND d.id = i.id
WHERE d.content_sha256 <> i.sha256;

-- name: missing_documents
-- Which of these ids this tenant has not stored (at most 10, for the error message).
SELECT i.id
FROM unnest(%(ids)s::text[]) AS i (id)
WHERE NOT EXISTS (SELECT 1 FROM document d WHERE d.tenant_id = %(tenant_id)s AND d.id = i.id)
LIMIT 10;

-- name: create_batch_runs
-- One waiting run (and its pending steps) per document of a new batch; as in create_run,
-- with %(inline_step)s a document's known text has its extract_text step done here.
WITH docs AS (
    SELECT gen_random_uuid() AS run_id, d.document_id, d.ordinality,
           CASE WHEN %(inline_step)s::text IS NOT NULL AND cardinality(%(steps)s::text[]) > 1
                THEN known_text_summary(k) END AS output,
           k.content_sha256
    FROM unnest(%(document_ids)s::text[]) WITH ORDINALITY AS d (document_id, ordinality)
    LEFT JOIN document k ON k.tenant_id = %(tenant_id)s AND k.id = d.document_id
), new_runs AS (
    INSERT INTO pipeline_run (id, tenant_id, pipeline, pipeline_hash, document_id, lane, batch_id,
                              current_step, steps_done, steps_total, budget_usd, deadline_at,
                              idempotency_key, request_hash, traceparent, priority,
                              reuse_answers, provider_batch)
    SELECT d.run_id, %(tenant_id)s, %(pipeline)s, %(pipeline_hash)s, d.document_id, 'batch',
           %(batch_id)s::uuid, (%(steps)s::text[])[1 + (d.output IS NOT NULL)::integer],
           (d.output IS NOT NULL)::integer, cardinality(%(steps)s::text[]),
           %(run_budget_usd)s, %(deadline_at)s,
           -- batch_results reads the document's place in the request back from this key.
           'batch:' || %(batch_id)s::text || ':' || d.ordinality,
           d.document_id, %(traceparent)s, %(priority)s, %(reuse_answers)s,
           %(provider_batch)s
    FROM docs d
    RETURNING id
)
INSERT INTO pipeline_step_result (run_id, step, step_index, status, output,
                                  input_tokens, output_tokens, cost_usd, prompt_version,
                                  started_at, finished_at, input_hash)
SELECT r.id, s.step, s.ordinality - 1, coalesce(done.status, 'pending'), done.output,
       done.tokens, done.tokens, done.tokens, done.prompt_version, done.at, done.at,
       done.input_hash
FROM new_runs r
JOIN docs d ON d.run_id = r.id
CROSS JOIN unnest(%(steps)s::text[]) WITH ORDINALITY AS s (step, ordinality)
LEFT JOIN LATERAL (
    SELECT 'done' AS status, d.output, 0 AS tokens,
           %(inline_step)s::text AS prompt_version, now() AS at,
           encode(sha256(convert_to(concat_ws(E'\n', %(pipeline_hash)s::text, s.step,
                                              d.content_sha256, '{}'), 'UTF8')),
                  'hex') AS input_hash
    WHERE s.ordinality = 1 AND d.output IS NOT NULL
) done ON true;

-- name: batch_progress
-- A batch's runs per status, steps, spending and pace, in one request: one pass over the
-- batch's runs (grouped by status), then sums over those few groups.
WITH per_status AS (
    SELECT status, count(*) AS n, count(*) FILTER (WHERE admitted_at IS NULL) AS unadmitted,
           sum(steps_done) AS steps_done, sum(steps_total) AS steps_total,
           min(admitted_at) AS first_admitted_at
    FROM pipeline_run
    WHERE batch_id = %(batch_id)s
    GROUP BY status
)
SELECT b.id::text AS batch_id, b.pipeline, b.status, b.runs_total,
       b.cost_usd AS cost_so_far_usd, b.budget_usd, b.created_at, b.finished_at, now() AS now,
       b.provider_batch, b.cost_usd + b.saved_usd AS realtime_cost_usd, b.reserved_usd,
       coalesce((SELECT jsonb_object_agg(status, n) FROM per_status), '{}') AS runs_by_status,
       (SELECT coalesce(sum(unadmitted), 0)::bigint FROM per_status WHERE status = 'queued')
           AS waiting_admission,
       (SELECT coalesce(sum(steps_done), 0)::bigint FROM per_status) AS steps_done,
       (SELECT coalesce(sum(steps_total), 0)::bigint FROM per_status) AS steps_total,
       (SELECT coalesce(sum(steps_total - steps_done), 0)::bigint FROM per_status
        WHERE status IN ('queued', 'running')) AS steps_remaining,
       (SELECT min(first_admitted_at) FROM per_status) AS first_admitted_at,
       (SELECT to_jsonb(w) FROM (SELECT status, attempts, last_status, last_error, delivered_at,
                                        CASE WHEN status = 'pending'
                                             THEN next_attempt_at END AS next_attempt_at
                                 FROM webhook_delivery WHERE batch_id = b.id
                                 ORDER BY id DESC LIMIT 1) w) AS webhook
FROM batch b
WHERE b.id = %(batch_id)s AND b.tenant_id = %(tenant_id)s;

-- name: batch_runs
-- A page of a batch's runs in run id order, after `after` (the nil id: from the first),
-- read from pipeline_run_batch_page_idx (batch_id, id): a page costs its own rows, however
-- large the batch or the tenant. No optional filter, so a prepared statement's generic plan
-- is this plan too (batch_runs_of_status is the filtered shape).
SELECT id::text AS run_id, document_id, status, current_step, steps_done, steps_total,
       cost_usd, error
FROM pipeline_run
WHERE batch_id = %(batch_id)s AND id > %(after)s::uuid
  -- The tenant is the batch's (its runs are its tenant's): checked on the batch's row, not
  -- on the runs, where an index on the tenant would tempt the planner to read all of its runs.
  AND EXISTS (SELECT 1 FROM batch WHERE id = %(batch_id)s AND tenant_id = %(tenant_id)s)
ORDER BY id
LIMIT %(limit)s;

-- name: batch_runs_of_status
-- The same page among the batch's runs of one status, from pipeline_run_batch_status_idx
-- (batch_id, status, id).
SELECT id::text AS run_id, document_id, status, current_step, steps_done, steps_total,
       cost_usd, error
FROM pipeline_run
WHERE batch_id = %(batch_id)s AND status = %(status)s AND id > %(after)s::uuid
  AND EXISTS (SELECT 1 FROM batch WHERE id = %(batch_id)s AND tenant_id = %(tenant_id)s)
ORDER BY id
LIMIT %(limit)s;

-- name: stop_batch_runs
-- The first statement of stopping a running batch ('cancelled' or 'budget_exceeded'): its
-- unfinished runs end, their unpublished messages are dropped; running steps finish the
-- call in flight and send no other. The batch row itself comes after (end_stopped_batch).
WITH stopped AS (
    UPDATE pipeline_run r
    SET status = %(status)s, error = %(reason)s, finished_at = now(), updated_at = now()
    WHERE r.batch_id = %(batch_id)s AND r.status IN ('queued', 'running')
      AND EXISTS (SELECT 1 FROM batch b
                  WHERE b.id = %(batch_id)s AND b.tenant_id = %(tenant_id)s
                    AND b.status = 'running')
    RETURNING r.id
), unsent AS (
    DELETE FROM outbox o USING stopped
    WHERE o.run_id = stopped.id AND o.published_at IS NULL
)
SELECT array(SELECT id::text FROM stopped) AS run_ids;

-- name: end_stopped_batch
-- The batch of stop_batch_runs ends, unless it has ended meanwhile (no row).
UPDATE batch SET status = %(status)s, finished_at = now()
WHERE id = %(batch_id)s AND tenant_id = %(tenant_id)s AND status = 'running'
RETURNING id;

-- name: cancel_pending_steps
-- The steps that will not run now that their runs ended.
UPDATE pipeline_step_result SET status = 'cancelled'
WHERE run_id = ANY(%(run_ids)s::uuid[]) AND status = 'pending';

-- name: finish_batches
-- Mark running batches whose runs have all ended as done.
UPDATE batch b SET status = 'done', finished_at = now()
WHERE b.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM pipeline_run r
                  WHERE r.batch_id = b.id AND r.status IN ('queued', 'running'))
RETURNING id;
