-- Named queries of docpipe.state.recovery: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

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
-- Only the steps of runs admitted and in flight are looked at, by their keys (the runs
-- from pipeline_run_admitted_in_flight_idx): pending steps of runs that ended (a failed
-- run's later steps) are history, and stay pending.
WITH lost AS (
    UPDATE pipeline_step_result s
    SET enqueued_at = now()
    FROM pipeline_run r
    WHERE s.run_id = ANY (ARRAY(SELECT id FROM pipeline_run
                                WHERE status IN ('queued', 'running')
                                  AND admitted_at IS NOT NULL))
      AND s.status = 'pending' AND r.id = s.run_id AND r.current_step = s.step
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
