-- Named queries of docpipe.state.provider_batches: calls waiting for a provider batch, the
-- provider batches docpipe created, and the answers they brought back.

-- name: wait_for_provider_batch
-- A call of a provider-batch run waits for a provider batch: its request's body (zlib JSON)
-- is kept until it is answered, and its estimated cost at the batch price is reserved
-- (budget checks count it until the wait is settled). Its llm_call_log row (call_id, status
-- 'sent') was written before, like every call's; nothing has left yet.
INSERT INTO provider_batch_call (call_id, run_id, step, generation, call_key, tenant_id,
                                 provider, model, body_z, reserved_usd)
VALUES (%(call_id)s, %(run_id)s, %(step)s, %(generation)s, %(call_key)s, %(tenant_id)s,
        %(provider)s, %(model)s, %(body_z)s, %(reserved_usd)s)
ON CONFLICT (call_id) DO NOTHING;

-- name: settle_provider_batch_wait
-- The step used its wait's outcome (validated the answer, or sent the call again): the wait
-- is settled, its bodies dropped, and what the answer cost (and would have in real time)
-- kept for the batch's status.
WITH settled AS (
    UPDATE provider_batch_call
    SET state = 'applied', body_z = '\x'::bytea, answer_z = NULL,
        cost_usd = %(cost_usd)s, realtime_cost_usd = %(realtime_cost_usd)s
    WHERE call_id = %(call_id)s AND state IN ('answered', 'failed')
    RETURNING run_id, coalesce(realtime_cost_usd - cost_usd, 0) AS saved_usd
)
UPDATE batch b
SET saved_usd = b.saved_usd + s.saved_usd
FROM settled s
JOIN pipeline_run r ON r.id = s.run_id
WHERE b.id = r.batch_id AND s.saved_usd <> 0;

-- name: waiting_provider_batch_groups
-- The models calls wait for, with how many wait and how long the oldest has: the collector
-- packs a group once enough wait or the oldest has waited long enough.
-- Only calls of runs still going: a cancelled run's calls are never sent.
SELECT q.provider, q.model, count(*) AS calls,
       extract(epoch FROM now() - min(q.created_at))::float8 AS oldest_s
FROM provider_batch_call q
JOIN pipeline_run r ON r.id = q.run_id
WHERE q.state = 'waiting' AND r.status IN ('queued', 'running')
GROUP BY q.provider, q.model;

-- name: waiting_provider_batch_calls
-- The oldest calls waiting for a model, with their bodies, up to a provider batch's size.
SELECT q.call_id, q.body_z
FROM provider_batch_call q
JOIN pipeline_run r ON r.id = q.run_id
WHERE q.state = 'waiting' AND q.provider = %(provider)s AND q.model = %(model)s
  AND r.status IN ('queued', 'running')
ORDER BY q.created_at, q.call_id
LIMIT %(limit)s;

-- name: pack_provider_batch
-- The intent to create a provider batch, recorded before anything is sent: its row
-- ('packing') and its calls marked packed into it, in one statement. Only calls still
-- waiting are taken; the batch counts those.
WITH taken AS (
    SELECT call_id
    FROM provider_batch_call
    WHERE call_id = ANY(%(call_ids)s::bigint[]) AND state = 'waiting'
    FOR UPDATE
), created AS (
    INSERT INTO provider_batch (provider, model, requests, bytes)
    SELECT %(provider)s, %(model)s, count(*), %(bytes)s FROM taken HAVING count(*) > 0
    RETURNING id
), packed AS (
    UPDATE provider_batch_call c
    SET state = 'packed', provider_batch_id = created.id
    FROM created, taken
    WHERE c.call_id = taken.call_id
    RETURNING c.call_id
)
SELECT created.id, (SELECT count(*) FROM packed) AS calls FROM created;

-- name: open_provider_batches
-- The provider batches not yet ended: those still being created ('packing': a crash, or a
-- failed request, came between their intent and their record) and those the provider has.
SELECT id, provider, model, state, remote_id, input_file_id, requests,
       extract(epoch FROM now() - created_at)::float8 AS age_s
FROM provider_batch
WHERE state IN ('packing', 'submitted')
ORDER BY id;

