-- Named queries of docpipe.state.results: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: batch_results
-- A batch's runs in the order its documents were sent (`position`, the document's place in
-- the batch request, 0-based, from the idempotency key create_batch_runs gives each run;
-- then the run id) after the run at (`after_position`, `after`), the export's resume cursor,
-- with each step's output in pipeline order (null until the step is done) and, while a run
-- awaits a person, its review (as run_status gives it), for GET /batches/{id}/results: read
-- through a server-side cursor. The runs are ordered before their outputs are read, so the
-- sort holds ids, not outputs. `statuses` and the cursor are always given (every status;
-- position -1 and the nil id), so the plan walks pipeline_run_batch_position_idx in order.
SELECT r.run_id, r.document_id, r.position, r.status, r.error, r.cost_usd, r.created_at,
       r.finished_at,
       (SELECT json_object_agg(s.step, CASE WHEN s.status = 'done' THEN s.output END
                               ORDER BY s.step_index)
        FROM pipeline_step_result s WHERE s.run_id = r.id) AS outputs,
       CASE WHEN r.status = 'needs_review' THEN
           jsonb_build_object('step', r.review_step, 'reason', r.review_reason,
                              'reasons', coalesce(r.review_reasons, '[]'::jsonb),
                              'revision', r.review_revision, 'waiting_since', r.review_since)
       END AS review
FROM (SELECT id, id::text AS run_id, document_id, status, error, cost_usd, created_at,
             finished_at, review_step, review_reason, review_reasons, review_revision,
             review_since,
             CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$'
                  THEN split_part(idempotency_key, ':', 3)::integer - 1 END AS position
      FROM pipeline_run
      WHERE batch_id = %(batch_id)s AND status = ANY(%(statuses)s::text[])
        AND (CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$'
                  THEN split_part(idempotency_key, ':', 3)::integer - 1 END, id)
            > (%(after_position)s::integer, %(after)s::uuid)
        -- The tenant checked on the batch's row (see batch_runs).
        AND EXISTS (SELECT 1 FROM batch WHERE id = %(batch_id)s AND tenant_id = %(tenant_id)s)
      ORDER BY CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$'
                    THEN split_part(idempotency_key, ':', 3)::integer - 1 END, id) r
ORDER BY r.position, r.id;

-- name: batch_has_run
-- A run of the batch, with its place in the batch request (a resume cursor must name one
-- of the batch's runs; the export goes on after its place).
SELECT CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$'
            THEN split_part(idempotency_key, ':', 3)::integer - 1 END AS position
FROM pipeline_run
WHERE id = %(run_id)s::uuid AND batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;
