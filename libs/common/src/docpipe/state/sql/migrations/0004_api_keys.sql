-- Tenants and API keys; indexes that let retention find old rows without scanning.

-- One row per API key. The key itself (dp_<id>_<secret>) is shown once when created; only
-- its SHA-256 is kept (the secret has 256 bits of entropy, so a fast hash is enough).
CREATE TABLE api_key (
    id           text        PRIMARY KEY,                 -- the key's public part
    tenant_id    text        NOT NULL,
    name         text        NOT NULL DEFAULT '',
    key_sha256   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz                              -- updated at most once a minute
);
CREATE INDEX api_key_tenant_idx ON api_key (tenant_id);

-- Retention prunes ended runs and published outbox rows by age.
CREATE INDEX pipeline_run_finished_idx ON pipeline_run (finished_at)
    WHERE status NOT IN ('queued', 'running');
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
