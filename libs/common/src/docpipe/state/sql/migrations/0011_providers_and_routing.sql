-- Real providers (issue 16): what each call asked for and how its model was chosen, and the
-- priority a run's calls are routed by.
ALTER TABLE pipeline_run
    ADD COLUMN priority text NOT NULL DEFAULT 'normal'
        CHECK (priority IN ('urgent', 'normal', 'low'));
ALTER TABLE llm_call_log
    ADD COLUMN provider        text,
    ADD COLUMN route_reason    text,
    ADD COLUMN output_mode     text CHECK (output_mode IN ('json_schema', 'json_object', 'none')),
    ADD COLUMN max_tokens      integer,
    ADD COLUMN temperature     numeric(4,3),
    ADD COLUMN seed            bigint,
    ADD COLUMN finish_reason   text,
    ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false;
