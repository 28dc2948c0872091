-- Named queries of docpipe.state.web_sessions: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: start_web_session
-- A session of the web pages, signed in with a tenant's key, until it expires.
INSERT INTO web_session (id_sha256, tenant_id, api_key_id, expires_at)
VALUES (%(id_sha256)s, %(tenant_id)s, %(api_key_id)s,
        now() + make_interval(secs => %(max_age_s)s));

-- name: web_session_is_live
-- Whether a session is live: started here, neither ended nor expired.
SELECT 1 AS live FROM web_session
WHERE id_sha256 = %(id_sha256)s AND ended_at IS NULL AND expires_at > now();

-- name: end_web_session
-- Sign a session out; it is never live again.
UPDATE web_session SET ended_at = now()
WHERE id_sha256 = %(id_sha256)s AND ended_at IS NULL
RETURNING id_sha256;
