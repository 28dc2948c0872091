-- Named queries. Each block starts with "-- name: <name>" and a line saying what it does.
-- Transitions are single guarded statements: a lost race matches no row and returns nothing.

-- name: put_document
-- Store a document once; an existing id keeps its content (the caller compares hashes). A PDF
-- or DOCX keeps its bytes in document_original_chunk; its content is written by extraction.
WITH inserted AS (
    INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes, format)
    VALUES (%(tenant_id)s, %(id)s, %(content)s, %(sha256)s, %(size_bytes)s, %(format)s)
    ON CONFLICT (tenant_id, id) DO NOTHING
    RETURNING id, content_sha256 AS sha256, true AS created
)
SELECT * FROM inserted
UNION ALL
SELECT id, content_sha256, false AS created
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: get_document
-- A document's metadata, with what extraction found (a text document needs none).
SELECT id, content_sha256 AS sha256, size_bytes, created_at, false AS created, format,
       (format = 'text' OR extracted_at IS NOT NULL) AS extracted,
       CASE WHEN format = 'text' THEN 1 ELSE cardinality(page_starts) END AS pages,
       CASE WHEN format = 'text' THEN 0 ELSE ocr_pages END AS ocr_pages,
       CASE WHEN format = 'text' THEN '[]'::jsonb ELSE extraction_warnings END AS warnings,
       CASE WHEN extracted_at IS NOT NULL THEN (
           SELECT coalesce(jsonb_agg(jsonb_build_object('page', p.page + 1, 'degrees', p.rotation)
                                     ORDER BY p.page), '[]'::jsonb)
           FROM document_page p
           WHERE p.tenant_id = document.tenant_id AND p.document_id = document.id
             AND p.rotation <> 0)
       WHEN format = 'text' THEN '[]'::jsonb END AS rotated_pages
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: document_text
-- A document's text and page map, once known.
SELECT format, content, (format = 'text' OR extracted_at IS NOT NULL) AS extracted,
       coalesce(page_starts, '{0}') AS page_starts
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: lock_document
-- Lock a document to delete it: a run being started on it waits (its KEY SHARE) until then.
SELECT id FROM document WHERE tenant_id = %(tenant_id)s AND id = %(id)s FOR UPDATE;

-- name: document_active_runs
-- A few of the runs not yet ended that use a document (read after lock_document).
SELECT id::text FROM pipeline_run
WHERE tenant_id = %(tenant_id)s AND document_id = %(id)s AND status IN ('queued', 'running')
ORDER BY created_at
LIMIT %(limit)s;

-- name: delete_document_runs
-- Delete a document's ended runs, with their steps, calls and webhook deliveries (ON DELETE
-- CASCADE): their outputs are the document's content in another form.
DELETE FROM pipeline_run
WHERE tenant_id = %(tenant_id)s AND document_id = %(id)s
  AND status NOT IN ('queued', 'running');

-- name: delete_document
-- Delete a document (after delete_document_runs).
DELETE FROM document WHERE tenant_id = %(tenant_id)s AND id = %(id)s;
-- name: put_original_chunk
-- One chunk of a file's bytes, in the transaction that stored its document.
INSERT INTO document_original_chunk (tenant_id, document_id, seq, data)
VALUES (%(tenant_id)s, %(document_id)s, %(seq)s, %(data)s);

-- name: original_chunk
-- One chunk of a file's bytes (none past the last).
SELECT data FROM document_original_chunk
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND seq = %(seq)s;

-- name: document_for_extraction
-- What the extract_text step reads: the format (its bytes are read apart: original_chunk),
-- and the step's output once the text is known (as create_run records it then).
SELECT format, known_text_summary(document) AS known_summary
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: original_slice
-- A slice of a file stored whole before migration 0020 (1-based start), so that a process
-- never holds the whole file.
SELECT substring(original FROM %(start)s FOR %(length)s) AS bytes
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: start_page
-- Put a page on record before it is read (as a provider call is before it is sent): a
-- page already read returns nothing; a page started before (a killed worker) counts again.
INSERT INTO document_page AS p (tenant_id, document_id, page)
VALUES (%(tenant_id)s, %(document_id)s, %(page)s)
ON CONFLICT (tenant_id, document_id, page) DO UPDATE
SET attempts = p.attempts + 1, started_at = now()
WHERE p.finished_at IS NULL
RETURNING attempts;

-- name: finish_page
-- Record what a page gave; the memo that later attempts and other runs read.
UPDATE document_page
SET text = %(text)s, ocr = %(ocr)s, confidence = %(confidence)s, warnings = %(warnings)s,
    rotation = %(rotation)s, text_layer_score = %(text_layer_score)s, geometry = %(geometry)s,
    seconds = %(seconds)s, finished_at = now()
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s
  AND finished_at IS NULL;

-- name: finished_pages
-- The pages of a document read so far, in order.
SELECT page, text, ocr, confidence, warnings, rotation
FROM document_page
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND finished_at IS NOT NULL
ORDER BY page;

-- name: record_extraction
-- Write the extracted text and page map onto the document, once: a document never changes
-- after, so every run reads the same text (a concurrent run's identical write matches no row).
UPDATE document
SET content = %(content)s, page_starts = %(page_starts)s, ocr_pages = %(ocr_pages)s,
    extraction_warnings = %(warnings)s, extracted_at = now()
WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND extracted_at IS NULL AND format <> 'text';

-- name: page_image
-- A page's image, once rendered (docpipe.state.pages).
SELECT png, width, height FROM document_page_image
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s;

-- name: page_rotation
-- The degrees a page was turned to be read upright (its image is rendered so).
SELECT rotation FROM document_page
WHERE tenant_id = %(tenant_id)s AND document_id = %(document_id)s AND page = %(page)s;

-- name: store_page_image
-- Keep a page's image; one rendered meanwhile by another request is the same, and stays.
INSERT INTO document_page_image (tenant_id, document_id, page, png, width, height)
VALUES (%(tenant_id)s, %(document_id)s, %(page)s, %(png)s, %(width)s, %(height)s)
ON CONFLICT (tenant_id, document_id, page) DO NOTHING;

-- name: page_starts
-- Where each page starts in the text of the tenant's documents (text: one page).
SELECT id, coalesce(page_starts, '{0}') AS page_starts FROM document
WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s);

-- name: page_geometries
-- The geometry of the pages asked for, as (document, 0-based page) pairs; pages without one
-- (a DOCX) are left out.
SELECT p.document_id, p.page, p.geometry
FROM unnest(%(document_ids)s::text[], %(pages)s::integer[]) AS wanted (document_id, page)
JOIN document_page p ON p.tenant_id = %(tenant_id)s AND p.document_id = wanted.document_id
                     AND p.page = wanted.page
WHERE p.geometry IS NOT NULL;

