-- Named queries of docpipe.state.outbox: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: take_outbox_ids
-- Unpublished outbox rows among the given ids that are due, locked for this publisher (rows
-- another one holds are skipped) and marked published with their steps' and webhook
-- deliveries' enqueue time, in one statement: the caller commits only once the broker has
-- them. What "published" means is written here only (publish_outbox and the sweep).
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
-- that took it has yet to claim its step. Locked for the sweep's transaction, which takes
-- them (take_outbox_ids).
SELECT id
FROM outbox
WHERE published_at IS NULL AND available_at <= now() - make_interval(secs => %(grace_s)s)
  AND (topic <> 'step' OR available_at > created_at
       OR (created_at < now() - make_interval(secs => %(lost_after_s)s)
           AND created_at < coalesce((%(cutoffs)s::jsonb ->> queue)::timestamptz, '-infinity')))
ORDER BY available_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
