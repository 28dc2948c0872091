-- The reuse cache of runs that reuse answers (pipeline_run.reuse_answers;
-- docpipe.state.call_log): each request such a run had answered, by its hash, and the call
-- that answered it (no foreign key: the call log is partitioned; a call whose week is gone
-- is no longer reused).
CREATE TABLE answered_request (
    tenant_id      text        NOT NULL,
    request_sha256 text        NOT NULL,
    call_id        bigint      NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_sha256)
);
CREATE INDEX answered_request_created_idx ON answered_request (created_at);

-- A call answered from the cache instead of sent: the call whose answer it reused.
CREATE TABLE reused_answer (
    call_id     bigint      PRIMARY KEY,
    reused_from bigint      NOT NULL,
    tenant_id   text        NOT NULL,
    run_id      uuid        NOT NULL REFERENCES pipeline_run (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reused_answer_run_idx ON reused_answer (run_id);