-- name: create_run
-- Insert a run and its pending steps, unless this tenant already used the idempotency key.
-- With %(inline_step)s (the pipeline's first step is extract_text: its prompt version) and a
-- document whose text is known, that step is done here, at once (known_text_summary): the
-- run starts at its second step, and its first costs no message, claim or publish.
WITH inline AS (
    SELECT known_text_summary(d) AS output,
           d.content_sha256
    FROM document d
    WHERE d.tenant_id = %(tenant_id)s AND d.id = %(document_id)s
      AND %(inline_step)s::text IS NOT NULL AND cardinality(%(steps)s::text[]) > 1
), known AS (
    SELECT count(*) FILTER (WHERE output IS NOT NULL)::integer AS steps_done FROM inline
), new_run AS (
    INSERT INTO pipeline_run (id, tenant_id, pipeline, pipeline_hash, document_id, lane, batch_id,
                              current_step, steps_done, steps_total, budget_usd, deadline_at,
                              admitted_at, callback_url, idempotency_key, request_hash,
                              traceparent, priority)
    SELECT %(id)s, %(tenant_id)s, %(pipeline)s, %(pipeline_hash)s, %(document_id)s, %(lane)s,
           %(batch_id)s, (%(steps)s::text[])[1 + known.steps_done], known.steps_done,
           cardinality(%(steps)s::text[]), %(budget_usd)s, %(deadline_at)s,
           CASE WHEN %(admitted)s THEN now() END, %(callback_url)s, %(idempotency_key)s,
           %(request_hash)s, %(traceparent)s, %(priority)s
    FROM known
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING id, request_hash, current_step, steps_done
), new_steps AS (
    INSERT INTO pipeline_step_result (run_id, step, step_index, status, output,
                                      input_tokens, output_tokens, cost_usd, prompt_version,
                                      started_at, finished_at, input_hash)
    SELECT new_run.id, s.step, s.ordinality - 1, coalesce(done.status, 'pending'), done.output,
           done.tokens, done.tokens, done.tokens, done.prompt_version, done.at, done.at,
           done.input_hash
    FROM new_run CROSS JOIN unnest(%(steps)s::text[]) WITH ORDINALITY AS s (step, ordinality)
    LEFT JOIN LATERAL (
        -- The same row record_step_result would leave (input_hash as claim_step hashes it),
        -- but for its attempt: 0, no worker claimed it.
        SELECT 'done' AS status, i.output, 0 AS tokens,
               %(inline_step)s::text AS prompt_version, now() AS at,
               encode(sha256(convert_to(concat_ws(E'\n', %(pipeline_hash)s::text, s.step,
                                                  i.content_sha256, '{}'), 'UTF8')),
                      'hex') AS input_hash
        FROM inline i
        WHERE s.ordinality = 1 AND i.output IS NOT NULL
    ) done ON true
)
SELECT id, request_hash, true AS created, current_step, steps_done FROM new_run
UNION ALL
SELECT id, request_hash, false AS created, current_step, steps_done
FROM pipeline_run
WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s
  AND NOT EXISTS (SELECT 1 FROM new_run);

-- name: enqueue_step
-- Write the message for a run's pending current step into the outbox, for its lane's queue
-- (`queues`: lane -> queue name). A message parked until `available_at` (start_at, a long
-- retry wait) also makes the step not claimable before then (claim_step).
WITH target AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = greatest(now(), coalesce(%(available_at)s, now())),
        not_before = coalesce(%(available_at)s, s.not_before)
    FROM pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND r.id = s.run_id
      AND s.status = 'pending' AND r.status IN ('queued', 'running') AND r.current_step = s.step
    RETURNING s.run_id, s.step, r.lane, r.traceparent
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent, available_at)
SELECT 'step', run_id, step, %(queues)s::jsonb ->> lane, traceparent,
       coalesce(%(available_at)s, now())
FROM target
RETURNING id;

-- name: claim_step
-- Lease a run's current step: pending, or running under a lease that was lost (its worker's
-- session is gone, or it expired); tied to the claimer's session (`session`: its lock key,
-- NULL for the TTL alone); with what the step reads: the document text and the outputs of
-- the steps done before it. Only once the run is admitted and the step is due (not_before:
-- a retry's wait, start_at), so that a duplicated or forged message cannot jump admission
-- or a wait.
WITH claimed AS (
    UPDATE pipeline_step_result s
    SET status = 'running', attempt = s.attempt + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        lease_session = %(session)s, started_at = now(), not_before = NULL
    FROM pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND r.id = s.run_id
      AND r.status IN ('queued', 'running') AND r.current_step = s.step
      AND (r.deadline_at IS NULL OR r.deadline_at > now())
      AND r.admitted_at IS NOT NULL
      AND (s.not_before IS NULL OR s.not_before <= now())
      AND CASE s.status WHEN 'pending' THEN true
                        WHEN 'running' THEN lease_lost(s.lease_expires_at, s.lease_session,
                                                       %(lease_s)s)
                        ELSE false END
    RETURNING s.run_id, s.step, s.attempt, s.generation
), started AS (
    UPDATE pipeline_run r SET status = 'running', updated_at = now()
    FROM claimed
    WHERE r.id = claimed.run_id AND r.status = 'queued'
), delivered AS (
    -- Its message reached a worker: the outbox row needs no sweep (see lock_due_outbox).
    UPDATE outbox o SET published_at = now()
    FROM claimed
    WHERE o.run_id = claimed.run_id AND o.step = claimed.step AND o.topic = 'step'
      AND o.published_at IS NULL
)
SELECT c.run_id::text, c.step, c.attempt, c.generation, r.tenant_id, r.pipeline,
       r.pipeline_hash, r.document_id, r.lane, r.batch_id::text, d.content AS document,
       coalesce(d.page_starts, '{0}') AS page_starts, d.content_sha256 AS document_sha256,
       o.outputs, h.input_hash, s.model_override,
       reuse.id AS reusable_decision_id, reuse.output_after AS reusable_output
FROM claimed c
JOIN pipeline_run r ON r.id = c.run_id
JOIN pipeline_step_result s ON s.run_id = c.run_id AND s.step = c.step
LEFT JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(e.step, e.output), '{}'::jsonb) AS outputs
    FROM pipeline_step_result e
    WHERE e.run_id = c.run_id AND e.status = 'done'
) o
-- What the step reads, hashed: its definition, the document and the earlier outputs (jsonb
-- prints equal values alike). Another run whose same step read the same and was approved
-- by a person gives its reviewed output instead of asking anyone again.
CROSS JOIN LATERAL (
    SELECT encode(sha256(convert_to(concat_ws(E'\n', r.pipeline_hash, c.step, d.content_sha256,
                                              o.outputs::text), 'UTF8')), 'hex') AS input_hash
) h
LEFT JOIN LATERAL (
    SELECT rd.id, rd.output_after
    FROM review_decision rd
    WHERE rd.tenant_id = r.tenant_id AND rd.pipeline_hash = r.pipeline_hash
      AND rd.step = c.step AND rd.input_hash = h.input_hash AND rd.action = 'approve'
      AND rd.run_id <> c.run_id
    ORDER BY rd.id DESC
    LIMIT 1
) reuse ON true;

-- name: step_state
-- Why a step could not be claimed: its own state and its run's.
SELECT s.status, NOT lease_lost(s.lease_expires_at, s.lease_session, %(lease_s)s) AS lease_live,
       r.status AS run_status,
       coalesce(r.deadline_at <= now(), false) AS past_deadline,
       r.admitted_at IS NOT NULL AS admitted, coalesce(r.current_step = s.step, false) AS current,
       greatest(0, coalesce(extract(epoch FROM s.not_before - now()), 0))::float AS due_in_s
FROM pipeline_step_result s JOIN pipeline_run r ON r.id = s.run_id
WHERE s.run_id = %(run_id)s AND s.step = %(step)s;

-- name: renew_lease
-- Extend the lease of a step this worker still holds, while its run goes on, under the key
-- of the session the worker holds now (a new one after its lease connection was replaced).
UPDATE pipeline_step_result s
SET lease_expires_at = now() + make_interval(secs => %(lease_s)s), lease_session = %(session)s
FROM pipeline_run r
WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND s.status = 'running'
  AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status IN ('queued', 'running')
RETURNING s.lease_expires_at;

-- name: release_step
-- Give a leased step back after a transient failure; it may be claimed again once
-- `retry_in_s` has passed. An attempt that only waited for the provider limiter is refunded. Not once its run ended
-- (cancelled meanwhile): a retry would be a message nobody wants.
UPDATE pipeline_step_result s
SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, error = %(error)s,
    attempt = s.attempt - %(refund)s::integer,
    not_before = now() + make_interval(secs => %(retry_in_s)s)
