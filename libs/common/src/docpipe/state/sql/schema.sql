-- The whole current schema, for reading. Migrations in migrations/ are what gets applied;
-- a test proves that applying all of them yields exactly this.


CREATE TABLE document (
    tenant_id      text        NOT NULL,
    id             text        NOT NULL,
    content        text        NOT NULL,
    content_sha256 text        NOT NULL,
    size_bytes     integer     NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- What was uploaded: text as it is; pdf, docx and the images (png, jpeg, tiff) keep
    -- their bytes (in document_original_chunk), and the extract_text step writes their
    -- text into content (with the page map) once.
    format         text        NOT NULL DEFAULT 'text'
                   CHECK (format IN ('text', 'pdf', 'docx', 'png', 'jpeg', 'tiff')),
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
-- /documents/{id}/pages/{n}) and kept: documents never change. So is a page that could not
-- be drawn (its error is the answer from then on).
CREATE TABLE document_page_image (
    tenant_id   text        NOT NULL,
    document_id text        NOT NULL,
    page        integer     NOT NULL,                    -- 0-based
    png         bytea,
    width       integer,                                 -- pixels
    height      integer,
    created_at  timestamptz NOT NULL DEFAULT now(),
    error_kind  text,                                    -- an unreadable kind: too_slow, ...
    error       text,
    CONSTRAINT document_page_image_drawn_or_failed
        CHECK ((png IS NOT NULL AND width IS NOT NULL AND height IS NOT NULL AND error IS NULL)
               OR (png IS NULL AND error IS NOT NULL AND error_kind IS NOT NULL)),
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
    runs_admitted   integer       NOT NULL DEFAULT 0,    -- counted by admission
    provider_batch  boolean       NOT NULL DEFAULT false, -- its calls may wait for a provider batch
    saved_usd       numeric(14,6) NOT NULL DEFAULT 0,    -- what provider batches' discount saved
    -- What its runs' calls waiting for provider batches are estimated to cost (at the batch
    -- price): counted by budget checks beside cost_usd (provider_batch_reservations).
    reserved_usd    numeric(14,6) NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, idempotency_key)
);
-- The batches admission looks into.
CREATE INDEX batch_running_idx ON batch (created_at) WHERE status = 'running';
-- A tenant's batches, newest first (GET /batches, the web pages' home).
CREATE INDEX batch_tenant_created_idx ON batch (tenant_id, created_at, id);
-- Beat's passes (migration 0081): ended batches whose webhook is owed, a handful at any
-- time, and ended batches by their end, for retention.
CREATE INDEX batch_webhook_owed_idx ON batch (id)
    WHERE callback_url IS NOT NULL AND notified_at IS NULL AND status <> 'running';
CREATE INDEX batch_ended_idx ON batch (finished_at) WHERE status <> 'running';

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
    -- An evaluation's run: it reuses answers already given in the tenant (opt-in for
    -- others) and measures the review rules instead of pausing for them.
    reuse_answers   boolean       NOT NULL DEFAULT false,
    review_pauses   boolean       NOT NULL DEFAULT true,
    -- Its calls go through a provider's batch interface (its batch's choice, issue 38).
    provider_batch  boolean       NOT NULL DEFAULT false,
    UNIQUE (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, document_id) REFERENCES document (tenant_id, id)
);
-- The runs that use a document (deleting one, and the foreign key's own check), and those
-- whose document's id starts with a prefix (GET /runs?document=, in any collation), each
-- document's in time order: a page of a rare prefix is read from the index alone.
CREATE INDEX pipeline_run_document_created_idx ON pipeline_run (tenant_id, document_id text_pattern_ops, created_at, id);
-- A tenant's runs newest first (GET /runs, the web pages' home): all, of a status, of a
-- pipeline; a page is read from one of these in order.
CREATE INDEX pipeline_run_tenant_created_idx ON pipeline_run (tenant_id, created_at, id);
CREATE INDEX pipeline_run_tenant_status_idx ON pipeline_run (tenant_id, status, created_at, id);
CREATE INDEX pipeline_run_tenant_pipeline_idx ON pipeline_run (tenant_id, pipeline, created_at, id);
-- A batch's runs newest first (GET /runs?batch_id=).
CREATE INDEX pipeline_run_batch_created_idx ON pipeline_run (batch_id, created_at, id)
    WHERE batch_id IS NOT NULL;
