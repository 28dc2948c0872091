-- The provider call log, partitioned by week (migration 0073 turns the table into one):
-- retention drops a week's partition instead of deleting its rows one by one. These are the
-- functions that keep the partitions (beat's retention pass calls them) and, for 0073 only,
-- the three steps of turning a filled table into a partitioned one without a long lock.

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

-- Migration 0073, step 1: on a table with rows, the cutover: a bound at least a week ahead
-- (a Monday) that every row, old and new, must stay below until the table becomes a
-- partition (0073's last step; run docpipe migrate again if it stopped before), so that
-- attaching it needs no scan. Each run of this step moves the bound on if it is nearer than
-- that. Also drops the foreign key to pipeline_run (dropping a partition that has one
-- would lock pipeline_run exclusively) and adds response_z. Each is a brief lock.
CREATE FUNCTION llm_call_log_switch_prepare() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    bound timestamptz := date_trunc('week', now() + interval '7 days', 'UTC') + interval '1 week';
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('llm_call_log')) <> 'r' THEN
        RETURN 'partitioned';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    ALTER TABLE llm_call_log DROP CONSTRAINT IF EXISTS llm_call_log_run_id_fkey;
    ALTER TABLE llm_call_log ADD COLUMN IF NOT EXISTS response_z bytea;
    IF coalesce(llm_call_log_cutover(), '-infinity') < now() + interval '1 day' THEN
        ALTER TABLE llm_call_log DROP CONSTRAINT IF EXISTS llm_call_log_cutover;
        EXECUTE format('ALTER TABLE llm_call_log ADD CONSTRAINT llm_call_log_cutover'
                       ' CHECK (created_at < %L) NOT VALID', bound);
    END IF;
    RETURN 'bound ' || llm_call_log_cutover();
END
$$;

-- The bound of the cutover constraint, if the table has one.
CREATE FUNCTION llm_call_log_cutover() RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT (regexp_match(pg_get_constraintdef(oid), '''([^'']+)'''))[1]::timestamptz
    FROM pg_constraint
    WHERE conrelid = to_regclass('llm_call_log') AND conname = 'llm_call_log_cutover'
$$;

-- Step 2: check every row against the cutover. A scan of the whole table, under a lock
-- that lets reads and writes go on (SHARE UPDATE EXCLUSIVE).
CREATE FUNCTION llm_call_log_switch_validate() RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('llm_call_log')) <> 'r' THEN
        RETURN 'partitioned';
    END IF;
    ALTER TABLE llm_call_log VALIDATE CONSTRAINT llm_call_log_cutover;
    RETURN 'validated';
END
$$;

-- Step 3, one short transaction: the table (if it has rows) becomes the partition of every
-- time before the cutover under a new partitioned llm_call_log, with a default partition;
-- an empty one is replaced. The only long-held lock is none: the table's exclusive lock is
-- held for the catalog changes alone, and waited for at most lock_timeout.
CREATE FUNCTION llm_call_log_switch() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    bound timestamptz;
    legacy boolean := false;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('llm_call_log')) = 'p' THEN
        RETURN 'partitioned';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    IF to_regclass('llm_call_log') IS NOT NULL THEN
        LOCK TABLE llm_call_log IN ACCESS EXCLUSIVE MODE;
        IF EXISTS (SELECT 1 FROM llm_call_log) THEN
            bound := llm_call_log_cutover();
            IF bound IS NULL OR NOT (SELECT convalidated FROM pg_constraint
                                     WHERE conrelid = 'llm_call_log'::regclass
                                       AND conname = 'llm_call_log_cutover') THEN
                RAISE EXCEPTION 'llm_call_log has no validated cutover: run docpipe migrate again';
            END IF;
            ALTER TABLE llm_call_log RENAME TO llm_call_log_legacy;
            ALTER SEQUENCE llm_call_log_id_seq OWNED BY NONE;
            legacy := true;
        ELSE
            DROP TABLE llm_call_log;
        END IF;
    END IF;
    CREATE SEQUENCE IF NOT EXISTS llm_call_log_id_seq;
    -- One row per provider call attempt, written before the call is sent and completed
    -- after. A row with status 'ok' is also the memo that keeps a retried step from paying
    -- twice. No foreign key to pipeline_run: the statements that delete runs delete their
    -- calls (prune_runs, delete_document_runs).
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
        provider       text,
        route_reason   text,
        output_mode    text          CONSTRAINT llm_call_log_output_mode_check
                       CHECK (output_mode IN ('json_schema', 'json_object', 'none')),
        max_tokens     integer,
        temperature    numeric(4,3),
        seed           bigint,
        finish_reason  text,
        usage_estimated boolean      NOT NULL DEFAULT false,
        response_z     bytea
    ) PARTITION BY RANGE (created_at);
    ALTER SEQUENCE llm_call_log_id_seq OWNED BY llm_call_log.id;
    IF legacy THEN
        EXECUTE format('ALTER TABLE llm_call_log ATTACH PARTITION llm_call_log_legacy'
                       ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    END IF;
    PERFORM llm_call_log_add_partition('llm_call_log_default', 'DEFAULT');
    -- Rows of a week without a partition are deleted one by one, oldest first.
    CREATE INDEX llm_call_log_default_created_idx ON llm_call_log_default (created_at);
    RETURN CASE WHEN legacy THEN 'attached the table up to ' || bound ELSE 'created' END;
END
$$;