FROM pipeline_run r
WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND s.status = 'running'
  AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status IN ('queued', 'running')
RETURNING s.attempt;

-- name: record_step_result
-- Save a step's output with its tokens and cost, move the run on to its next step and put
-- that step's message in the outbox (as enqueue_step does): one statement, so one commit.
-- The message comes back whole, for the worker to publish without another round trip
-- (its row is marked delivered by the claim of the step: claim_step).
-- After its last step the run is 'done'. When %(review)s holds reasons (a rule asked for a
-- person), the run pauses in 'needs_review' at this step instead, with no message sent.
-- %(decision_id)s: the output is an approval reused from an earlier run.
WITH calls AS (
    SELECT coalesce(sum(input_tokens), 0) AS input_tokens,
           coalesce(sum(output_tokens), 0) AS output_tokens,
           coalesce(sum(cost_usd), 0) AS cost_usd,
           string_agg(DISTINCT model, ',') FILTER (WHERE status = 'ok') AS models
    FROM llm_call_log
    WHERE run_id = %(run_id)s AND step = %(step)s AND generation = %(generation)s
), done AS (
    UPDATE pipeline_step_result s
    SET status = 'done', output = %(output)s, input_tokens = calls.input_tokens,
        output_tokens = calls.output_tokens, cost_usd = calls.cost_usd,
        model = coalesce(calls.models, %(model)s), prompt_version = %(prompt_version)s,
        lease_owner = NULL, lease_expires_at = NULL, error = NULL, finished_at = now(),
        input_hash = %(input_hash)s, review_decision_id = %(decision_id)s,
        review_reused = %(decision_id)s::bigint IS NOT NULL
    FROM calls, pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND s.status = 'running'
      AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status = 'running'
    RETURNING s.run_id
), advanced AS (
    UPDATE pipeline_run r
    SET steps_done = r.steps_done + 1, updated_at = now(),
        current_step = CASE WHEN %(review)s::jsonb IS NULL THEN %(next_step)s ELSE %(step)s END,
        status = CASE WHEN %(review)s::jsonb IS NOT NULL THEN 'needs_review'
                      WHEN %(next_step)s::text IS NULL THEN 'done' ELSE r.status END,
        error = coalesce(%(review_error)s::text, r.error),
        finished_at = CASE WHEN %(review)s::jsonb IS NOT NULL OR %(next_step)s::text IS NULL
                           THEN now() END,
        review_step = CASE WHEN %(review)s::jsonb IS NOT NULL THEN %(step)s END,
        review_reason = CASE WHEN %(review)s::jsonb IS NOT NULL THEN 'rule' END,
        review_reasons = %(review)s::jsonb,
        review_since = CASE WHEN %(review)s::jsonb IS NOT NULL THEN now() END,
        review_revision = r.review_revision + (%(review)s::jsonb IS NOT NULL)::integer
    FROM done
    WHERE r.id = done.run_id
    RETURNING r.id, r.status, r.batch_id, r.lane, r.traceparent, r.current_step
), next_step AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = now()
    FROM advanced a
    WHERE s.run_id = a.id AND s.step = a.current_step AND s.status = 'pending'
      AND a.status IN ('queued', 'running')
    RETURNING s.run_id, s.step
), message AS (
    INSERT INTO outbox (topic, run_id, step, queue, traceparent, available_at)
    SELECT 'step', a.id, n.step, %(queues)s::jsonb ->> a.lane, a.traceparent, now()
    FROM advanced a JOIN next_step n ON n.run_id = a.id
    RETURNING id, topic, run_id::text, step, queue, traceparent
)
SELECT a.status AS run_status,
       coalesce((SELECT jsonb_agg(to_jsonb(m) ORDER BY m.id) FROM message m), '[]') AS messages
FROM advanced a;

-- name: fail_run
-- End a run at a step that cannot succeed: 'failed' (permanent), 'budget_exceeded', or a
-- pause in 'needs_review' for a person (%(review_reason)s says what kind), keeping the
-- step's last output (one that broke its schema) and what it read for the reviewer.
WITH failed_step AS (
    UPDATE pipeline_step_result
    SET status = 'failed', error = %(error)s, lease_owner = NULL, lease_expires_at = NULL,
        finished_at = now(), output = %(output)s, input_hash = %(input_hash)s
    WHERE run_id = %(run_id)s AND step = %(step)s AND status IN ('pending', 'running')
      AND (lease_owner IS NULL OR lease_owner = %(owner)s)
    RETURNING run_id
)
UPDATE pipeline_run r
SET status = %(status)s, error = %(error)s, finished_at = now(), updated_at = now(),
    review_step = CASE WHEN %(status)s = 'needs_review' THEN %(step)s END,
    review_reason = %(review_reason)s, review_reasons = %(review_reasons)s,
    review_since = CASE WHEN %(status)s = 'needs_review' THEN now() END,
    review_revision = r.review_revision + (%(status)s = 'needs_review')::integer
FROM failed_step
WHERE r.id = failed_step.run_id AND r.status IN ('queued', 'running')
RETURNING r.id, r.status, r.batch_id;

-- name: abandon_step
-- Drop the lease of a step whose run stopped while it ran (cancelled, expired).
UPDATE pipeline_step_result
SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, finished_at = now()
WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'running'
  AND lease_owner = %(owner)s;

-- name: cancel_run
-- Stop a run that has not ended; a step already running finishes its calls and is dropped.
WITH cancelled AS (
    UPDATE pipeline_run
    SET status = 'cancelled', error = 'cancelled on request', finished_at = now(),
        updated_at = now()
    WHERE id = %(run_id)s AND tenant_id = %(tenant_id)s AND status IN ('queued', 'running')
    RETURNING id
), steps AS (
    UPDATE pipeline_step_result s SET status = 'cancelled'
    FROM cancelled
    WHERE s.run_id = cancelled.id AND s.status = 'pending'
), unsent AS (
    DELETE FROM outbox o USING cancelled
    WHERE o.run_id = cancelled.id AND o.published_at IS NULL
)
SELECT id FROM cancelled;

-- name: expire_run
-- End a run whose deadline passed; work past it is worth nothing to the caller.
WITH expired AS (
    UPDATE pipeline_run
    SET status = 'expired', error = 'deadline passed before the run finished',
        finished_at = now(), updated_at = now()
    WHERE id = %(run_id)s AND status IN ('queued', 'running') AND deadline_at <= now()
    RETURNING id
), steps AS (
    UPDATE pipeline_step_result s SET status = 'cancelled'
    FROM expired
    WHERE s.run_id = expired.id AND s.status = 'pending'
)
SELECT id FROM expired;

