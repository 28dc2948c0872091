-- docpipe: no-transaction
-- A tenant's runs by the start of their document's id, newest first (GET /runs?document=,
-- the web pages' search by name): each document's runs in time order behind its id, so a
-- page of a prefix that few runs share is read from the index alone (no heap row per
-- match) and only the page's rows are fetched (list_runs_by_document). It serves what the
-- index it replaces served: equality on the id (deleting a document, the foreign key's
-- check) and a prefix in any collation (text_pattern_ops).
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_document_created_idx ON pipeline_run (tenant_id, document_id text_pattern_ops, created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS pipeline_run_document_prefix_idx;