-- name: packed_provider_batch_calls
-- A provider batch's calls with their bodies, to write its input file (the same lines
-- whenever it is written again).
SELECT call_id, body_z
FROM provider_batch_call
WHERE provider_batch_id = %(id)s AND state = 'packed'
ORDER BY call_id;

-- name: record_provider_batch_file
-- The input file the provider stored for a provider batch still being created.
UPDATE provider_batch
SET input_file_id = %(input_file_id)s, updated_at = now()
WHERE id = %(id)s AND state = 'packing';

-- name: record_provider_batch_submitted
-- The provider created the batch: its id and status are on record.
UPDATE provider_batch
SET state = 'submitted', remote_id = %(remote_id)s, input_file_id = %(input_file_id)s,
    provider_status = %(provider_status)s, updated_at = now()
WHERE id = %(id)s AND state = 'packing';

-- name: recorded_provider_batch_ids
-- Which of a provider's batches docpipe has on record: recovery after a lost answer never
-- takes one of them for another provider batch's.
SELECT remote_id
FROM provider_batch
WHERE provider = %(provider)s AND remote_id = ANY(%(remote_ids)s::text[]);

-- name: record_provider_batch_status
-- What the provider said of a batch still running.
UPDATE provider_batch
SET provider_status = %(provider_status)s, updated_at = now()
WHERE id = %(id)s AND state = 'submitted';

-- name: end_provider_batch
-- A provider batch ended (completed, expired, failed, cancelled): each of its calls gets the
-- answer or the error its line holds, or (no line) the batch's own end; the calls that
-- failed have their llm_call_log rows ended as errors (not paid); the batch is ended. One
-- statement: an answer is applied once, with the batch's end.
WITH lines AS (
    SELECT *
    FROM jsonb_to_recordset(%(lines)s::jsonb)
         AS l (call_id bigint, answer_z text, error_kind text, error text,
               input_tokens integer, output_tokens integer, cost_usd numeric)
), ended AS (
    UPDATE provider_batch
    SET state = %(state)s, provider_status = %(provider_status)s,
        output_file_id = %(output_file_id)s, error_file_id = %(error_file_id)s,
        error = %(error)s, updated_at = now(), ended_at = now()
    WHERE id = %(id)s AND state = 'submitted'
    RETURNING id
), settled AS (
    UPDATE provider_batch_call c
    SET state = CASE WHEN l.answer_z IS NOT NULL THEN 'answered' ELSE 'failed' END,
        answer_z = decode(l.answer_z, 'base64'),
        error_kind = CASE WHEN l.call_id IS NULL THEN %(batch_error_kind)s ELSE l.error_kind END,
        error = CASE WHEN l.call_id IS NULL THEN %(error)s ELSE l.error END,
        answered_at = now()
    FROM ended
    LEFT JOIN provider_batch_call p ON p.provider_batch_id = ended.id AND p.state = 'packed'
    LEFT JOIN lines l ON l.call_id = p.call_id
    WHERE c.call_id = p.call_id AND c.state = 'packed'
    RETURNING c.call_id, c.run_id, c.state, c.error_kind, c.error
), failed_calls AS (
    UPDATE llm_call_log g
    SET status = 'error', error_kind = s.error_kind, error = left(s.error, 2000),
        latency_ms = 0, finished_at = now()
    FROM settled s
    JOIN pipeline_run r ON r.id = s.run_id
    WHERE s.state = 'failed' AND g.id = s.call_id AND g.status = 'sent'
      AND g.run_id = s.run_id AND g.created_at >= r.created_at
), late AS (
    -- An answer for a run that ended meanwhile (cancelled) was paid all the same: it is
    -- recorded now, at the batch price, since no step will take it.
    UPDATE llm_call_log g
    SET status = 'ok', input_tokens = l.input_tokens, output_tokens = l.output_tokens,
        cost_usd = l.cost_usd, response_z = decode(l.answer_z, 'base64'), latency_ms = 0,
        finished_at = now()
    FROM settled s
    JOIN lines l ON l.call_id = s.call_id
    JOIN pipeline_run r ON r.id = s.run_id
    WHERE s.state = 'answered' AND r.status NOT IN ('queued', 'running')
      AND g.id = s.call_id AND g.status = 'sent' AND g.run_id = s.run_id
      AND g.created_at >= r.created_at
    RETURNING g.id, g.run_id, g.cost_usd
), switched_late AS (
    -- An answer for a call its step sent in real time meanwhile (its run's deadline came
    -- close: switch_waits_near_deadline) was paid all the same: its cost is recorded on the
    -- call's first row, which stays an error (the memo is the real-time answer, used once).
    UPDATE llm_call_log g
    SET error_kind = 'late_answer', input_tokens = l.input_tokens,
        output_tokens = l.output_tokens, cost_usd = l.cost_usd,
        error = 'answered by its provider batch after it was sent in real time'
    FROM ended
    JOIN provider_batch_call p ON p.provider_batch_id = ended.id
                              AND p.error_kind = 'deadline_near'
    JOIN lines l ON l.call_id = p.call_id AND l.answer_z IS NOT NULL
    JOIN pipeline_run r ON r.id = p.run_id
    WHERE g.id = p.call_id AND g.run_id = p.run_id AND g.created_at >= r.created_at
      AND g.status = 'error' AND g.error_kind = 'deadline_near'
    RETURNING g.id, g.run_id, g.cost_usd
), late_runs AS (
    UPDATE pipeline_run r
    SET cost_usd = r.cost_usd + spent.cost_usd, updated_at = now()
    FROM (SELECT run_id, sum(cost_usd) AS cost_usd
          FROM (SELECT run_id, cost_usd FROM late
                UNION ALL SELECT run_id, cost_usd FROM switched_late) paid
          GROUP BY run_id) spent
    WHERE r.id = spent.run_id
    RETURNING r.batch_id, spent.cost_usd
), late_batches AS (
    UPDATE batch b
    SET cost_usd = b.cost_usd + spent.cost_usd
    FROM (SELECT batch_id, sum(cost_usd) AS cost_usd FROM late_runs GROUP BY batch_id) spent
    WHERE b.id = spent.batch_id
), late_settled AS (
    UPDATE provider_batch_call c
    SET state = 'applied', body_z = '\x'::bytea, answer_z = NULL, cost_usd = late.cost_usd
    FROM late
    WHERE c.call_id = late.id
)
SELECT count(*) FILTER (WHERE state = 'answered') AS answered,
       count(*) FILTER (WHERE state = 'failed') AS failed
