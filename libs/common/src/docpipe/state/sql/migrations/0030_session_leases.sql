-- Leases tied to the worker's PostgreSQL session (issue 27, docpipe.state.leases): each
-- worker process holds a session advisory lock (class 1685021552, key from lease_session_key)
-- on a connection of its own, and the steps it claims carry the key. When the process dies
-- its connection closes and the lock goes with it: the lease is lost at once, not after its
-- TTL. The TTL stays for a worker that is alive but cut off (no FIN ever arrives).
ALTER TABLE pipeline_step_result ADD COLUMN lease_session integer;

CREATE SEQUENCE lease_session_key AS integer CYCLE;

-- Whether a step's lease is lost: it expired, or the session that holds its key is gone.
-- A session counts as gone only once PostgreSQL has been up for a lease period: a restart
-- ends every session, not every worker, and live workers get that long to take a new key.
CREATE FUNCTION lease_lost(expires_at timestamptz, session integer, lease_s double precision)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT expires_at < now()
        OR (session IS NOT NULL
            AND pg_postmaster_start_time() < now() - make_interval(secs => lease_s)
            AND NOT EXISTS (
                SELECT FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.classid = 1685021552
                  AND l.objid = session::oid AND l.objsubid = 2 AND l.granted
                  AND l.database = (SELECT oid FROM pg_database
                                    WHERE datname = current_database())))
$$;
