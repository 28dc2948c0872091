-- Named queries of docpipe.state.reviews: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: list_reviews
-- A tenant's runs awaiting a person, oldest first, after the cursor (review_since, id), with
-- the filters that are set.
SELECT r.id::text AS run_id, r.pipeline, r.document_id, r.batch_id::text, r.review_step AS step,
       r.review_reason AS reason, coalesce(r.review_reasons, '[]'::jsonb) AS reasons,
       r.review_revision AS revision, r.review_since AS waiting_since, r.error
FROM pipeline_run r
WHERE r.tenant_id = %(tenant_id)s AND r.status = 'needs_review'
  AND (%(pipeline)s::text IS NULL OR r.pipeline = %(pipeline)s)
  AND (%(step)s::text IS NULL OR r.review_step = %(step)s)
  AND (%(reason)s::text IS NULL OR r.review_reason = %(reason)s)
  AND (%(batch_id)s::uuid IS NULL OR r.batch_id = %(batch_id)s)
  AND (%(after_since)s::timestamptz IS NULL
       OR (r.review_since, r.id) > (%(after_since)s, %(after_id)s::uuid))
ORDER BY r.review_since, r.id
LIMIT %(limit)s;

-- name: lock_review
-- Lock a run of this tenant for a decision: a second reviewer's decision waits here until
-- the first one's commits, then reads the revision it raised.
SELECT id FROM pipeline_run WHERE id = %(run_id)s AND tenant_id = %(tenant_id)s FOR UPDATE;

-- name: review_row
-- A run of this tenant with its review and the step in review.
SELECT r.id::text AS run_id, r.tenant_id, r.status, r.pipeline, r.pipeline_hash, r.lane,
       r.batch_id::text, r.document_id, r.review_step AS step, r.review_reason AS reason,
       coalesce(r.review_reasons, '[]'::jsonb) AS reasons, r.review_revision AS revision,
       r.review_since AS waiting_since, r.error,
       s.step_index, s.status AS step_status, s.output, s.input_hash
FROM pipeline_run r
LEFT JOIN pipeline_step_result s ON s.run_id = r.id AND s.step = r.review_step
WHERE r.id = %(run_id)s AND r.tenant_id = %(tenant_id)s;

-- name: review_inputs
-- What a step in review read: the document, and the outputs of the steps done before it.
SELECT d.format, d.content AS text, coalesce(d.page_starts, '{0}') AS page_starts,
       coalesce((SELECT jsonb_object_agg(e.step, e.output ORDER BY e.step_index)
                 FROM pipeline_step_result e
                 WHERE e.run_id = r.id AND e.status = 'done'
                   AND e.step_index < (SELECT step_index FROM pipeline_step_result
                                       WHERE run_id = r.id AND step = r.review_step)),
                '{}'::jsonb) AS input,
       (SELECT error FROM pipeline_step_result
        WHERE run_id = r.id AND step = r.review_step) AS step_error
FROM pipeline_run r
JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
WHERE r.id = %(run_id)s AND r.tenant_id = %(tenant_id)s;

-- name: reviewer_name
-- The name a reviewer's decisions are recorded under: its API key's name, else the key's id,
-- else the name given (no API keys).
SELECT coalesce((SELECT nullif(name, '') FROM api_key WHERE id = %(key_id)s), %(key_id)s,
                %(fallback_name)s) AS name;

-- name: record_decision
-- Put a decision on record, made on revision %(revision)s (a second decision on the same
-- revision breaks the unique key: the first wins), under the reviewer's name (reviewer_name).
INSERT INTO review_decision (run_id, tenant_id, step, revision, action, reviewer_key_id,
                             reviewer_name, reason, output_before, output_after, edits, diff,
                             retry_from, retry_model, pipeline_hash, input_hash)
VALUES (%(run_id)s, %(tenant_id)s, %(step)s, %(revision)s, %(action)s, %(key_id)s,
        %(reviewer_name)s, %(reason)s, %(output_before)s, %(output_after)s, %(edits)s, %(diff)s, %(retry_from)s,
        %(retry_model)s, %(pipeline_hash)s, %(input_hash)s)
RETURNING id, reviewer_name;

-- name: decisions_since
-- The decisions made on a run from revision %(revision)s on (what changed under a stale one).
SELECT id, step, revision, action, reviewer_key_id, reviewer_name, reason, edits, diff,
       retry_from, retry_model, decided_at
FROM review_decision
WHERE run_id = %(run_id)s AND revision >= %(revision)s
ORDER BY id;

-- name: decisions_of_runs
-- The audit trail of these runs, oldest decision first.
SELECT run_id::text, id, step, revision, action, reviewer_key_id, reviewer_name, reason,
       output_before, output_after, edits, diff, retry_from, retry_model, decided_at
FROM review_decision
WHERE tenant_id = %(tenant_id)s AND run_id = ANY(%(run_ids)s::uuid[])
ORDER BY run_id, id;

-- name: approve_review
-- The reviewed output becomes the step's result and the run goes on at its next step
-- (queued; a batch-lane run waits for admission again), or ends 'done' after its last. A
-- finished batch reopens with it, as on a retry.
WITH step_done AS (
    UPDATE pipeline_step_result
    SET status = 'done', output = %(output)s, review_decision_id = %(decision_id)s,
        review_reused = false, error = NULL, lease_owner = NULL, lease_expires_at = NULL,
        finished_at = coalesce(finished_at, now())
    WHERE run_id = %(run_id)s AND step = %(step)s AND status IN ('done', 'failed')
    RETURNING run_id, step_index
), resumed AS (
    UPDATE pipeline_run r
    SET status = CASE WHEN %(next_step)s::text IS NULL THEN 'done' ELSE 'queued' END,
        current_step = coalesce(%(next_step)s, r.current_step),
        steps_done = step_done.step_index + 1, error = NULL, updated_at = now(),
        finished_at = CASE WHEN %(next_step)s::text IS NULL THEN now() END, notified_at = NULL,
        admitted_at = CASE WHEN r.lane = 'batch' AND %(next_step)s::text IS NOT NULL THEN NULL
                           ELSE r.admitted_at END,
        review_step = NULL, review_reason = NULL, review_reasons = NULL, review_since = NULL,
        review_revision = r.review_revision + 1
    FROM step_done
    WHERE r.id = step_done.run_id AND r.status = 'needs_review'
    RETURNING r.id, r.batch_id, r.status
), batch_reopened AS (
    UPDATE batch b SET status = 'running', finished_at = NULL, notified_at = NULL
    FROM resumed
    WHERE b.id = resumed.batch_id AND b.status = 'done' AND resumed.status = 'queued'
)
SELECT id, status FROM resumed;

-- name: reject_review
-- End a run in review as 'failed', saying who rejected it and why.
UPDATE pipeline_run r
SET status = 'failed', error = %(error)s, finished_at = now(), updated_at = now(),
    notified_at = NULL, review_step = NULL, review_reason = NULL, review_reasons = NULL,
    review_since = NULL, review_revision = r.review_revision + 1
WHERE r.id = %(run_id)s AND r.status = 'needs_review'
RETURNING r.id;

-- name: review_document
-- The text of the document a run in review reads, and where its pages start: what a
-- reviewer's own quote is checked against.
SELECT d.content AS text, coalesce(d.page_starts, '{0}') AS page_starts
FROM pipeline_run r
JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
WHERE r.id = %(run_id)s AND r.tenant_id = %(tenant_id)s;
