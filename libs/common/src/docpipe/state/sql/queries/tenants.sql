-- Named queries of docpipe.state.tenants: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

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
