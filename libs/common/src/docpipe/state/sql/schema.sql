-- The whole current schema, for reading. Migrations in migrations/ are what gets applied;
-- a test proves that applying all of them yields exactly this.


CREATE TABLE document (
    tenant_id      text        NOT NULL,
    id             text        NOT NULL,
    content        text        NOT NULL,
    content_sha256 text        NOT NULL,
    size_bytes     integer     NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- What was uploaded: text as it is; pdf and docx keep their bytes (in
    -- document_original_chunk), and the extract_text step writes their text into content
    -- (with the page map) once.
    format         text        NOT NULL DEFAULT 'text'
                   CHECK (format IN ('text', 'pdf', 'docx')),
    original       bytea,                                -- a file stored before migration
                                                         -- 0020; later: document_original_chunk
    page_starts    integer[],                            -- offset in content where each page
                                                         -- starts; NULL: (0,) (text)
    ocr_pages      integer,                              -- pages read by OCR
    extraction_warnings jsonb,
    extracted_at   timestamptz,                          -- content holds the extracted text
    PRIMARY KEY (tenant_id, id)
);
-- Retention deletes documents by age.
CREATE INDEX document_created_idx ON document (created_at);

-- A PDF's or DOCX's bytes, in chunks of at most 1 MiB written one by one as the upload is
-- read, so no process holds a whole file to store it.
CREATE TABLE document_original_chunk (
    tenant_id   text    NOT NULL,
    document_id text    NOT NULL,
    seq         integer NOT NULL,                        -- 0, 1, 2 ... in file order
    data        bytea   NOT NULL,
    PRIMARY KEY (tenant_id, document_id, seq),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);
-- PDFs and zips are compressed already: TOAST stores the chunks without trying again.
ALTER TABLE document_original_chunk ALTER COLUMN data SET STORAGE EXTERNAL;

-- Text extraction memoised per page, like provider calls: a killed worker's next attempt
-- resumes at the page in flight. Per document, not per run: every run shares its pages.
CREATE TABLE document_page (
    tenant_id   text        NOT NULL,
    document_id text        NOT NULL,
    page        integer     NOT NULL,                    -- 0-based
    attempts    integer     NOT NULL DEFAULT 1,          -- times it was started
    text        text,                                    -- NULL while it is being read
    ocr         boolean,                                 -- read by Tesseract (no text layer,
                                                         -- or one without real words)
    confidence  real,                                    -- Tesseract's mean word confidence
    seconds     real,                                    -- time its reading took
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,                             -- read: the memo later attempts use
    -- Degrees clockwise the page, as the PDF shows it (its /Rotate applied), was turned to
    -- be read upright: what orientation detection found on a scan.
    rotation    integer     NOT NULL DEFAULT 0 CHECK (rotation IN (0, 90, 180, 270)),
    -- What extraction noticed: [{"kind", "page" (1-based), "value", "message"}].
    warnings    jsonb       NOT NULL DEFAULT '[]',
    -- The text layer's share (0-1) of characters in real words (NULL: no layer to judge);
    -- below DOCPIPE_TEXT_LAYER_MIN_SCORE the page was OCRed (ocr says what was kept).
    text_layer_score real,
    -- Where its words stand, in points on the upright page (docpipe.extraction.geometry):
    -- {"width", "height", "words": [[start, end, left, top, right, bottom]]}; NULL: none.
    geometry    jsonb,
    PRIMARY KEY (tenant_id, document_id, page),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);

