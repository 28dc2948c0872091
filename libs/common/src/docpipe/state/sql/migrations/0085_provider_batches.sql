-- The provider-batch lane (issue 38): a batch of runs may send its calls through a
-- provider's batch interface at its discount. Its runs say so (pipeline_run.provider_batch,
-- copied from the batch); a call of such a run waits in provider_batch_call, keyed by its
-- llm_call_log row, until a collector packs it into a provider_batch and a poller brings
-- its answer back.
ALTER TABLE batch ADD COLUMN provider_batch boolean NOT NULL DEFAULT false,
                  ADD COLUMN saved_usd numeric(14,6) NOT NULL DEFAULT 0;
ALTER TABLE pipeline_run ADD COLUMN provider_batch boolean NOT NULL DEFAULT false;

CREATE TABLE provider_batch (
    id              bigserial   PRIMARY KEY,
    provider        text        NOT NULL,
    model           text        NOT NULL,
    state           text        NOT NULL DEFAULT 'packing'
                    CHECK (state IN ('packing', 'submitted', 'completed', 'failed', 'expired',
                                     'cancelled')),
    provider_status text,
    remote_id       text,
    input_file_id   text,
    output_file_id  text,
    error_file_id   text,
    requests        integer     NOT NULL,
    bytes           bigint      NOT NULL,
    error           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz
);
CREATE INDEX provider_batch_open_idx ON provider_batch (updated_at)
    WHERE state IN ('packing', 'submitted');

CREATE TABLE provider_batch_call (
    call_id           bigint      PRIMARY KEY,
    run_id            uuid        NOT NULL REFERENCES pipeline_run (id) ON DELETE CASCADE,
    step              text        NOT NULL,
    generation        integer     NOT NULL,
    call_key          text        NOT NULL,
    tenant_id         text        NOT NULL,
    provider          text        NOT NULL,
    model             text        NOT NULL,
    state             text        NOT NULL DEFAULT 'waiting'
                      CHECK (state IN ('waiting', 'packed', 'answered', 'failed', 'applied')),
    provider_batch_id bigint      REFERENCES provider_batch (id),
    body_z            bytea       NOT NULL,
    answer_z          bytea,
    error_kind        text,
    error             text,
    cost_usd          numeric(14,6),
    realtime_cost_usd numeric(14,6),
    created_at        timestamptz NOT NULL DEFAULT now(),
    answered_at       timestamptz
);
CREATE INDEX provider_batch_call_key_idx
    ON provider_batch_call (run_id, step, generation, call_key);
CREATE INDEX provider_batch_call_waiting_idx ON provider_batch_call (provider, model, created_at)
    WHERE state = 'waiting';
CREATE INDEX provider_batch_call_batch_idx ON provider_batch_call (provider_batch_id)
    WHERE provider_batch_id IS NOT NULL;
-- Answers (and failures) a parked step has not taken yet: the steps the poller wakes.
CREATE INDEX provider_batch_call_settled_idx ON provider_batch_call (run_id, step)
    WHERE state IN ('answered', 'failed');
