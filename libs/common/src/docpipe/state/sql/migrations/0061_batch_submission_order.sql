-- docpipe: no-transaction
-- A batch's runs in the order its documents were sent (the results export, resumed after a
-- run): the document's place in the batch request, read back from the idempotency key
-- create_batch_runs gives each run, then the run id. The expression is batch_results' own.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_batch_position_idx ON pipeline_run (batch_id, (CASE WHEN idempotency_key ~ '^batch:[0-9a-f-]+:[0-9]+$' THEN split_part(idempotency_key, ':', 3)::integer - 1 END), id) WHERE batch_id IS NOT NULL;