FROM settled;

-- name: fail_provider_batch_submission
-- A provider batch the provider refused to create (its file or request was invalid): its
-- calls fail as a failed batch's do, and nothing is paid.
WITH ended AS (
    UPDATE provider_batch
    SET state = 'failed', error = %(error)s, updated_at = now(), ended_at = now()
    WHERE id = %(id)s AND state = 'packing'
    RETURNING id
), settled AS (
    UPDATE provider_batch_call c
    SET state = 'failed', error_kind = 'batch_failed', error = %(error)s, answered_at = now()
    FROM ended
    WHERE c.provider_batch_id = ended.id AND c.state = 'packed'
    RETURNING c.call_id, c.run_id
)
UPDATE llm_call_log g
SET status = 'error', error_kind = 'batch_failed', error = left(%(error)s, 2000),
    latency_ms = 0, finished_at = now()
FROM settled s
JOIN pipeline_run r ON r.id = s.run_id
WHERE g.id = s.call_id AND g.status = 'sent' AND g.run_id = s.run_id
  AND g.created_at >= r.created_at;

-- name: wake_provider_batch_steps
-- Steps parked for provider batches whose calls are all answered (or failed) are due now:
-- their parked messages become available, for the caller to publish. At most %(limit)s,
-- oldest answers first (a huge provider batch's steps are woken over several passes, not
-- all into the queue at once). A step that parked after its answers came is woken by the
-- next pass.
WITH ready AS (
    SELECT s.run_id, s.step
    FROM provider_batch_call q
    JOIN pipeline_step_result s ON s.run_id = q.run_id AND s.step = q.step
    WHERE q.state IN ('answered', 'failed') AND s.status = 'pending' AND s.not_before > now()
      AND NOT EXISTS (SELECT 1 FROM provider_batch_call o
                      WHERE o.run_id = q.run_id AND o.step = q.step
                        AND o.state IN ('waiting', 'packed'))
    GROUP BY s.run_id, s.step
    ORDER BY min(q.answered_at), s.run_id, s.step
    LIMIT %(limit)s
), woken AS (
    UPDATE pipeline_step_result s
    SET not_before = now()
    FROM ready
    WHERE s.run_id = ready.run_id AND s.step = ready.step AND s.status = 'pending'
      AND s.not_before > now()
    RETURNING s.run_id, s.step
)
UPDATE outbox o
SET available_at = now()
FROM woken w
WHERE o.run_id = w.run_id AND o.step = w.step AND o.topic = 'step'
  AND o.published_at IS NULL