-- A PDF page as an image, rendered upright the first time it is asked for (GET
-- /documents/{id}/pages/{n}) and kept: documents never change.
CREATE TABLE document_page_image (
    tenant_id   text        NOT NULL,
    document_id text        NOT NULL,
    page        integer     NOT NULL,                    -- 0-based
    png         bytea       NOT NULL,
    width       integer     NOT NULL,                    -- pixels
    height      integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, document_id, page),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE batch (
    id              uuid          PRIMARY KEY,
    tenant_id       text          NOT NULL,
    pipeline        text          NOT NULL,
    status          text          NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'done', 'cancelled', 'budget_exceeded')),
    runs_total      integer       NOT NULL,
    budget_usd      numeric(14,6),
    callback_url    text,
    idempotency_key text,
    request_hash    text,
    created_at      timestamptz   NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    cost_usd        numeric(14,6) NOT NULL DEFAULT 0,    -- kept with each call, like the run's
    run_budget_usd  numeric(14,6),
    deadline_at     timestamptz,
    notified_at     timestamptz,                         -- its webhook was queued
    UNIQUE (tenant_id, idempotency_key)
);
-- The batches admission looks into.
CREATE INDEX batch_running_idx ON batch (created_at) WHERE status = 'running';

CREATE TABLE pipeline_run (
    id              uuid          PRIMARY KEY,
    tenant_id       text          NOT NULL,
    pipeline        text          NOT NULL,              -- document_extract:v1
    document_id     text          NOT NULL,
    lane            text          NOT NULL CHECK (lane IN ('interactive', 'batch')),
    batch_id        uuid          REFERENCES batch (id),
    status          text          NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'done', 'failed', 'needs_review',
                                      'cancelled', 'expired', 'budget_exceeded')),
    current_step    text,                                -- the only step that may be claimed
    steps_total     integer       NOT NULL,
    steps_done      integer       NOT NULL DEFAULT 0,
    cost_usd        numeric(14,6) NOT NULL DEFAULT 0,    -- sum of llm_call_log.cost_usd
    budget_usd      numeric(14,6),
    deadline_at     timestamptz,
    admitted_at     timestamptz,                         -- batch runs wait in PostgreSQL until set
    callback_url    text,
    idempotency_key text          NOT NULL,
    request_hash    text          NOT NULL,
    traceparent     text,
    error           text,
    created_at      timestamptz   NOT NULL DEFAULT now(),
    updated_at      timestamptz   NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    notified_at     timestamptz,                         -- its webhook was queued
    pipeline_hash   text,                                -- of the definition it started with
    -- How its calls pick among a step's candidate models: urgent (fastest the budget can pay
    -- for), normal (the step's own order), low (cheapest).
    priority        text          NOT NULL DEFAULT 'normal'
                    CHECK (priority IN ('urgent', 'normal', 'low')),
    -- While needs_review: the step a person is asked about, what kind of reason and the
    -- reasons themselves ([{kind, field, message}]), since when; every change to the review
    -- (a pause, a decision) raises the revision a decision must name.
    review_step     text,
    review_reason   text          CHECK (review_reason IN ('invalid_output', 'attempts_exhausted',
                                                           'rule', 'definition_changed')),
    review_reasons  jsonb,
    review_revision integer       NOT NULL DEFAULT 0,
    review_since    timestamptz,
    UNIQUE (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id)
);
-- The runs that use a document (deleting one, and the foreign key's own check).
CREATE INDEX pipeline_run_document_idx ON pipeline_run (tenant_id, document_id);
CREATE INDEX pipeline_run_batch_idx ON pipeline_run (batch_id, status) WHERE batch_id IS NOT NULL;
CREATE INDEX pipeline_run_active_idx ON pipeline_run (status) WHERE status IN ('queued', 'running');
-- Batch runs wait until admitted; admission reads each running batch's first few waiting
-- runs from this index, in admission order, whatever the backlog.
CREATE INDEX pipeline_run_admission_order_idx ON pipeline_run (batch_id, created_at, id)
    WHERE lane = 'batch' AND status = 'queued' AND admitted_at IS NULL;
-- Admitted batch runs still in flight bound the admission window.
CREATE INDEX pipeline_run_batch_inflight_idx ON pipeline_run (tenant_id, admitted_at)
    WHERE lane = 'batch' AND admitted_at IS NOT NULL;
CREATE INDEX pipeline_run_unnotified_idx ON pipeline_run (finished_at)
    WHERE callback_url IS NOT NULL AND notified_at IS NULL;
-- Retention prunes ended runs by age.
CREATE INDEX pipeline_run_finished_idx ON pipeline_run (finished_at)
    WHERE status NOT IN ('queued', 'running');
-- The review queue: a tenant's runs awaiting a person, oldest first.
CREATE INDEX pipeline_run_review_idx ON pipeline_run (tenant_id, review_since, id)
    WHERE status = 'needs_review';

CREATE TABLE pipeline_step_result (
    run_id           uuid          NOT NULL REFERENCES pipeline_run (id) ON DELETE CASCADE,
    step             text          NOT NULL,
    step_index       integer       NOT NULL,
    status           text          NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    attempt          integer       NOT NULL DEFAULT 0,
    generation       integer       NOT NULL DEFAULT 0,   -- bumped by a retry from this step
    lease_owner      text,
    lease_expires_at timestamptz,
    not_before       timestamptz,                        -- a retry waits until then
    enqueued_at      timestamptz,                        -- last time a message was published
    output           jsonb,
    input_tokens     integer,
    output_tokens    integer,
    cost_usd         numeric(14,6),
    model            text,
    prompt_version   text,
    error            text,
    started_at       timestamptz,
    finished_at      timestamptz,
    input_hash       text,                               -- what the step read, hashed
    review_decision_id bigint,                           -- the approval this output comes from
    review_reused    boolean       NOT NULL DEFAULT false, -- ... made for an earlier run
    model_override   text,                               -- a retry's model for this step
    lease_session    integer,                            -- key of the owner's session lock
    PRIMARY KEY (run_id, step)
);
CREATE INDEX pipeline_step_result_lease_idx ON pipeline_step_result (lease_expires_at)
    WHERE status = 'running';
CREATE INDEX pipeline_step_result_pending_idx ON pipeline_step_result (enqueued_at)
    WHERE status = 'pending';

-- Leases tied to the worker's PostgreSQL session (docpipe.state.leases): each worker process
-- holds a session advisory lock (class 1685021552, key from lease_session_key) on a
-- connection of its own, and the steps it claims carry the key (lease_session).
CREATE SEQUENCE lease_session_key AS integer CYCLE;

-- Whether a step's lease is lost: it expired, or the session that holds its key is gone.
-- A session counts as gone only once PostgreSQL has been up for a lease period: a restart
-- ends every session, not every worker, and live workers get that long to take a new key.
CREATE FUNCTION lease_lost(expires_at timestamptz, session integer, lease_s double precision)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT expires_at < now()
        OR (session IS NOT NULL
            AND pg_postmaster_start_time() < now() - make_interval(secs => lease_s)
            AND NOT EXISTS (
                SELECT FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.classid = 1685021552
                  AND l.objid = session::oid AND l.objsubid = 2 AND l.granted
                  AND l.database = (SELECT oid FROM pg_database
                                    WHERE datname = current_database())))
$$;

-- Every review decision: who, when, what, the output before and after. An approval is reused
-- when the same step of the same definition reads the same input (input_hash) in a later run.
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
    UNIQUE (run_id, revision)                        -- of two at once, the first wins
);
CREATE INDEX review_decision_reuse_idx ON review_decision (tenant_id, pipeline_hash, step, input_hash)
    WHERE action = 'approve';

