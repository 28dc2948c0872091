-- Evaluation sets and evaluations (issue 34): documents with the output a pipeline's step
-- should give, and batches that measure a pipeline version against them.
CREATE TABLE evaluation_set (
    id          uuid        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    pipeline    text        NOT NULL,                     -- a pipeline's name (any version)
    step        text        NOT NULL,                     -- whose output is expected
    version     integer     NOT NULL DEFAULT 0,           -- raised by every change of items
    items       integer     NOT NULL DEFAULT 0,           -- in the current version
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- An item as of the set versions [added_in, removed_in): a change ends the old row and adds
-- a new one, so a report names the version it scored and that version stays readable.
CREATE TABLE evaluation_set_item (
    set_id             uuid        NOT NULL REFERENCES evaluation_set (id) ON DELETE CASCADE,
    tenant_id          text        NOT NULL,
    document_id        text        NOT NULL,
    added_in           integer     NOT NULL,
    removed_in         integer,
    expected           jsonb       NOT NULL,
    source             text        NOT NULL CHECK (source IN ('review', 'upload', 'samples')),
    -- A promoted review: the decision, its reviewer and the run it was made on.
    review_decision_id bigint,
    decided_by         text,
    run_id             uuid,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (set_id, document_id, added_in)
);
-- The documents a set holds now: retention keeps them (docpipe.state.retention).
CREATE INDEX evaluation_set_item_document_idx ON evaluation_set_item (tenant_id, document_id)
    WHERE removed_in IS NULL;

CREATE TABLE evaluation (
    id           uuid        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    set_id       uuid        NOT NULL REFERENCES evaluation_set (id) ON DELETE CASCADE,
    set_version  integer     NOT NULL,
    pipeline     text        NOT NULL,                    -- name:vN
    step         text        NOT NULL,
    -- Its batch (no foreign key: retention deletes ended batches, the report stays).
    batch_id     uuid        NOT NULL UNIQUE,
    models       jsonb       NOT NULL DEFAULT '{}',        -- {"*" or step: model} asked for
    report       jsonb,                                   -- scored once its batch ended
    reported_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX evaluation_tenant_idx ON evaluation (tenant_id, created_at);

-- Each document of a reported evaluation: its accuracy and what it got wrong (the cells not
-- correct, with the evidence of what was got), read a page at a time.
CREATE TABLE evaluation_document (
    evaluation_id uuid    NOT NULL REFERENCES evaluation (id) ON DELETE CASCADE,
    document_id   text    NOT NULL,
    run_id        uuid,
    status        text    NOT NULL,                       -- the run's, or 'missing'
    accuracy      double precision NOT NULL,
    wrong         jsonb   NOT NULL DEFAULT '[]',
    paused_by     jsonb   NOT NULL DEFAULT '[]',          -- the review rules that held
    PRIMARY KEY (evaluation_id, document_id)
);

-- An evaluation's runs measure the review rules instead of pausing for them, and reuse the
-- answer to a request already answered in the tenant (opt-in for other runs).
ALTER TABLE pipeline_run
    ADD COLUMN reuse_answers boolean NOT NULL DEFAULT false,
    ADD COLUMN review_pauses boolean NOT NULL DEFAULT true;
