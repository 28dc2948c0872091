-- docpipe: no-transaction
-- Documents can be deleted (DELETE /documents/{id}, retention): both look for the runs that
-- use a document (also what the foreign key checks on each delete), and retention for old
-- documents.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_document_idx ON pipeline_run (tenant_id, document_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS document_created_idx ON document (created_at);
