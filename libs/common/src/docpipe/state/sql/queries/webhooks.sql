-- Named queries of docpipe.state.webhooks: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

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
-- Queue the completion webhook of ended batches that carry a callback URL. The batches owed
-- one are picked from batch_webhook_owed_idx, then changed by their keys: the planner takes
-- the three conditions for independent and expects a fifth of the batches, so an UPDATE
-- that filters the table itself read it whole (1 page at 100,000 runs, 10 at 1,000,000, a
-- page more every 30,000 runs of history).
WITH ended AS (
    UPDATE batch SET notified_at = now()
    WHERE id = ANY (ARRAY(SELECT id FROM batch
                          WHERE callback_url IS NOT NULL AND notified_at IS NULL
                            AND status <> 'running'))
      AND callback_url IS NOT NULL AND notified_at IS NULL AND status <> 'running'
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
