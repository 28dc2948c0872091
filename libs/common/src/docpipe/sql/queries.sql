-- Named queries. Each block starts with "-- name: <name>" and a line saying what it does.
-- Transitions are single guarded statements: a lost race matches no row and returns nothing.

-- name: put_document
-- Store a document once; an existing id keeps its content (the caller compares hashes).
WITH inserted AS (
    INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes)
    VALUES (%(tenant_id)s, %(id)s, %(content)s, %(sha256)s, %(size_bytes)s)
    ON CONFLICT (tenant_id, id) DO NOTHING
    RETURNING id, content_sha256, size_bytes, created_at, true AS created
)
SELECT * FROM inserted
UNION ALL
SELECT id, content_sha256, size_bytes, created_at, false AS created
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: get_document
-- A document's metadata and, when asked, its text.
SELECT id, content_sha256, size_bytes, created_at,
       CASE WHEN %(with_content)s THEN content END AS content
FROM document
WHERE tenant_id = %(tenant_id)s AND id = %(id)s;

-- name: create_run
-- Insert a run and its pending steps, unless this tenant already used the idempotency key.
WITH new_run AS (
    INSERT INTO pipeline_run (id, tenant_id, pipeline, document_id, lane, batch_id, current_step,
                              steps_total, budget_usd, deadline_at, admitted_at, callback_url,
                              idempotency_key, request_hash, traceparent)
    VALUES (%(id)s, %(tenant_id)s, %(pipeline)s, %(document_id)s, %(lane)s, %(batch_id)s,
            (%(steps)s::text[])[1], cardinality(%(steps)s::text[]), %(budget_usd)s,
            %(deadline_at)s, CASE WHEN %(admitted)s THEN now() END, %(callback_url)s,
            %(idempotency_key)s, %(request_hash)s, %(traceparent)s)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING id, request_hash
), new_steps AS (
    INSERT INTO pipeline_step_result (run_id, step, step_index)
    SELECT new_run.id, s.step, s.ordinality - 1
    FROM new_run, unnest(%(steps)s::text[]) WITH ORDINALITY AS s (step, ordinality)
)
SELECT id, request_hash, true AS created FROM new_run
UNION ALL
SELECT id, request_hash, false AS created
FROM pipeline_run
WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s
  AND NOT EXISTS (SELECT 1 FROM new_run);

-- name: enqueue_step
-- Write the message for a run's pending current step into the outbox.
WITH target AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = greatest(now(), coalesce(%(available_at)s, now()))
    FROM pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND r.id = s.run_id
      AND s.status = 'pending' AND r.status IN ('queued', 'running') AND r.current_step = s.step
    RETURNING s.run_id, s.step, r.lane, r.traceparent
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent, available_at)
SELECT 'step', run_id, step, 'llm_' || lane, traceparent, coalesce(%(available_at)s, now())
FROM target
RETURNING id;

-- name: claim_step
-- Lease a run's current step: pending, or running under a lease that expired (dead worker).
WITH claimed AS (
    UPDATE pipeline_step_result s
    SET status = 'running', attempt = s.attempt + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        started_at = now(), not_before = NULL
    FROM pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND r.id = s.run_id
      AND r.status IN ('queued', 'running') AND r.current_step = s.step
      AND (r.deadline_at IS NULL OR r.deadline_at > now())
      AND (s.status = 'pending' OR (s.status = 'running' AND s.lease_expires_at < now()))
    RETURNING s.run_id, s.step, s.attempt, s.generation
), started AS (
    UPDATE pipeline_run r SET status = 'running', updated_at = now()
    FROM claimed
    WHERE r.id = claimed.run_id AND r.status = 'queued'
)
SELECT c.run_id, c.step, c.attempt, c.generation, r.tenant_id, r.pipeline, r.document_id,
       r.lane, r.batch_id
FROM claimed c JOIN pipeline_run r ON r.id = c.run_id;

-- name: step_state
-- Why a step could not be claimed: its own state and its run's.
SELECT s.status, s.attempt, s.lease_owner, s.lease_expires_at > now() AS lease_live,
       r.status AS run_status, r.current_step, r.deadline_at <= now() AS past_deadline