-- A page of a batch's runs in id order, and of its runs of one status (and its progress).
CREATE INDEX pipeline_run_batch_page_idx ON pipeline_run (batch_id, id) WHERE batch_id IS NOT NULL;
CREATE INDEX pipeline_run_batch_status_idx ON pipeline_run (batch_id, status, id)
    WHERE batch_id IS NOT NULL;
-- A batch's runs in the order its documents were sent (the results export): the document's
-- place in the request, from the key create_batch_runs gives each run (batch_results' own
-- expression), then the run id.
CREATE INDEX pipeline_run_batch_position_idx ON pipeline_run (batch_id,
    (CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$'
          THEN split_part(idempotency_key, ':', 3)::integer - 1 END), id)
    WHERE batch_id IS NOT NULL;
-- The runs in flight, by status and lane (the runs gauge counts them from the index alone).
CREATE INDEX pipeline_run_in_flight_idx ON pipeline_run (status, lane)
    WHERE status IN ('queued', 'running');
-- Batch runs wait until admitted; admission reads each running batch's first few waiting
-- runs from this index, in admission order, whatever the backlog.
CREATE INDEX pipeline_run_admission_order_idx ON pipeline_run (batch_id, created_at, id)
    WHERE lane = 'batch' AND status = 'queued' AND admitted_at IS NULL;
-- The runs admitted and in flight: batch runs bound the admission window, and the reaper
-- looks at their steps only. The fairness order counts each tenant's admissions within its
-- memory, by time first.
CREATE INDEX pipeline_run_admitted_in_flight_idx ON pipeline_run (lane)
    WHERE admitted_at IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX pipeline_run_batch_admitted_idx ON pipeline_run (admitted_at, tenant_id)
    WHERE lane = 'batch' AND admitted_at IS NOT NULL;
CREATE INDEX pipeline_run_unnotified_idx ON pipeline_run (finished_at)
    WHERE callback_url IS NOT NULL AND notified_at IS NULL;
-- Retention prunes ended runs by age.
CREATE INDEX pipeline_run_finished_idx ON pipeline_run (finished_at)
    WHERE status NOT IN ('queued', 'running');
-- The review queue: a tenant's runs awaiting a person, oldest first.
CREATE INDEX pipeline_run_review_idx ON pipeline_run (tenant_id, review_since, id)
    WHERE status = 'needs_review';
-- ... and across tenants, oldest first: reviews that expire (DOCPIPE_REVIEW_EXPIRE_AFTER_S).
CREATE INDEX pipeline_run_review_since_idx ON pipeline_run (review_since)
    WHERE status = 'needs_review';
-- Ended runs are estimated, not counted (the runs gauge): each (status, lane)'s share.
CREATE STATISTICS pipeline_run_status_lane (mcv) ON status, lane FROM pipeline_run;

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
    -- Every claim, and the time the step's handed-back deliveries worked: never refunded,
    -- so a step that hands itself back has a cap (DOCPIPE_MAX_EXTRACTION_DELIVERIES, _S).
    deliveries       integer       NOT NULL DEFAULT 0,
    worked_s         double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, step)
);
-- The running steps, by key (migration 0080): the reaper's and the lease renewal's few
-- dozen rows; a keyed statement that picks it still finds its row by (run_id, step).
CREATE INDEX pipeline_step_result_running_idx ON pipeline_step_result (run_id, step)
    WHERE status = 'running';
