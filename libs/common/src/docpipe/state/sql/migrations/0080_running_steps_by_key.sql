-- docpipe: no-transaction
-- The running steps' index leads with their key (issue 36). It led with lease_expires_at,
-- which no query filters or orders on (the reaper tests each running step's lease with
-- lease_lost()), so a statement keyed by (run_id, step) that picked it read every running
-- step: once the statistics' sample of pipeline_step_result no longer holds a running step
-- (a few dozen among millions), the planner takes 'running' for one row and prefers it to
-- the primary key (4 buffers at 100,000 runs, 47 at 1,000,000). Keyed by (run_id, step),
-- either index finds the one row; the reaper and the lease renewal still read only the
-- running steps, and a renewal (lease_expires_at and lease_session only) changes no indexed
-- column: a HOT update where its page has room.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_step_result_running_idx ON pipeline_step_result (run_id, step) WHERE status = 'running';
DROP INDEX CONCURRENTLY IF EXISTS pipeline_step_result_lease_idx;