FROM pipeline_step_result s JOIN pipeline_run r ON r.id = s.run_id
WHERE s.run_id = %(run_id)s AND s.step = %(step)s;

-- name: renew_lease
-- Extend the lease of a step this worker still holds.
UPDATE pipeline_step_result
SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'running'
  AND lease_owner = %(owner)s
RETURNING lease_expires_at;

-- name: release_step
-- Give a leased step back after a transient failure; it may be claimed again at once.
UPDATE pipeline_step_result
SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, error = %(error)s,
    not_before = now() + make_interval(secs => %(retry_in_s)s)
WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'running'
  AND lease_owner = %(owner)s
RETURNING attempt;

-- name: step_inputs
-- The document text and the outputs of the steps before this one.
SELECT d.content AS document,
       coalesce((SELECT jsonb_object_agg(s.step, s.output)
                 FROM pipeline_step_result s
                 WHERE s.run_id = r.id AND s.status = 'done'), '{}'::jsonb) AS outputs
FROM pipeline_run r
JOIN document d ON d.tenant_id = r.tenant_id AND d.id = r.document_id
WHERE r.id = %(run_id)s;

-- name: record_step_result
-- Save a step's output with its tokens and cost, and move the run on to its next step.
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
        lease_owner = NULL, lease_expires_at = NULL, error = NULL, finished_at = now()
    FROM calls, pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND s.status = 'running'
      AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status = 'running'
    RETURNING s.run_id
)
UPDATE pipeline_run r
SET steps_done = r.steps_done + 1, current_step = %(next_step)s, updated_at = now(),
    status = CASE WHEN %(next_step)s::text IS NULL THEN 'done' ELSE r.status END,
    finished_at = CASE WHEN %(next_step)s::text IS NULL THEN now() END
FROM done
WHERE r.id = done.run_id
RETURNING r.id, r.status, r.batch_id;

-- name: fail_run
-- End a run at a step that cannot succeed: 'failed' (permanent) or 'needs_review'.
WITH failed_step AS (
    UPDATE pipeline_step_result
    SET status = 'failed', error = %(error)s, lease_owner = NULL, lease_expires_at = NULL,
        finished_at = now()
    WHERE run_id = %(run_id)s AND step = %(step)s AND status IN ('pending', 'running')
      AND (lease_owner IS NULL OR lease_owner = %(owner)s)
    RETURNING run_id
)
UPDATE pipeline_run r
SET status = %(status)s, error = %(error)s, finished_at = now(), updated_at = now()
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
WITH reopened AS (
    UPDATE pipeline_run
    SET status = 'queued', current_step = %(step)s, steps_done = %(step_index)s, error = NULL,
        finished_at = NULL, deadline_at = NULL, updated_at = now()
    WHERE id = %(run_id)s AND tenant_id = %(tenant_id)s
      AND status IN ('done', 'failed', 'needs_review', 'cancelled', 'expired', 'budget_exceeded')
      AND NOT EXISTS (SELECT 1 FROM pipeline_step_result
                      WHERE run_id = %(run_id)s AND step_index < %(step_index)s
                        AND status <> 'done')
    RETURNING id
)
UPDATE pipeline_step_result s
SET status = 'pending', attempt = 0, generation = s.generation + 1, output = NULL,
    input_tokens = NULL, output_tokens = NULL, cost_usd = NULL, model = NULL,
    prompt_version = NULL, error = NULL, lease_owner = NULL, lease_expires_at = NULL,
    not_before = NULL, enqueued_at = NULL, started_at = NULL, finished_at = NULL
FROM reopened
WHERE s.run_id = reopened.id AND s.step_index >= %(step_index)s
RETURNING s.step;

-- name: run_status
-- A run as its owner sees it.
SELECT id, tenant_id, pipeline, document_id, lane, batch_id, status, current_step, steps_done,
       steps_total, cost_usd, budget_usd, deadline_at, callback_url, error, created_at,
       updated_at, finished_at
FROM pipeline_run
WHERE id = %(run_id)s AND tenant_id = %(tenant_id)s;

-- name: run_steps
-- Every step of a run in pipeline order, with what it cost.
SELECT step, status, attempt, generation, model, prompt_version, input_tokens, output_tokens,
       cost_usd, error, started_at, finished_at,
       CASE WHEN %(with_output)s THEN output END AS output