-- No index of the pending steps (migration 0089): every statement finds them by their run's
-- key, and those of ended runs are history.

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
-- A row with status 'ok' is also the memo that keeps a retried step from paying twice. Its
-- answer is stored compressed (response_z; response holds those of rows written before).
-- Partitioned by week (llm_call_log_add_partitions, run by beat's retention pass, makes
-- llm_call_log_pYYYYMMDD two weeks ahead): retention drops a week's partition whole. No
-- foreign key to pipeline_run: dropping a partition would lock pipeline_run exclusively;
-- the statements that delete runs delete their calls.
CREATE SEQUENCE llm_call_log_id_seq;
CREATE TABLE llm_call_log (
    id             bigint        NOT NULL DEFAULT nextval('llm_call_log_id_seq'),
    run_id         uuid          NOT NULL,
    step           text          NOT NULL,
    generation     integer       NOT NULL,
    call_key       text          NOT NULL,
    step_attempt   integer       NOT NULL,
    tenant_id      text          NOT NULL,
    model          text          NOT NULL,
    prompt_version text          NOT NULL,
    status         text          NOT NULL DEFAULT 'sent'
                   CONSTRAINT llm_call_log_status_check
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
    output_mode    text          CONSTRAINT llm_call_log_output_mode_check
                   CHECK (output_mode IN ('json_schema', 'json_object', 'none')),
    max_tokens     integer,                              -- the request's generation parameters
    temperature    numeric(4,3),
    seed           bigint,
    finish_reason  text,
    usage_estimated boolean      NOT NULL DEFAULT false, -- the provider sent no usage
    response_z     bytea                                 -- the answer: zlib-compressed JSON
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE llm_call_log_id_seq OWNED BY llm_call_log.id;

-- The call log's partitions but the default one, with the range of created_at each holds.
CREATE FUNCTION llm_call_log_partitions()
RETURNS TABLE (partition regclass, from_at timestamptz, to_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.oid::regclass,
           CASE WHEN b.bound[1] = 'MINVALUE' THEN '-infinity'
                ELSE trim(both '''' FROM b.bound[1]) END::timestamptz,
           trim(both '''' FROM b.bound[2])::timestamptz
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                    'FROM \((.*)\) TO \((.*)\)') AS b (bound)
    WHERE i.inhparent = 'llm_call_log'::regclass AND b.bound IS NOT NULL
$$;

-- A new partition named `name` for `bounds` ('DEFAULT', or 'FOR VALUES FROM (...) TO (...)'):
-- made beside the table with its indexes, then attached, which locks the parent only in
-- SHARE UPDATE EXCLUSIVE mode (reads and writes go on) and the default partition, checked
-- for rows of the new range, for a moment. The indexes are each partition's own: a filled
-- table attached as a partition keeps the indexes it has (migration 0073).
CREATE FUNCTION llm_call_log_add_partition(name text, bounds text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE llm_call_log INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   name);
    -- finish_calls and route_call find a call by its id; the memo, a step's sums and a
    -- run's deletion by (run, step, generation, key).
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', name || '_id_idx', name);
    EXECUTE format('CREATE INDEX %I ON %I (run_id, step, generation, call_key)',
                   name || '_run_idx', name);
    EXECUTE format('ALTER TABLE llm_call_log ATTACH PARTITION %I %s', name, bounds);
END
$$;

-- Weekly partitions (Monday 00:00 UTC to the next) from this week to `weeks_ahead` weeks
-- ahead, those not there yet; returns how many it made. Rows of a week without a partition
-- go to the default partition (retention deletes them row by row).
CREATE FUNCTION llm_call_log_add_partitions(weeks_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    week timestamptz;
    made integer := 0;
BEGIN
    FOR week IN SELECT generate_series(date_trunc('week', now(), 'UTC'),
                                       date_trunc('week', now(), 'UTC')
                                           + make_interval(weeks => weeks_ahead),
                                       interval '1 week')
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM llm_call_log_partitions() p
                              WHERE p.from_at < week + interval '1 week' AND p.to_at > week);
        PERFORM llm_call_log_add_partition(
            'llm_call_log_p' || to_char(week AT TIME ZONE 'UTC', 'YYYYMMDD'),
            format('FOR VALUES FROM (%L) TO (%L)', week, week + interval '1 week'));
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

-- Drop the oldest partition whose every row is older than `older_than`, if any: detached
-- and dropped in one short transaction (the parent is locked exclusively for as long: the
-- caller bounds the wait with lock_timeout). The calls of runs not yet ended (in flight,
-- awaiting a person) are kept: copied first into the default partition. Returns the
-- partition and the rows kept.
CREATE FUNCTION llm_call_log_drop_partition(older_than timestamptz)
RETURNS TABLE (dropped text, kept bigint)
LANGUAGE plpgsql AS $$
DECLARE
    victim regclass;
    victim_to timestamptz;
    unended uuid[];
    columns text;
BEGIN
    SELECT p.partition, p.to_at INTO victim, victim_to
    FROM llm_call_log_partitions() p
    WHERE p.to_at <= older_than
    ORDER BY p.to_at
    LIMIT 1;
    IF victim IS NULL THEN
        RETURN;
    END IF;
    -- Before any lock: the runs that have not ended and may have calls in it (started
    -- before it ends), from the indexes of runs in flight and of the review queue.
    unended := ARRAY(SELECT id FROM pipeline_run
                     WHERE status IN ('queued', 'running') AND created_at < victim_to
                     UNION ALL
                     SELECT id FROM pipeline_run
                     WHERE status = 'needs_review' AND created_at < victim_to);
    EXECUTE format('ALTER TABLE llm_call_log DETACH PARTITION %s', victim);
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
    FROM pg_attribute a
    WHERE a.attrelid = 'llm_call_log'::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    EXECUTE format('INSERT INTO llm_call_log (%s) SELECT %s FROM %s WHERE run_id = ANY($1)',
                   columns, columns, victim)
    USING unended;
    GET DIAGNOSTICS kept = ROW_COUNT;
    dropped := victim::text;
    EXECUTE format('DROP TABLE %s', victim);
    RETURN NEXT;
END
$$;

SELECT llm_call_log_add_partition('llm_call_log_default', 'DEFAULT');
-- Rows of a week without a partition are deleted one by one, oldest first.
CREATE INDEX llm_call_log_default_created_idx ON llm_call_log_default (created_at);

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

-- Evaluation sets (docpipe.state.evaluation_sets) and evaluations (docpipe.state.evaluations):
-- documents with the output a pipeline's step should give, and batches that measure a
-- pipeline version against them.
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

-- The web pages' sessions on the server: a cookie names one (its id, encrypted with the
-- key it signed in with), and signing out ends it here, so a copied cookie stops working
-- at once instead of at its expiry.
CREATE TABLE web_session (
    id_sha256   text        PRIMARY KEY,             -- of the id the cookie holds
    tenant_id   text        NOT NULL,
    api_key_id  text,                                -- the key signed in with
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz                          -- signed out
);
-- Retention deletes sessions a day after they expired.
CREATE INDEX web_session_expires_idx ON web_session (expires_at);

-- The provider-batch lane (docpipe.state.provider_batches): a provider batch as docpipe
-- created it (its intent is recorded, state 'packing', before anything is uploaded), and
-- each call waiting for one, keyed by its llm_call_log row (custom_id docpipe-call-<id>),
-- with the request's body until it is answered.
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
-- A provider's batch is docpipe's provider batch at most once (recovery looks it up).
CREATE UNIQUE INDEX provider_batch_remote_idx ON provider_batch (provider, remote_id)
    WHERE remote_id IS NOT NULL;

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
    answered_at       timestamptz,
    -- Its call's estimated cost at the batch price, held while the wait is open (waiting,
    -- packed, answered): budget checks count it beside what was spent.
    reserved_usd      numeric(14,6) NOT NULL DEFAULT 0
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