-- name: restart_run
-- Reopen an ended run at one step; the steps before it must be done and stay as they are.
-- It keeps its deadline (not once that has passed). A batch-lane run waits for admission
-- again, like a new one. A run of a cancelled (or over-budget) batch stays stopped; a run of
-- a finished batch reopens the batch, which finishes again with it.
WITH reopened AS (
    UPDATE pipeline_run r
    SET status = 'queued', current_step = %(step)s, steps_done = %(step_index)s, error = NULL,
        finished_at = NULL, notified_at = NULL, updated_at = now(),
        pipeline_hash = %(pipeline_hash)s,
        admitted_at = CASE WHEN r.lane = 'batch' THEN NULL ELSE r.admitted_at END,
        review_step = NULL, review_reason = NULL, review_reasons = NULL, review_since = NULL,
        review_revision = r.review_revision + (r.status = 'needs_review')::integer
    WHERE r.id = %(run_id)s AND r.tenant_id = %(tenant_id)s
      AND r.status IN ('done', 'failed', 'needs_review', 'cancelled', 'expired',
                       'budget_exceeded')
      AND (r.deadline_at IS NULL OR r.deadline_at > now())
      AND NOT EXISTS (SELECT 1 FROM pipeline_step_result
                      WHERE run_id = %(run_id)s AND step_index < %(step_index)s
                        AND status <> 'done')
      AND NOT EXISTS (SELECT 1 FROM batch b
                      WHERE b.id = r.batch_id AND b.status IN ('cancelled', 'budget_exceeded'))
    RETURNING r.id, r.batch_id
), batch_reopened AS (
    UPDATE batch b SET status = 'running', finished_at = NULL, notified_at = NULL
    FROM reopened
    WHERE b.id = reopened.batch_id AND b.status = 'done'
)
UPDATE pipeline_step_result s
SET status = 'pending', attempt = 0, generation = s.generation + 1, output = NULL,
    input_tokens = NULL, output_tokens = NULL, cost_usd = NULL, model = NULL,
    prompt_version = NULL, error = NULL, lease_owner = NULL, lease_expires_at = NULL,
    not_before = NULL, enqueued_at = NULL, started_at = NULL, finished_at = NULL,
    input_hash = NULL, review_decision_id = NULL, review_reused = false,
    model_override = CASE WHEN s.step = %(step)s THEN %(model)s::text END
FROM reopened
WHERE s.run_id = reopened.id AND s.step_index >= %(step_index)s
RETURNING s.step;

-- name: run_deadline
-- A run's deadline, and whether it has passed (for error messages).
SELECT deadline_at, deadline_at <= now() AS passed FROM pipeline_run WHERE id = %(run_id)s;

-- name: run_status
-- Runs as their owner sees them, with their latest webhook delivery (ids of other tenants'
-- runs give nothing).
SELECT r.id::text AS run_id, r.tenant_id, r.pipeline, r.document_id, r.lane, r.priority,
       r.batch_id::text, r.status,
       CASE WHEN r.status IN ('queued', 'running') THEN r.current_step END AS current_step,
       r.steps_done, r.steps_total, r.cost_usd AS cost_so_far_usd, r.error, r.created_at,
       r.finished_at,
       CASE WHEN r.status = 'needs_review' THEN
           jsonb_build_object('step', r.review_step, 'reason', r.review_reason,
                              'reasons', coalesce(r.review_reasons, '[]'::jsonb),
                              'revision', r.review_revision, 'waiting_since', r.review_since)
       END AS review,
       coalesce((SELECT jsonb_agg(to_jsonb(d) ORDER BY d.id)
                 FROM (SELECT id, step, revision, action, reviewer_key_id, reviewer_name,
                              reason, output_before, output_after, edits, diff, retry_from,
                              retry_model, decided_at
                       FROM review_decision WHERE run_id = r.id) d), '[]'::jsonb) AS decisions,
       (SELECT to_jsonb(w) FROM (SELECT status, attempts, last_status, last_error, delivered_at,
                                        CASE WHEN status = 'pending'
                                             THEN next_attempt_at END AS next_attempt_at
                                 FROM webhook_delivery WHERE run_id = r.id
                                 ORDER BY id DESC LIMIT 1) w) AS webhook
FROM pipeline_run r
WHERE r.id = ANY(%(run_ids)s::uuid[]) AND r.tenant_id = %(tenant_id)s;

-- name: run_steps
-- Every step of these runs in pipeline order, with what it cost and where its calls went
-- (model and routing reason, counted over the step's current generation); the outputs
-- when asked for, or of the runs whose status is one of `output_statuses`.
SELECT s.run_id::text, s.step, s.status, s.attempt, s.generation, s.model, s.prompt_version,
       s.input_tokens, s.output_tokens, s.cost_usd, s.error, s.started_at, s.finished_at,
       CASE WHEN s.review_reused THEN 'reused'
            WHEN s.review_decision_id IS NOT NULL THEN 'approved' END AS reviewed,
       CASE WHEN %(with_output)s OR r.status = ANY(%(output_statuses)s::text[])
            THEN s.output END AS output,
       coalesce((SELECT jsonb_agg(jsonb_build_object('model', c.model, 'reason', c.reason,
                                                     'calls', c.calls)
                                  ORDER BY c.first_id)
                 FROM (SELECT model, route_reason AS reason, count(*) AS calls,
                              min(id) AS first_id
                       FROM llm_call_log
                       WHERE run_id = s.run_id AND step = s.step
                         AND generation = s.generation AND route_reason IS NOT NULL
                       GROUP BY model, route_reason) c), '[]'::jsonb) AS model_choices
FROM pipeline_step_result s JOIN pipeline_run r ON r.id = s.run_id
-- Both sides by id: the runs are found by their primary key, never by the tenant's index
-- (a hash of every run of the tenant, per poll, when the statistics lag a large batch).
WHERE s.run_id = ANY(%(run_ids)s::uuid[]) AND r.id = ANY(%(run_ids)s::uuid[])
  AND r.tenant_id = %(tenant_id)s
ORDER BY s.run_id, s.step_index;

-- name: check_and_start_calls
-- Before a round of a step's calls (one or several sent together): each call's memoised
-- answer if any, whether the run still runs and the step is still leased to this worker,
-- the run's priority and the spending of the run, its batch and (when it has a budget) the
-- step against budgets; for each call that all allow (its estimated cost included), its
-- llm_call_log row (for the step's first candidate model) is written in the same statement,
-- still before any request is sent. One row per call, in the order given.
WITH checked AS (
    SELECT (SELECT lease_owner FROM pipeline_step_result
            WHERE run_id = r.id AND step = %(step)s) AS lease_owner,
           r.id AS run_id, r.status, r.priority, r.cost_usd, r.budget_usd,
           b.cost_usd AS batch_cost_usd, b.budget_usd AS batch_budget_usd,
           -- A step's spending is summed only for a step that has a budget of its own.
           CASE WHEN %(step_budget_usd)s::numeric IS NOT NULL THEN
               (SELECT coalesce(sum(cost_usd), 0) FROM llm_call_log
                WHERE run_id = r.id AND step = %(step)s AND generation = %(generation)s)
           END AS step_cost_usd
    FROM pipeline_run r
    LEFT JOIN batch b ON b.id = r.batch_id
    WHERE r.id = %(run_id)s
), wanted AS (
    SELECT w.*,
           (SELECT response
            FROM llm_call_log
            WHERE run_id = %(run_id)s AND step = %(step)s AND generation = %(generation)s
              AND call_key = w.call_key AND status = 'ok'
            ORDER BY id DESC
            LIMIT 1) AS memo
    FROM ROWS FROM (jsonb_to_recordset(%(calls)s::jsonb)
                    AS (call_key text, model text, provider text, route_reason text,
                        output_mode text, max_tokens integer, temperature numeric, seed bigint,
                        estimated_cost_usd numeric)) WITH ORDINALITY
         AS w (call_key, model, provider, route_reason, output_mode, max_tokens, temperature,
               seed, estimated_cost_usd, n)
), started AS (
    INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id,
                              model, prompt_version, provider, route_reason, output_mode,
                              max_tokens, temperature, seed)
    SELECT k.run_id, %(step)s, %(generation)s, w.call_key, %(step_attempt)s, %(tenant_id)s,
           w.model, %(prompt_version)s, w.provider, w.route_reason, w.output_mode,
           w.max_tokens, w.temperature, w.seed
    FROM wanted w CROSS JOIN checked k
    WHERE w.memo IS NULL AND k.status IN ('queued', 'running')
      AND (%(owner)s::text IS NULL OR k.lease_owner = %(owner)s)
      AND (k.budget_usd IS NULL OR k.cost_usd + w.estimated_cost_usd <= k.budget_usd)
      AND (k.batch_budget_usd IS NULL
           OR k.batch_cost_usd + w.estimated_cost_usd <= k.batch_budget_usd)
      AND (k.step_cost_usd IS NULL
           OR k.step_cost_usd + w.estimated_cost_usd <= %(step_budget_usd)s)
    ORDER BY w.n
    RETURNING id, call_key
)
SELECT w.memo, k.lease_owner, k.status, k.priority, k.cost_usd, k.budget_usd,
       k.batch_cost_usd, k.batch_budget_usd, k.step_cost_usd, s.id AS call_id
FROM wanted w
CROSS JOIN checked k
LEFT JOIN started s ON s.call_key = w.call_key
ORDER BY w.n;

-- name: start_call
-- Log a provider call before it is sent.
INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id, model,
                          prompt_version, provider, route_reason, output_mode, max_tokens,
                          temperature, seed)
