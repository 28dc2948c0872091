-- A person in the loop (issue 24): needs_review is a pause a reviewer resolves. The run holds
-- the step that needs a person, why, and a revision every change to the review raises; every
-- decision is kept (the audit trail), and an approved output is reused when the same step
-- gets the same input again.
ALTER TABLE pipeline_run
    ADD COLUMN review_step     text,                 -- the step a person is asked about
    ADD COLUMN review_reason   text,                 -- what kind of reason (for filters)
    ADD COLUMN review_reasons  jsonb,                -- [{kind, field, message}]
    ADD COLUMN review_revision integer NOT NULL DEFAULT 0,
    ADD COLUMN review_since    timestamptz;          -- when the current review began
-- Checked without holding the table's exclusive lock while every row is read.
ALTER TABLE pipeline_run ADD CONSTRAINT pipeline_run_review_reason_check
    CHECK (review_reason IN ('invalid_output', 'attempts_exhausted', 'rule',
                             'definition_changed')) NOT VALID;
ALTER TABLE pipeline_run VALIDATE CONSTRAINT pipeline_run_review_reason_check;

ALTER TABLE pipeline_step_result
    ADD COLUMN input_hash         text,              -- what the step read, hashed
    ADD COLUMN review_decision_id bigint,            -- the approval this output comes from
    ADD COLUMN review_reused      boolean NOT NULL DEFAULT false,
    ADD COLUMN model_override     text;              -- a retry's model for this step

CREATE TABLE review_decision (
    id              bigserial   PRIMARY KEY,
    run_id          uuid        NOT NULL REFERENCES pipeline_run (id) ON DELETE CASCADE,
    tenant_id       text        NOT NULL,
    step            text        NOT NULL,
    revision        integer     NOT NULL,            -- the revision it was made on
    action          text        NOT NULL CHECK (action IN ('approve', 'retry', 'reject')),
    reviewer_key_id text,                            -- NULL without API keys
    reviewer_name   text        NOT NULL,
    reason          text,
    output_before   jsonb,
    output_after    jsonb,
    edits           jsonb       NOT NULL DEFAULT '[]',
    diff            jsonb       NOT NULL DEFAULT '[]',
    retry_from      text,
    retry_model     text,
    pipeline_hash   text        NOT NULL,
    input_hash      text,
    decided_at      timestamptz NOT NULL DEFAULT now(),
    -- One decision per revision: of two reviewers deciding at once, the first wins.
    UNIQUE (run_id, revision)
);
-- An approval is reused when the same step of the same definition reads the same input.
CREATE INDEX review_decision_reuse_idx ON review_decision (tenant_id, pipeline_hash, step, input_hash)
    WHERE action = 'approve';

-- Runs that ended needs_review before reviews existed become reviews: the step that failed
-- (else the last one done), the kind of reason read from their error.
UPDATE pipeline_run r
SET review_step = coalesce(
        (SELECT step FROM pipeline_step_result WHERE run_id = r.id AND status = 'failed'
         ORDER BY step_index LIMIT 1),
        (SELECT step FROM pipeline_step_result WHERE run_id = r.id AND status = 'done'
         ORDER BY step_index DESC LIMIT 1)),
    review_reason = CASE
        WHEN r.error LIKE 'gave up after%' THEN 'attempts_exhausted'
        WHEN r.error LIKE 'pipeline % is not loaded here'
          OR r.error LIKE 'pipeline % changed since the run started' THEN 'definition_changed'
        WHEN EXISTS (SELECT 1 FROM pipeline_step_result
                     WHERE run_id = r.id AND status = 'failed') THEN 'invalid_output'
        ELSE 'rule' END,
    review_since = coalesce(r.finished_at, r.updated_at),
    review_revision = 1
WHERE r.status = 'needs_review';
UPDATE pipeline_run
SET review_reasons = jsonb_build_array(jsonb_build_object(
        'kind', CASE WHEN review_reason = 'rule' THEN 'unsupported_evidence'
                     ELSE review_reason END,
        'field', NULL, 'message', coalesce(error, '')))
WHERE status = 'needs_review';