-- A document whose text is known when its run is created (a text document, or a file
-- extracted for an earlier run) has its extract_text step done by create_run and
-- create_batch_runs: it costs no message, claim or publish. This is that step's output, the
-- same docpipe.worker.text_extraction gives for such a document (NULL while a file's text
-- is not yet extracted).
CREATE FUNCTION known_text_summary(d document) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN d.format = 'text' OR d.extracted_at IS NOT NULL THEN
        jsonb_build_object('format', d.format,
                           'pages', cardinality(coalesce(d.page_starts, '{0}')),
                           'ocr_pages', coalesce(d.ocr_pages, 0),
                           'characters', char_length(d.content), 'ocr_confidence', NULL,
                           'warnings', coalesce(d.extraction_warnings, '[]'::jsonb),
                           'rotated_pages',
                           (SELECT coalesce(jsonb_agg(jsonb_build_object('page', p.page + 1,
                                                                         'degrees', p.rotation)
                                                      ORDER BY p.page), '[]'::jsonb)
                            FROM document_page p
                            WHERE p.tenant_id = d.tenant_id AND p.document_id = d.id
                              AND p.rotation <> 0))
    END
$$;

-- One row per provider call attempt, written before the call is sent and completed after.
-- A row with status 'ok' is also the memo that keeps a retried step from paying twice.
CREATE TABLE llm_call_log (
    id             bigserial     PRIMARY KEY,
    run_id         uuid          NOT NULL REFERENCES pipeline_run (id) ON DELETE CASCADE,
    step           text          NOT NULL,
    generation     integer       NOT NULL,
    call_key       text          NOT NULL,
    step_attempt   integer       NOT NULL,
    tenant_id      text          NOT NULL,
    model          text          NOT NULL,
    prompt_version text          NOT NULL,
    status         text          NOT NULL DEFAULT 'sent'
                   CHECK (status IN ('sent', 'ok', 'invalid_output', 'error')),
    http_status    integer,
    error_kind     text,
    error          text,
    input_tokens   integer,
    output_tokens  integer,
    cost_usd       numeric(14,6) NOT NULL DEFAULT 0,
    latency_ms     integer,
    response       jsonb,
    created_at     timestamptz   NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    provider       text,                                 -- where the request went
    route_reason   text,                                 -- why this model (routing, fallback)
    output_mode    text          CHECK (output_mode IN ('json_schema', 'json_object', 'none')),
    max_tokens     integer,                              -- the request's generation parameters
    temperature    numeric(4,3),
    seed           bigint,
    finish_reason  text,
    usage_estimated boolean      NOT NULL DEFAULT false  -- the provider sent no usage
);
CREATE INDEX llm_call_log_memo_idx ON llm_call_log (run_id, step, generation, call_key)
    WHERE status = 'ok';
