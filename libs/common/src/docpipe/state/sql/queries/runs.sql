-- Named queries of docpipe.state.runs: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

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
                              traceparent, priority, reuse_answers)
    SELECT %(id)s, %(tenant_id)s, %(pipeline)s, %(pipeline_hash)s, %(document_id)s, %(lane)s,
           %(batch_id)s, (%(steps)s::text[])[1 + known.steps_done], known.steps_done,
           cardinality(%(steps)s::text[]), %(budget_usd)s, %(deadline_at)s,
           CASE WHEN %(admitted)s THEN now() END, %(callback_url)s, %(idempotency_key)s,
           %(request_hash)s, %(traceparent)s, %(priority)s, %(reuse_answers)s
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
    SET status = 'running', attempt = s.attempt + 1, deliveries = s.deliveries + 1,
        lease_owner = %(owner)s,
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
    RETURNING s.run_id, s.step, s.attempt, s.generation, s.deliveries, s.worked_s
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
SELECT c.run_id::text, c.step, c.attempt, c.generation, c.deliveries, c.worked_s,
       r.tenant_id, r.pipeline,
       r.pipeline_hash, r.document_id, r.lane, r.batch_id::text, d.content AS document,
       coalesce(d.page_starts, '{0}') AS page_starts, d.content_sha256 AS document_sha256,
       o.outputs, h.input_hash, s.model_override, r.review_pauses,
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

-- name: renew_leases
-- Extend the leases of the steps (run_ids[i], steps[i]) this worker still holds, while their
-- runs go on, under the key of the session the worker holds now (a new one after its lease
-- connection was replaced); returns the steps whose lease was kept. One statement for all
-- the steps a worker process holds at a heartbeat (a threads worker holds hundreds).
UPDATE pipeline_step_result s
SET lease_expires_at = now() + make_interval(secs => %(lease_s)s), lease_session = %(session)s
FROM pipeline_run r, unnest(%(run_ids)s::uuid[], %(steps)s::text[]) AS held(run_id, step)
WHERE s.run_id = held.run_id AND s.step = held.step AND s.status = 'running'
  -- The held runs as an index condition too: whichever index the plan reads, it probes
  -- these keys. Without it, once the statistics' sample of a large table holds no running
  -- step, the planner takes 'running' for one row and reads every running step of every
  -- worker (1,000,000 runs: 92 buffers for none held; 4 by key).
  AND s.run_id = ANY (%(run_ids)s::uuid[])
  AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status IN ('queued', 'running')
RETURNING s.run_id::text, s.step;

-- name: give_up_lease
-- A worker gives up a step it cannot finish (its task passed its hard time limit in a thread
-- that cannot be stopped): the lease ends now, and the reaper's next pass hands the step on,
-- as it does a dead worker's.
UPDATE pipeline_step_result
SET lease_expires_at = now(), error = %(error)s
WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'running'
  AND lease_owner = %(owner)s AND lease_expires_at > now();

-- name: release_step
-- Give a leased step back after a transient failure; it may be claimed again once
-- `retry_in_s` has passed. An attempt that only waited for the provider limiter is refunded;
-- the time the delivery worked (`worked_s`) never is. With `park` (a wait too long for a
-- Redis countdown), its next message is written to the outbox in the same statement, parked
-- until then: the sweep publishes it once due. Not once its run ended (cancelled
-- meanwhile): a retry would be a message nobody wants.
WITH released AS (
    UPDATE pipeline_step_result s
    SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, error = %(error)s,
        attempt = s.attempt - %(refund)s::integer, worked_s = s.worked_s + %(worked_s)s,
        not_before = now() + make_interval(secs => %(retry_in_s)s),
        enqueued_at = CASE WHEN %(park)s THEN now() + make_interval(secs => %(retry_in_s)s)
                           ELSE s.enqueued_at END
    FROM pipeline_run r
    WHERE s.run_id = %(run_id)s AND s.step = %(step)s AND s.status = 'running'
      AND s.lease_owner = %(owner)s AND r.id = s.run_id AND r.status IN ('queued', 'running')
    RETURNING s.run_id, s.step, s.attempt, s.not_before, r.lane, r.traceparent
), parked AS (
    INSERT INTO outbox (topic, run_id, step, queue, traceparent, available_at)
    SELECT 'step', run_id, step, %(queues)s::jsonb ->> lane, traceparent, not_before
    FROM released
    WHERE %(park)s
)
SELECT attempt FROM released;

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
      -- Written after the run: the partitions of the weeks before it are not looked into.
      AND created_at >= (SELECT created_at FROM pipeline_run WHERE id = %(run_id)s)
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
    -- Only under the worker's own lease: a worker whose lease was handed on (it was cut
    -- off, or gave the step up at its hard time limit) must not end a run someone else runs.
    WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'running'
      AND lease_owner = %(owner)s
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

-- name: lock_run_steps
-- A run's step rows, locked before its run row and in the pipeline's order: the order in
-- which the workers' statements take them (claim_step: the step, then the run;
-- record_step_result: the step, the run, then the next step). Taken the other way, a cancel
-- and a claim of the same run deadlocked (schemathesis found it: extract, then cancel).
SELECT s.step FROM pipeline_step_result s
JOIN pipeline_run r ON r.id = s.run_id
WHERE s.run_id = %(run_id)s AND r.tenant_id = %(tenant_id)s
ORDER BY s.step_index
FOR UPDATE OF s;

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
SET status = 'pending', attempt = 0, deliveries = 0, worked_s = 0,
    generation = s.generation + 1, output = NULL,
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
-- Every step of these runs in pipeline order, with what it cost, where its calls went
-- (model and routing reason, counted over the step's current generation) and which of them
-- reused an earlier answer; the outputs when asked for, or of the runs whose status is one
-- of `output_statuses`.
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
                         AND created_at >= r.created_at
                       GROUP BY model, route_reason) c), '[]'::jsonb) AS model_choices,
       -- The calls of the step's current generation answered from the tenant's reuse cache,
       -- each with the call (and its run) whose answer it took: found through the run's
       -- index on reused_answer, the source call by its id (null once its week is gone).
       coalesce((SELECT jsonb_agg(jsonb_build_object('call_id', u.call_id,
                                                     'reused_from', u.reused_from,
                                                     'reused_from_run', p.run_id)
                                  ORDER BY u.call_id)
                 FROM reused_answer u
                 JOIN llm_call_log c ON c.id = u.call_id AND c.run_id = s.run_id
                                    AND c.step = s.step AND c.generation = s.generation
                                    AND c.created_at >= r.created_at
                 LEFT JOIN llm_call_log p ON p.id = u.reused_from
                 WHERE u.run_id = s.run_id), '[]'::jsonb) AS reused_calls
FROM pipeline_step_result s JOIN pipeline_run r ON r.id = s.run_id
-- Both sides by id: the runs are found by their primary key, never by the tenant's index
-- (a hash of every run of the tenant, per poll, when the statistics lag a large batch).
WHERE s.run_id = ANY(%(run_ids)s::uuid[]) AND r.id = ANY(%(run_ids)s::uuid[])
  AND r.tenant_id = %(tenant_id)s
ORDER BY s.run_id, s.step_index;

-- name: batch_status
-- Whether a batch still runs (for error messages).
SELECT status FROM batch WHERE id = %(batch_id)s;
