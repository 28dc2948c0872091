-- docpipe: no-transaction
-- The review queue: a tenant's runs awaiting a person, oldest first.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_review_idx ON pipeline_run (tenant_id, review_since, id) WHERE status = 'needs_review';
