-- docpipe: no-transaction
-- The pending steps' index on enqueued_at goes (issue 36). No query filters or orders on
-- enqueued_at through it: every statement on pending steps finds them by their run's key
-- (the primary key). But the index holds every pending step, and those of ended runs (a
-- failed run's later steps) are history: at 1,000,000 runs it held 70,000 entries, few
-- enough against 4,000,000 steps that the planner ANDed a bitmap of all of them with the
-- primary key's few rows (cancel_pending_steps: 0.2 ms at 100,000 runs, 18 ms at 1,000,000;
-- the reaper's redrive_lost_steps: 33 ms of its 41). The primary key alone reads the same
-- rows.
DROP INDEX CONCURRENTLY IF EXISTS pipeline_step_result_pending_idx;
