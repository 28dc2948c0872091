-- Named queries of docpipe.state.periodic: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

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
