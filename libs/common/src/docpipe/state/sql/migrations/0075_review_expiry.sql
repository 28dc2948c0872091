-- docpipe: no-transaction
-- The review backlog's own retention (DOCPIPE_REVIEW_EXPIRE_AFTER_S): the runs awaiting a
-- person, oldest first, whatever the tenant.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_review_since_idx ON pipeline_run (review_since) WHERE status = 'needs_review';
