-- The batch lane: admission order, budgets that stop work, and completion webhooks.

-- Batch runs wait here until admitted; fairness is computed over this index.
CREATE INDEX pipeline_run_admission_idx ON pipeline_run (batch_id, created_at)
    WHERE lane = 'batch' AND status = 'queued' AND admitted_at IS NULL;
-- Admitted batch runs still in flight bound the admission window.
CREATE INDEX pipeline_run_batch_inflight_idx ON pipeline_run (tenant_id, admitted_at)
    WHERE lane = 'batch' AND admitted_at IS NOT NULL;

-- Spend of the whole batch, kept with each call like pipeline_run.cost_usd.
ALTER TABLE batch ADD COLUMN cost_usd numeric(14,6) NOT NULL DEFAULT 0;
ALTER TABLE batch ADD COLUMN run_budget_usd numeric(14,6);
ALTER TABLE batch ADD COLUMN deadline_at timestamptz;

-- When a run or batch with a callback URL ended and its webhook was queued (NULL: not yet).
ALTER TABLE pipeline_run ADD COLUMN notified_at timestamptz;
ALTER TABLE batch ADD COLUMN notified_at timestamptz;
CREATE INDEX pipeline_run_unnotified_idx ON pipeline_run (finished_at)
    WHERE callback_url IS NOT NULL AND notified_at IS NULL;

CREATE TABLE webhook_delivery (
    id              bigserial   PRIMARY KEY,
    run_id          uuid        REFERENCES pipeline_run (id) ON DELETE CASCADE,
    batch_id        uuid        REFERENCES batch (id) ON DELETE CASCADE,
    url             text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    delivered_at    timestamptz,
    CHECK ((run_id IS NULL) <> (batch_id IS NULL))
);
CREATE INDEX webhook_delivery_run_idx ON webhook_delivery (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX webhook_delivery_batch_idx ON webhook_delivery (batch_id) WHERE batch_id IS NOT NULL;
