-- Named queries of docpipe.state.webhook_secrets: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: tenant_webhook_secrets
-- A tenant's signing secrets that still sign, newest (the current one) first.
SELECT id, secret_encrypted, created_at, expires_at
FROM webhook_secret
WHERE tenant_id = %(tenant_id)s AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at DESC, id;

-- name: webhook_secret_lock
-- Serialise rotations of one tenant's secret until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('docpipe.webhook_secret.' || %(tenant_id)s, 0));

-- name: retire_webhook_secret
-- The first statement of a rotation: secrets retired earlier stop signing (they are
-- deleted) and the current one, if any, signs until previous_valid_for_s from now.
WITH forgotten AS (
    DELETE FROM webhook_secret WHERE tenant_id = %(tenant_id)s AND expires_at IS NOT NULL
)
UPDATE webhook_secret
SET expires_at = now() + make_interval(secs => %(previous_valid_for_s)s)
WHERE tenant_id = %(tenant_id)s AND expires_at IS NULL
RETURNING id, created_at, expires_at;

-- name: create_webhook_secret
-- Store a tenant's new current signing secret, encrypted (after retire_webhook_secret).
INSERT INTO webhook_secret (id, tenant_id, secret_encrypted)
VALUES (%(id)s, %(tenant_id)s, %(secret_encrypted)s)
RETURNING id, created_at, expires_at;