-- A batch's reservations (batch.reserved_usd) follow its runs' waits, whichever statement
-- opens or closes one: one update of each batch a statement.
CREATE FUNCTION add_batch_reservations(deltas jsonb) RETURNS void LANGUAGE sql AS $$
    UPDATE batch b
    SET reserved_usd = b.reserved_usd + d.delta
    FROM (SELECT r.batch_id, sum(x.delta) AS delta
          FROM jsonb_to_recordset(deltas) AS x (run_id uuid, delta numeric)
          JOIN pipeline_run r ON r.id = x.run_id
          WHERE r.batch_id IS NOT NULL
          GROUP BY r.batch_id) d
    WHERE b.id = d.batch_id AND d.delta <> 0
$$;

CREATE FUNCTION provider_batch_reservations() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    deltas jsonb := '[]';
BEGIN
    -- Each event has only its own transition tables: a branch names those it has.
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        deltas := deltas || coalesce(
            (SELECT jsonb_agg(jsonb_build_object('run_id', run_id, 'delta', reserved_usd))
             FROM opened
             WHERE state IN ('waiting', 'packed', 'answered') AND reserved_usd <> 0),
            '[]');
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        deltas := deltas || coalesce(
            (SELECT jsonb_agg(jsonb_build_object('run_id', run_id, 'delta', -reserved_usd))
             FROM closed
             WHERE state IN ('waiting', 'packed', 'answered') AND reserved_usd <> 0),
            '[]');
    END IF;
    IF deltas <> '[]' THEN
        PERFORM add_batch_reservations(deltas);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER provider_batch_call_opened AFTER INSERT ON provider_batch_call
    REFERENCING NEW TABLE AS opened
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
CREATE TRIGGER provider_batch_call_moved AFTER UPDATE ON provider_batch_call
    REFERENCING OLD TABLE AS closed NEW TABLE AS opened
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
CREATE TRIGGER provider_batch_call_closed AFTER DELETE ON provider_batch_call
    REFERENCING OLD TABLE AS closed
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
-- Calls still waiting (packed or not), by run: those of runs whose deadline comes close.
CREATE INDEX provider_batch_call_open_idx ON provider_batch_call (run_id)
    WHERE state IN ('waiting', 'packed');
