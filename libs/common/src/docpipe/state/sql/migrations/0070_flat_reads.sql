-- docpipe: no-transaction
-- Reads that cost their own work, not the history (issue 36). Each periodic or list query
-- gets an index that leads with what it filters on; the indexes they replace go after.
-- The runs admitted and in flight (a few dozen, whatever the history): admission's window
-- and the reaper's look for lost messages ...
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_admitted_in_flight_idx ON pipeline_run (lane) WHERE admitted_at IS NOT NULL AND status IN ('queued', 'running');
-- ... and each tenant's admissions within the fairness memory, by time first.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_batch_admitted_idx ON pipeline_run (admitted_at, tenant_id) WHERE lane = 'batch' AND admitted_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS pipeline_run_batch_inflight_idx;
-- A page of a batch's runs in id order, and of its runs of one status (also its progress).
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_batch_page_idx ON pipeline_run (batch_id, id) WHERE batch_id IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_batch_status_idx ON pipeline_run (batch_id, status, id) WHERE batch_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS pipeline_run_batch_idx;
-- The runs in flight by status and lane: the runs gauge counts them from the index alone.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipeline_run_in_flight_idx ON pipeline_run (status, lane) WHERE status IN ('queued', 'running');
DROP INDEX CONCURRENTLY IF EXISTS pipeline_run_active_idx;
-- Ended runs are estimated, not counted: each (status, lane)'s share, kept by ANALYZE.
CREATE STATISTICS IF NOT EXISTS pipeline_run_status_lane (mcv) ON status, lane FROM pipeline_run;
ANALYZE pipeline_run;