RETURNING o.id;

-- name: abandoned_provider_batches
-- Provider batches still running whose calls nobody waits for any more: their runs ended
-- (a cancelled batch's, expired, failed), or they were sent in real time (a deadline came
-- close). Their answers are wanted by no one, so they are cancelled.
SELECT b.id, b.provider, b.remote_id
FROM provider_batch b
WHERE b.state = 'submitted' AND b.remote_id IS NOT NULL
  AND b.provider_status IS DISTINCT FROM 'cancelling'
  AND NOT EXISTS (
      SELECT 1 FROM provider_batch_call c JOIN pipeline_run r ON r.id = c.run_id
      WHERE c.provider_batch_id = b.id AND c.state = 'packed'
        AND r.status IN ('queued', 'running'))
ORDER BY b.id;

-- name: drop_waits_of_ended_runs
-- Calls still waiting to be packed whose runs ended (cancelled, expired): never sent, so
-- their llm_call_log rows end as errors that cost nothing, and their waits are settled.
WITH dropped AS (
    UPDATE provider_batch_call c
    SET state = 'applied', body_z = '\x'::bytea, error_kind = 'not_sent',
        error = 'its run ended before the call was packed into a provider batch'
    FROM pipeline_run r
    WHERE c.state = 'waiting' AND r.id = c.run_id AND r.status NOT IN ('queued', 'running')
    RETURNING c.call_id, c.run_id, r.created_at AS run_created_at
)
UPDATE llm_call_log g
SET status = 'error', error_kind = 'not_sent',
    error = 'its run ended before the call was packed into a provider batch',
    latency_ms = 0, finished_at = now()
FROM dropped d
WHERE g.id = d.call_id AND g.status = 'sent' AND g.run_id = d.run_id
  AND g.created_at >= d.run_created_at;

-- name: switch_waits_near_deadline
-- Calls still waiting for a provider batch (not packed yet, or packed and not answered) of
-- runs whose deadline is nearer than %(margin_s)s seconds fail as waits, kind
-- 'deadline_near': their llm_call_log rows end as unpaid errors, and their steps, once
-- woken, send them in real time. An answer their provider batch brings afterwards is
-- recorded with its cost and never used (end_provider_batch: switched_late).
WITH near AS (
    SELECT c.call_id, c.run_id, r.created_at AS run_created_at
    FROM provider_batch_call c
    JOIN pipeline_run r ON r.id = c.run_id
    WHERE c.state IN ('waiting', 'packed') AND r.status IN ('queued', 'running')
      AND r.deadline_at <= now() + make_interval(secs => %(margin_s)s::float8)
    FOR UPDATE OF c
), switched AS (
    UPDATE provider_batch_call c
    SET state = 'failed', error_kind = 'deadline_near', answered_at = now(),
        error = 'its run''s deadline came close: sent in real time'
    FROM near n
    WHERE c.call_id = n.call_id AND c.state IN ('waiting', 'packed')
    RETURNING c.call_id, c.run_id, n.run_created_at
)
UPDATE llm_call_log g
SET status = 'error', error_kind = 'deadline_near', latency_ms = 0, finished_at = now(),
    error = 'its run''s deadline came close: sent in real time'
FROM switched s
WHERE g.id = s.call_id AND g.status = 'sent' AND g.run_id = s.run_id
  AND g.created_at >= s.run_created_at;