VALUES (%(run_id)s, %(step)s, %(generation)s, %(call_key)s, %(step_attempt)s, %(tenant_id)s,
        %(model)s, %(prompt_version)s, %(provider)s, %(route_reason)s, %(output_mode)s,
        %(max_tokens)s, %(temperature)s, %(seed)s)
RETURNING id;

-- name: route_call
-- Before it is sent, move a call's row to the model the router chose (and its request).
UPDATE llm_call_log
SET model = %(model)s, provider = %(provider)s, route_reason = %(route_reason)s,
    output_mode = %(output_mode)s, max_tokens = %(max_tokens)s, temperature = %(temperature)s,
    seed = %(seed)s
WHERE id = %(id)s AND status = 'sent';

-- name: finish_calls
-- Complete calls' log rows (each once; those whose answers arrived together in one
-- statement) and add their cost to their runs and to the runs' batches.
WITH finished AS (
    SELECT *
    FROM jsonb_to_recordset(%(finished)s::jsonb)
         AS f (id bigint, status text, http_status integer, error_kind text, error text,
               input_tokens integer, output_tokens integer, cost_usd numeric, latency_ms integer,
               response jsonb, route_reason text, finish_reason text, usage_estimated boolean)
), call AS (
    UPDATE llm_call_log c
    SET status = f.status, http_status = f.http_status, error_kind = f.error_kind,
        error = f.error, input_tokens = f.input_tokens, output_tokens = f.output_tokens,
        cost_usd = f.cost_usd, latency_ms = f.latency_ms, response = f.response,
        route_reason = coalesce(f.route_reason, c.route_reason),
        finish_reason = f.finish_reason, usage_estimated = f.usage_estimated,
        finished_at = now()
    FROM finished f
    WHERE c.id = f.id AND c.status = 'sent'
    RETURNING c.run_id, c.cost_usd
), run AS (
    UPDATE pipeline_run r
    SET cost_usd = r.cost_usd + spent.cost_usd, updated_at = now()
    FROM (SELECT run_id, sum(cost_usd) AS cost_usd FROM call GROUP BY run_id) spent
    WHERE r.id = spent.run_id
    RETURNING r.batch_id, spent.cost_usd
)
UPDATE batch b
SET cost_usd = b.cost_usd + spent.cost_usd
FROM (SELECT batch_id, sum(cost_usd) AS cost_usd FROM run GROUP BY batch_id) spent
WHERE b.id = spent.batch_id AND spent.cost_usd > 0;

-- name: take_outbox_ids
-- Unpublished outbox rows among the given ids that are due, locked for this publisher (rows
-- another one holds are skipped) and marked published with their steps' enqueue time, as
-- mark_published does, in one statement: the caller commits only once the broker has them.
WITH taken AS (
    SELECT id FROM outbox
    WHERE id = ANY(%(ids)s) AND published_at IS NULL AND available_at <= now()
    FOR UPDATE SKIP LOCKED
), published AS (
    UPDATE outbox o SET published_at = now()
    FROM taken
    WHERE o.id = taken.id
    RETURNING o.id, o.topic, o.run_id, o.step, o.queue, o.traceparent, o.payload
), steps AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = now()
    FROM published p
    WHERE p.topic = 'step' AND s.run_id = p.run_id AND s.step = p.step AND s.status = 'pending'
), deliveries AS (
    UPDATE webhook_delivery d
    SET enqueued_at = now()
    FROM published p
    WHERE p.topic = 'webhook' AND d.id = (p.payload ->> 'delivery_id')::bigint
      AND d.status = 'pending'
)
SELECT id, topic, run_id::text, step, queue, traceparent, payload FROM published ORDER BY id;

-- name: lock_due_outbox
-- Rows whose publish was lost or whose parked delay is over, oldest first. A step's message
-- published right after its commit is marked delivered only by its claim (claim_step): it is
-- lost only once it is older than every message still waiting in its queue (queues are
-- FIFO: `cutoffs`, queue -> instant, from the sweep's look at Redis), or it would be sent
-- twice while it waits, and `lost_after_s` old, or it would be sent twice while a worker
-- that took it has yet to claim its step.
SELECT id, topic, run_id::text, step, queue, traceparent, payload
FROM outbox
WHERE published_at IS NULL AND available_at <= now() - make_interval(secs => %(grace_s)s)
  AND (topic <> 'step' OR available_at > created_at
       OR (created_at < now() - make_interval(secs => %(lost_after_s)s)
           AND created_at < coalesce((%(cutoffs)s::jsonb ->> queue)::timestamptz, '-infinity')))
ORDER BY available_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: mark_published
-- Record that these rows reached the broker, and when their steps and webhooks were enqueued.
WITH published AS (
    UPDATE outbox SET published_at = now()
    WHERE id = ANY(%(ids)s)
    RETURNING topic, run_id, step, payload
), deliveries AS (
    UPDATE webhook_delivery d
    SET enqueued_at = now()
    FROM published p
    WHERE p.topic = 'webhook' AND d.id = (p.payload ->> 'delivery_id')::bigint
      AND d.status = 'pending'
)
UPDATE pipeline_step_result s
SET enqueued_at = now()
FROM published p
WHERE p.topic = 'step' AND s.run_id = p.run_id AND s.step = p.step AND s.status = 'pending';

-- name: start_periodic_job
-- Take a periodic job's session lock (none while another run of it goes on) and, holding it,
-- start the job unless it already started less than min_gap_s ago (another beat): one round
-- trip. `held`: the lock is this session's now (release it with finish_periodic_job).
WITH lock AS (
    SELECT pg_try_advisory_lock(%(lock_key)s) AS held
), started AS (
    INSERT INTO periodic_job (name, last_started_at, runs)
    SELECT %(name)s, now(), 1 FROM lock WHERE held
    ON CONFLICT (name) DO UPDATE
    SET last_started_at = now(), runs = periodic_job.runs + 1
    WHERE periodic_job.last_started_at <= now() - make_interval(secs => %(min_gap_s)s)
    RETURNING runs
)
SELECT held, (SELECT runs FROM started) AS runs FROM lock;

-- name: finish_periodic_job
-- Record when and with what result a periodic job ended (none: it failed), and release its
-- session lock.
WITH finished AS (
    UPDATE periodic_job SET last_finished_at = now(), last_result = %(result)s
    WHERE name = %(name)s AND %(result)s::jsonb IS NOT NULL
)
SELECT pg_advisory_unlock(%(lock_key)s) AS released;

-- name: metrics_runs_by_status
-- Runs per status and lane, for the runs-by-status gauge (served by beat only).
SELECT status, lane, count(*) AS runs FROM pipeline_run GROUP BY status, lane;

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

-- name: reap_lost_leases
-- Hand steps whose worker is gone (its session ended) or stopped renewing its lease (cut
-- off: the lease expired) back to the queue, through the outbox.
WITH reaped AS (
    UPDATE pipeline_step_result s
    SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, enqueued_at = now(),
        error = CASE WHEN s.lease_expires_at < now() THEN 'lease expired: worker lost'
                     ELSE 'lease lost: the worker''s session ended' END
    FROM pipeline_run r
    WHERE s.status = 'running' AND lease_lost(s.lease_expires_at, s.lease_session, %(lease_s)s)
      AND r.id = s.run_id
      AND r.status IN ('queued', 'running') AND r.current_step = s.step
      -- Leases ran out while PostgreSQL itself was down: live workers get one lease period
      -- to renew before their steps are handed on (or both would pay for the same calls).
      AND pg_postmaster_start_time() < now() - make_interval(secs => %(lease_s)s)
    RETURNING s.run_id, s.step, r.lane, r.traceparent
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent)
SELECT 'step', run_id, step, %(queues)s::jsonb ->> lane, traceparent FROM reaped
RETURNING id, run_id, step;

-- name: redrive_lost_steps
-- Re-enqueue pending current steps whose message is gone: published before the oldest
-- message still waiting in their queue (so it was consumed or lost), and not picked up.
WITH lost AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = now()
    FROM pipeline_run r
    WHERE s.status = 'pending' AND r.id = s.run_id AND r.current_step = s.step
      AND r.status IN ('queued', 'running') AND r.admitted_at IS NOT NULL
      AND greatest(s.enqueued_at, s.not_before) < now() - make_interval(secs => %(grace_s)s)
      AND s.enqueued_at < CASE r.lane WHEN 'interactive' THEN %(interactive_cutoff)s::timestamptz
                                      ELSE %(batch_cutoff)s::timestamptz END
      AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.run_id = s.run_id AND o.step = s.step
                        AND o.published_at IS NULL)
    RETURNING s.run_id, s.step, r.lane, r.traceparent
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent)
SELECT 'step', run_id, step, %(queues)s::jsonb ->> lane, traceparent FROM lost
RETURNING id, run_id, step;

