-- docpipe: no-transaction
-- A tenant's runs and batches, newest first (GET /runs, GET /batches, the web pages' home):
-- each page read from an index in order, whatever the tenant's history. All runs, those of
-- one status, those of one pipeline; runs by the start of their document's id (the
-- text_pattern_ops index serves a prefix search in any collation, and equality as the one
-- it replaces did, for deleting a document); a batch's runs (a tenant's index, filtered,
-- would read the tenant's history back to the batch); batches.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_tenant_created_idx ON pipeline_run (tenant_id, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_tenant_status_idx ON pipeline_run (tenant_id, status, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_tenant_pipeline_idx ON pipeline_run (tenant_id, pipeline, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_batch_created_idx ON pipeline_run (batch_id, created_at, id) WHERE batch_id IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_document_prefix_idx ON pipeline_run (tenant_id, document_id text_pattern_ops);
DROP INDEX CONCURRENTLY IF EXISTS pipeline_run_document_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS batch_tenant_created_idx ON batch (tenant_id, created_at, id);
