-- Periodic jobs run at most once per interval however many beats fire them.
CREATE TABLE periodic_job (
    name             text        PRIMARY KEY,
    last_started_at  timestamptz NOT NULL,
    last_finished_at timestamptz,
    runs             bigint      NOT NULL DEFAULT 0,
    last_result      jsonb
);