CREATE INDEX llm_call_log_run_idx ON llm_call_log (run_id);
CREATE INDEX llm_call_log_created_idx ON llm_call_log (created_at);

-- Messages to publish, written in the same transaction as the state change that wants them.
CREATE TABLE outbox (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL CHECK (topic IN ('step', 'webhook')),
    run_id       uuid,
    step         text,
    queue        text        NOT NULL,
    traceparent  text,
    payload      jsonb       NOT NULL DEFAULT '{}',
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished_idx ON outbox (available_at) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Periodic jobs run at most once per interval however many beats fire them.
CREATE TABLE periodic_job (
    name             text        PRIMARY KEY,
    last_started_at  timestamptz NOT NULL,
    last_finished_at timestamptz,
    runs             bigint      NOT NULL DEFAULT 0,
    last_result      jsonb
);

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
    tenant_id       text        NOT NULL,
    -- The Standard Webhooks webhook-id: the same on every attempt, so receivers deduplicate.
    message_id      text        NOT NULL
                    DEFAULT ('msg_' || replace(gen_random_uuid()::text, '-', '')),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    enqueued_at     timestamptz,                         -- its message last left the outbox
    attempt_expires_at timestamptz,                      -- an attempt is in flight until then
    CHECK ((run_id IS NULL) <> (batch_id IS NULL))
);
CREATE INDEX webhook_delivery_run_idx ON webhook_delivery (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX webhook_delivery_batch_idx ON webhook_delivery (batch_id) WHERE batch_id IS NOT NULL;
-- The reaper's look for lost messages, and the count of attempts in flight per tenant.
CREATE INDEX webhook_delivery_pending_idx ON webhook_delivery (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_delivery_in_flight_idx ON webhook_delivery (tenant_id)
    WHERE attempt_expires_at IS NOT NULL;

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