-- name: expire_overdue_runs
-- End every active run whose deadline has passed.
WITH expired AS (
    UPDATE pipeline_run
    SET status = 'expired', error = 'deadline passed before the run finished',
        finished_at = now(), updated_at = now()
    WHERE status IN ('queued', 'running') AND deadline_at <= now()
    RETURNING id
), steps AS (
    UPDATE pipeline_step_result s SET status = 'cancelled'
    FROM expired
    WHERE s.run_id = expired.id AND s.status = 'pending'
)
SELECT id FROM expired;

-- name: abandon_orphaned_steps
-- Release steps still marked running under a lost lease although their run has ended.
UPDATE pipeline_step_result s
SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, finished_at = now()
FROM pipeline_run r
WHERE s.status = 'running' AND lease_lost(s.lease_expires_at, s.lease_session, %(lease_s)s)
  AND r.id = s.run_id
  AND r.status NOT IN ('queued', 'running');

-- name: create_batch
-- Insert a batch unless this tenant already used the idempotency key.
WITH new_batch AS (
    INSERT INTO batch (id, tenant_id, pipeline, runs_total, budget_usd, run_budget_usd,
                       callback_url, deadline_at, idempotency_key, request_hash)
    VALUES (%(id)s, %(tenant_id)s, %(pipeline)s, %(runs_total)s, %(budget_usd)s,
            %(run_budget_usd)s, %(callback_url)s, %(deadline_at)s, %(idempotency_key)s,
            %(request_hash)s)
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
                              idempotency_key, request_hash, traceparent, priority)
    SELECT d.run_id, %(tenant_id)s, %(pipeline)s, %(pipeline_hash)s, d.document_id, 'batch',
           %(batch_id)s::uuid, (%(steps)s::text[])[1 + (d.output IS NOT NULL)::integer],
           (d.output IS NOT NULL)::integer, cardinality(%(steps)s::text[]),
           %(run_budget_usd)s, %(deadline_at)s,
           -- batch_results reads the document's place in the request back from this key.
           'batch:' || %(batch_id)s::text || ':' || d.ordinality,
           d.document_id, %(traceparent)s, %(priority)s
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
-- A page of a batch's runs (keyset pagination by run id).
SELECT id::text AS run_id, document_id, status, current_step, steps_done, steps_total,
       cost_usd, error
FROM pipeline_run
WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
ORDER BY id
LIMIT %(limit)s;

-- name: batch_results
-- A batch's runs by run id after `after` (the export's resume cursor), with each step's
-- output in pipeline order (null until the step is done) and, while a run awaits a person,
-- its review (as run_status gives it), for GET /batches/{id}/results: read through a
-- server-side cursor. `position` is the document's place in the batch request, 0-based,
-- from the idempotency key create_batch_runs gives each run. The runs are ordered before
-- their outputs are read, so the sort holds ids, not outputs.
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
      WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s
        AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
        AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
      ORDER BY id) r
ORDER BY r.id;

-- name: batch_has_run
-- Whether a run belongs to the batch (a resume cursor must name one of its runs).
SELECT 1 AS found FROM pipeline_run
WHERE id = %(run_id)s::uuid AND batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s;

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

-- name: admit_batch_runs
-- Admit waiting batch runs up to the window of runs in flight, fairly: the next slot goes
-- to the tenant (then the batch) served least so far (least attained service), so a
-- client's 10 documents are not queued behind another's 500. Each admitted run's first
-- step goes into the outbox in the same statement, and comes back whole to be published.
WITH free AS (
    SELECT greatest(0, %(window)s - count(*)) AS slots FROM pipeline_run
    WHERE lane = 'batch' AND admitted_at IS NOT NULL AND status IN ('queued', 'running')
), waiting AS (
    -- A batch's runs go in creation order, so only its first `slots` waiting runs can be
    -- admitted now: only they are ranked, not the whole backlog. A batch's waiting runs
    -- belong to a running batch (stopping a batch ends its runs).
    SELECT w.id, w.tenant_id, b.id AS batch_id, w.created_at, w.batch_rank
    FROM batch b CROSS JOIN free
    CROSS JOIN LATERAL (
        SELECT r.id, r.tenant_id, r.created_at,
               row_number() OVER (ORDER BY r.created_at, r.id) AS batch_rank
        FROM pipeline_run r
        WHERE r.batch_id = b.id AND r.lane = 'batch' AND r.status = 'queued'
          AND r.admitted_at IS NULL
        ORDER BY r.created_at, r.id
        LIMIT free.slots
    ) w
    WHERE b.status = 'running'
    UNION ALL
    -- Batch-lane runs started one at a time (no batch): a tenant's are one more queue.
    SELECT id, tenant_id, NULL, created_at,
           row_number() OVER (PARTITION BY tenant_id ORDER BY created_at, id)
    FROM pipeline_run
    WHERE batch_id IS NULL AND lane = 'batch' AND status = 'queued' AND admitted_at IS NULL
), served_batch AS (
    SELECT batch_id, count(*) AS n FROM pipeline_run
    WHERE batch_id IN (SELECT DISTINCT batch_id FROM waiting) AND admitted_at IS NOT NULL
    GROUP BY batch_id
), served_tenant AS (
    SELECT tenant_id, count(*) AS n FROM pipeline_run
    WHERE lane = 'batch'
      AND admitted_at > now() - make_interval(secs => %(memory_s)s)
    GROUP BY tenant_id
), turns AS (
    SELECT w.id, w.tenant_id, w.created_at, coalesce(sb.n, 0) + w.batch_rank AS batch_turn
    FROM waiting w LEFT JOIN served_batch sb USING (batch_id)
), ordered AS (
    SELECT t.id, t.batch_turn, t.created_at,
           coalesce(st.n, 0)
             + row_number() OVER (PARTITION BY t.tenant_id ORDER BY t.batch_turn, t.created_at)
             AS tenant_turn
    FROM turns t LEFT JOIN served_tenant st USING (tenant_id)
), admitted AS (
    UPDATE pipeline_run r SET admitted_at = now(), updated_at = now()
    WHERE r.id IN (SELECT id FROM ordered
                   ORDER BY tenant_turn, batch_turn, created_at
                   LIMIT (SELECT slots FROM free))
      AND r.admitted_at IS NULL AND r.status = 'queued'
    RETURNING r.id, r.current_step, r.traceparent
), first_steps AS (
    UPDATE pipeline_step_result s SET enqueued_at = now()
    FROM admitted a
    WHERE s.run_id = a.id AND s.step = a.current_step
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent)
SELECT 'step', id, current_step, %(queues)s::jsonb ->> 'batch', traceparent FROM admitted
RETURNING id, topic, run_id::text, step, queue, traceparent;