FROM pipeline_step_result
WHERE run_id = %(run_id)s
ORDER BY step_index;

-- name: memoised_call
-- The accepted answer of a call made earlier in this step's generation, if there is one.
SELECT response
FROM llm_call_log
WHERE run_id = %(run_id)s AND step = %(step)s AND generation = %(generation)s
  AND call_key = %(call_key)s AND status = 'ok'
ORDER BY id DESC
LIMIT 1;

-- name: start_call
-- Log a provider call before it is sent.
INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id, model,
                          prompt_version)
VALUES (%(run_id)s, %(step)s, %(generation)s, %(call_key)s, %(step_attempt)s, %(tenant_id)s,
        %(model)s, %(prompt_version)s)
RETURNING id;

-- name: finish_call
-- Complete a call's log row and add its cost to the run.
WITH call AS (
    UPDATE llm_call_log
    SET status = %(status)s, http_status = %(http_status)s, error_kind = %(error_kind)s,
        error = %(error)s, input_tokens = %(input_tokens)s, output_tokens = %(output_tokens)s,
        cost_usd = %(cost_usd)s, latency_ms = %(latency_ms)s, response = %(response)s,
        finished_at = now()
    WHERE id = %(id)s AND status = 'sent'
    RETURNING run_id, cost_usd
)
UPDATE pipeline_run r
SET cost_usd = r.cost_usd + call.cost_usd, updated_at = now()
FROM call
WHERE r.id = call.run_id;

-- name: lock_outbox_ids
-- Unpublished outbox rows among the given ids that are due, locked for this publisher.
SELECT id, topic, run_id, step, queue, traceparent, payload
FROM outbox
WHERE id = ANY(%(ids)s) AND published_at IS NULL AND available_at <= now()
ORDER BY id
FOR UPDATE SKIP LOCKED;

-- name: lock_due_outbox
-- Rows whose publish was lost or whose parked delay is over, oldest first.
SELECT id, topic, run_id, step, queue, traceparent, payload
FROM outbox
WHERE published_at IS NULL AND available_at <= now() - make_interval(secs => %(grace_s)s)
ORDER BY available_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: mark_published
-- Record that these rows reached the broker, and when their steps were enqueued.
WITH published AS (
    UPDATE outbox SET published_at = now()
    WHERE id = ANY(%(ids)s)
    RETURNING topic, run_id, step
)
UPDATE pipeline_step_result s
SET enqueued_at = now()
FROM published p
WHERE p.topic = 'step' AND s.run_id = p.run_id AND s.step = p.step AND s.status = 'pending';

-- name: start_periodic_job
-- Start a periodic job unless it already started less than min_gap_s ago (another beat).
INSERT INTO periodic_job (name, last_started_at, runs)
VALUES (%(name)s, now(), 1)
ON CONFLICT (name) DO UPDATE
SET last_started_at = now(), runs = periodic_job.runs + 1
WHERE periodic_job.last_started_at <= now() - make_interval(secs => %(min_gap_s)s)
RETURNING runs;

-- name: finish_periodic_job
-- Record when and with what result a periodic job ended.
UPDATE periodic_job SET last_finished_at = now(), last_result = %(result)s
WHERE name = %(name)s;

-- name: reap_expired_leases
-- Hand steps whose worker stopped renewing its lease back to the queue, through the outbox.
WITH reaped AS (
    UPDATE pipeline_step_result s
    SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, enqueued_at = now(),
        error = 'lease expired: worker lost'
    FROM pipeline_run r
    WHERE s.status = 'running' AND s.lease_expires_at < now() AND r.id = s.run_id
      AND r.status IN ('queued', 'running') AND r.current_step = s.step
    RETURNING s.run_id, s.step, r.lane, r.traceparent
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent)
SELECT 'step', run_id, step, 'llm_' || lane, traceparent FROM reaped
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
SELECT 'step', run_id, step, 'llm_' || lane, traceparent FROM lost
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
-- Release steps still marked running under an expired lease although their run has ended.
UPDATE pipeline_step_result s
SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL, finished_at = now()
FROM pipeline_run r
WHERE s.status = 'running' AND s.lease_expires_at < now() AND r.id = s.run_id
  AND r.status NOT IN ('queued', 'running');
