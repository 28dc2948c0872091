-- Webhooks done properly: each tenant's signing secrets (encrypted, rotated with an overlap),
-- and deliveries that know their tenant, their attempt in flight, when the next attempt is
-- due and when their message last left, so that interrupted attempts are recorded and lost
-- messages re-sent (docpipe.state.recovery).
SET LOCAL lock_timeout = '5s';

-- A tenant's webhook signing secrets. The current one has no expires_at; after a rotation the
-- previous one keeps signing until its expires_at. The secret itself (whsec_<base64>) is
-- shown once and stored only as a Fernet token under DOCPIPE_SECRETS_KEY.
CREATE TABLE webhook_secret (
    id               text        PRIMARY KEY,             -- whs_<12 hex>, safe to show and log
    tenant_id        text        NOT NULL,
    secret_encrypted text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz                          -- NULL: the current secret
);
CREATE UNIQUE INDEX webhook_secret_current_idx ON webhook_secret (tenant_id)
    WHERE expires_at IS NULL;
CREATE INDEX webhook_secret_tenant_idx ON webhook_secret (tenant_id, created_at);

ALTER TABLE webhook_delivery
    ADD COLUMN tenant_id          text,
    -- The Standard Webhooks webhook-id: the same on every attempt, so receivers deduplicate.
    ADD COLUMN message_id         text        NOT NULL
        DEFAULT ('msg_' || replace(gen_random_uuid()::text, '-', '')),
    ADD COLUMN next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN enqueued_at        timestamptz,            -- its message last left the outbox
    ADD COLUMN attempt_expires_at timestamptz;            -- an attempt is in flight until then
-- Errors recorded before this version quoted the receiver's answer and the exception; a
-- tenant sees only the generic kind from now on.
UPDATE webhook_delivery d
SET tenant_id = coalesce((SELECT r.tenant_id FROM pipeline_run r WHERE r.id = d.run_id),
                         (SELECT b.tenant_id FROM batch b WHERE b.id = d.batch_id)),
    last_error = CASE WHEN d.last_error IS NULL THEN NULL
                      WHEN d.last_status IS NOT NULL THEN 'HTTP ' || d.last_status
                      ELSE 'connection failed' END;
ALTER TABLE webhook_delivery ALTER COLUMN tenant_id SET NOT NULL;
-- The reaper's look for lost messages, and the count of attempts in flight per tenant.
CREATE INDEX webhook_delivery_pending_idx ON webhook_delivery (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_delivery_in_flight_idx ON webhook_delivery (tenant_id)
    WHERE attempt_expires_at IS NOT NULL;