-- name: queue_run_webhooks
-- Queue the webhook of runs that carry a callback URL and ended, or paused for a person:
-- run.needs_review with the review (step, reason, revision) when one pauses, run.ended when
-- it ends. A decision clears notified_at, so a run that goes on sends its next event too.
WITH ended AS (
    UPDATE pipeline_run SET notified_at = now()
    WHERE callback_url IS NOT NULL AND notified_at IS NULL
      AND status NOT IN ('queued', 'running')
    RETURNING id, callback_url, tenant_id, batch_id, document_id, status, steps_done,
              steps_total, cost_usd, error, finished_at, review_step, review_reason,
              review_reasons, review_revision, review_since
), deliveries AS (
    INSERT INTO webhook_delivery (run_id, tenant_id, url, payload)
    SELECT id, tenant_id, callback_url,
           jsonb_build_object(
               'event', CASE WHEN status = 'needs_review' THEN 'run.needs_review'
                             ELSE 'run.ended' END,
               'run_id', id, 'document_id', document_id, 'batch_id', batch_id,
               'status', status, 'steps_done', steps_done, 'steps_total', steps_total,
               'cost_usd', cost_usd, 'error', error, 'finished_at', finished_at,
               'review', CASE WHEN status = 'needs_review' THEN
                   jsonb_build_object('step', review_step, 'reason', review_reason,
                                      'reasons', coalesce(review_reasons, '[]'::jsonb),
                                      'revision', review_revision,
                                      'waiting_since', review_since)
               END)
    FROM ended
    RETURNING id
)
INSERT INTO outbox (topic, queue, payload)
SELECT 'webhook', %(queue)s, jsonb_build_object('delivery_id', id) FROM deliveries
RETURNING id;

-- name: queue_batch_webhooks
-- Queue the completion webhook of ended batches that carry a callback URL.
WITH ended AS (
    UPDATE batch SET notified_at = now()
    WHERE callback_url IS NOT NULL AND notified_at IS NULL AND status <> 'running'
    RETURNING id, tenant_id, callback_url, status, runs_total, cost_usd, finished_at
), deliveries AS (
    INSERT INTO webhook_delivery (batch_id, tenant_id, url, payload)
    SELECT e.id, e.tenant_id, e.callback_url,
           jsonb_build_object('event', 'batch.ended', 'batch_id', e.id, 'status', e.status,
                              'runs_total', e.runs_total, 'cost_usd', e.cost_usd,
                              'finished_at', e.finished_at,
                              'runs_by_status', (SELECT jsonb_object_agg(status, n)
                                                 FROM (SELECT status, count(*) AS n
                                                       FROM pipeline_run WHERE batch_id = e.id
                                                       GROUP BY status) s))
    FROM ended e
    RETURNING id
)
INSERT INTO outbox (topic, queue, payload)
SELECT 'webhook', %(queue)s, jsonb_build_object('delivery_id', id) FROM deliveries
RETURNING id;

-- name: claim_webhook_attempt
-- Start an attempt of a pending delivery that is due and has no attempt in flight, unless
-- its tenant, or everyone, already has as many attempts in flight as allowed. The attempt
-- holds the delivery until lease_s from now: a worker killed mid-attempt leaves it to the
-- reaper (reap_interrupted_webhook_attempts). Runs after webhook_claim_lock in the same
-- transaction, so two claims never both count the last free place.
WITH load AS (
    SELECT count(*) AS in_flight,
           count(*) FILTER (WHERE w.tenant_id = (SELECT tenant_id FROM webhook_delivery
                                                 WHERE id = %(id)s)) AS tenant_in_flight
    FROM webhook_delivery w
    WHERE w.attempt_expires_at > now()
)
UPDATE webhook_delivery d
SET attempt_expires_at = now() + make_interval(secs => %(lease_s)s)
FROM load
WHERE d.id = %(id)s AND d.status = 'pending' AND d.next_attempt_at <= now()
  AND d.attempt_expires_at IS NULL
  AND load.tenant_in_flight < %(tenant_limit)s AND load.in_flight < %(limit)s
RETURNING d.id, d.tenant_id, d.url, d.payload, d.message_id, d.attempts;

-- name: webhook_claim_lock
-- Serialise claims of webhook attempts until the transaction ends.
SELECT pg_advisory_xact_lock(%(key)s);

-- name: webhook_delivery_state
-- Why a claim found nothing: the delivery's status, whether it is due, whether an attempt
-- of it is in flight.
SELECT status, next_attempt_at <= now() AS due, attempt_expires_at IS NOT NULL AS in_flight
FROM webhook_delivery WHERE id = %(id)s;

-- name: record_webhook_attempt
-- End the attempt in flight and count it: the delivery ends as delivered, or failed once
-- attempts run out; a delivery still pending is parked by park_webhook_attempt.
UPDATE webhook_delivery
SET attempts = attempts + 1, last_status = %(http_status)s, last_error = %(error)s,
    last_attempt_at = now(), attempt_expires_at = NULL,
    delivered_at = CASE WHEN %(delivered)s THEN now() END,
    status = CASE WHEN %(delivered)s THEN 'delivered'
                  WHEN attempts + 1 >= %(max_attempts)s THEN 'failed'
                  ELSE 'pending' END
WHERE id = %(id)s AND status = 'pending' AND attempt_expires_at IS NOT NULL
RETURNING id, status, attempts;

-- name: reap_interrupted_webhook_attempts
-- Attempts whose worker stopped without recording them (killed, lost): each is counted as
-- an interrupted attempt; the deliveries still pending are parked by the caller.
UPDATE webhook_delivery
SET attempts = attempts + 1, last_status = NULL, last_error = %(error)s,
    last_attempt_at = now(), attempt_expires_at = NULL,
    status = CASE WHEN attempts + 1 >= %(max_attempts)s THEN 'failed' ELSE 'pending' END
WHERE status = 'pending' AND attempt_expires_at < now()
RETURNING id, status, attempts;

-- name: park_webhook_attempt
-- Set when a pending delivery's next attempt is due and park its message in the outbox
-- until then.
WITH due AS (
    UPDATE webhook_delivery SET next_attempt_at = now() + make_interval(secs => %(delay_s)s)
    WHERE id = %(id)s AND status = 'pending' AND attempt_expires_at IS NULL
    RETURNING id, next_attempt_at
)
INSERT INTO outbox (topic, queue, payload, available_at)
SELECT 'webhook', %(queue)s, jsonb_build_object('delivery_id', id), next_attempt_at FROM due
RETURNING id;

-- name: redrive_lost_webhooks
-- Re-enqueue pending deliveries whose message is gone: due and sent a while ago, no attempt
-- in flight, no message waiting in the outbox, and sent before the oldest message still
-- waiting in the webhook queue (so it was consumed, or lost with Redis).
WITH lost AS (
    UPDATE webhook_delivery d SET enqueued_at = now()
    WHERE d.status = 'pending' AND d.attempt_expires_at IS NULL
      AND greatest(d.next_attempt_at, coalesce(d.enqueued_at, d.created_at))
          < now() - make_interval(secs => %(grace_s)s)
      AND coalesce(d.enqueued_at, d.created_at) < %(cutoff)s::timestamptz
      AND NOT EXISTS (SELECT 1 FROM outbox o
                      WHERE o.published_at IS NULL AND o.topic = 'webhook'
                        AND o.payload @> jsonb_build_object('delivery_id', d.id))
    RETURNING d.id
)
INSERT INTO outbox (topic, queue, payload)
SELECT 'webhook', %(queue)s, jsonb_build_object('delivery_id', id) FROM lost
RETURNING id;

-- name: tenant_webhook_secrets
-- A tenant's signing secrets that still sign, newest (the current one) first.
SELECT id, secret_encrypted, created_at, expires_at
FROM webhook_secret
WHERE tenant_id = %(tenant_id)s AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at DESC, id;

-- name: webhook_secret_lock
-- Serialise rotations of one tenant's secret until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('docpipe.webhook_secret.' || %(tenant_id)s, 0));

-- name: retire_webhook_secret
-- The first statement of a rotation: secrets retired earlier stop signing (they are
-- deleted) and the current one, if any, signs until previous_valid_for_s from now.
WITH forgotten AS (
    DELETE FROM webhook_secret WHERE tenant_id = %(tenant_id)s AND expires_at IS NOT NULL
)
UPDATE webhook_secret
SET expires_at = now() + make_interval(secs => %(previous_valid_for_s)s)
WHERE tenant_id = %(tenant_id)s AND expires_at IS NULL
RETURNING id, created_at, expires_at;

-- name: create_webhook_secret
-- Store a tenant's new current signing secret, encrypted (after retire_webhook_secret).
INSERT INTO webhook_secret (id, tenant_id, secret_encrypted)
VALUES (%(id)s, %(tenant_id)s, %(secret_encrypted)s)
RETURNING id, created_at, expires_at;

-- name: create_api_key
-- Store a new API key's hash under its public id (a clash of random ids inserts nothing).
INSERT INTO api_key (id, tenant_id, name, key_sha256)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(key_sha256)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, tenant_id, name, created_at, revoked_at, last_used_at;

-- name: use_api_key
-- The key with this id (the caller compares hashes); a valid key's use is noted once a minute.
WITH touched AS (
    UPDATE api_key SET last_used_at = now()
    WHERE id = %(id)s AND key_sha256 = %(key_sha256)s AND revoked_at IS NULL
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT id, tenant_id, key_sha256, revoked_at FROM api_key WHERE id = %(id)s;

-- name: api_key_is_active
-- Whether the key with this id exists and is not revoked (an open event stream asks again).
SELECT id FROM api_key WHERE id = %(id)s AND revoked_at IS NULL;

-- name: list_api_keys
-- Every key (of one tenant, when given), without its hash.
SELECT id, tenant_id, name, created_at, revoked_at, last_used_at
FROM api_key
WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s
ORDER BY tenant_id, created_at, id;

-- name: revoke_api_key
-- Revoke a key for good; nothing if it does not exist or was revoked already.
UPDATE api_key SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, tenant_id, name, created_at, revoked_at, last_used_at;

-- name: prune_call_log
-- Delete up to `limit` provider-call rows older than the retention whose run has ended; a
-- run paused for a person has not (a retry it is given re-sends only unfinished calls).
DELETE FROM llm_call_log
WHERE id IN (
    SELECT c.id
    FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id
    WHERE c.created_at < now() - make_interval(days => %(days)s)
      AND r.status NOT IN ('queued', 'running', 'needs_review')
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
);

-- name: prune_outbox
-- Delete up to `limit` outbox rows published longer ago than the retention.
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at < now() - make_interval(days => %(days)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: prune_runs
-- Delete up to `limit` runs that ended longer ago than the retention, with their steps,
-- calls, decisions and webhook deliveries (ON DELETE CASCADE). Never a run that awaits a
-- person, however long it has waited (its document stays too: a run refers to it), nor
-- while a webhook is still owed; runs of a batch only once the batch has ended and sent its
-- own webhook.
DELETE FROM pipeline_run
WHERE id IN (
    SELECT r.id
    FROM pipeline_run r LEFT JOIN batch b ON b.id = r.batch_id
    WHERE r.status NOT IN ('queued', 'running', 'needs_review')
      AND r.finished_at < now() - make_interval(days => %(days)s)
      AND (r.callback_url IS NULL OR r.notified_at IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM webhook_delivery w
                      WHERE w.run_id = r.id AND w.status = 'pending')
      AND (r.batch_id IS NULL
           OR (b.status <> 'running'
               AND b.finished_at < now() - make_interval(days => %(days)s)
               AND (b.callback_url IS NULL OR b.notified_at IS NOT NULL)))
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
);

-- name: prune_batches
-- Delete up to `limit` ended batches older than the retention whose runs are all gone.
DELETE FROM batch
WHERE id IN (
    SELECT b.id
    FROM batch b
    WHERE b.status <> 'running'
      AND b.finished_at < now() - make_interval(days => %(days)s)
      AND (b.callback_url IS NULL OR b.notified_at IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM pipeline_run r WHERE r.batch_id = b.id)
      AND NOT EXISTS (SELECT 1 FROM webhook_delivery w
                      WHERE w.batch_id = b.id AND w.status = 'pending')
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: prune_documents
-- Delete up to `limit` documents stored longer ago than the retention that no run uses any
-- more (runs go by their own retention, active ones never).
DELETE FROM document
WHERE (tenant_id, id) IN (
    SELECT d.tenant_id, d.id
    FROM document d
    WHERE d.created_at < now() - make_interval(days => %(days)s)
      AND NOT EXISTS (SELECT 1 FROM pipeline_run r
                      WHERE r.tenant_id = d.tenant_id AND r.document_id = d.id)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: batch_status
-- Whether a batch still runs (for error messages).
SELECT status FROM batch WHERE id = %(batch_id)s;

-- name: active_run_definitions
-- The pipeline definitions that runs not yet ended started with, and a few of their ids.
SELECT pipeline, pipeline_hash, count(*) AS runs,
       (array_agg(id::text ORDER BY created_at))[1:3] AS examples
FROM pipeline_run
WHERE status IN ('queued', 'running')
GROUP BY pipeline, pipeline_hash
ORDER BY pipeline;

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

-- name: record_decision
-- Put a decision on record, made on revision %(revision)s (a second decision on the same
-- revision breaks the unique key: the first wins). The reviewer's name is the API key's.
INSERT INTO review_decision (run_id, tenant_id, step, revision, action, reviewer_key_id,
                             reviewer_name, reason, output_before, output_after, edits, diff,
                             retry_from, retry_model, pipeline_hash, input_hash)
VALUES (%(run_id)s, %(tenant_id)s, %(step)s, %(revision)s, %(action)s, %(key_id)s,
        coalesce((SELECT nullif(name, '') FROM api_key WHERE id = %(key_id)s), %(key_id)s,
                 %(fallback_name)s),
        %(reason)s, %(output_before)s, %(output_after)s, %(edits)s, %(diff)s, %(retry_from)s,
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
