-- Admission ranks only the first few waiting runs of each running batch: this index hands
-- them over in admission order (created_at, then id) without reading the batch's backlog
-- (ranking all 10,000 waiting runs of a big batch took 12 ms per admitted run).
CREATE INDEX pipeline_run_admission_order_idx ON pipeline_run (batch_id, created_at, id)
    WHERE lane = 'batch' AND status = 'queued' AND admitted_at IS NULL;
DROP INDEX pipeline_run_admission_idx;
-- The batches admission looks into.
CREATE INDEX batch_running_idx ON batch (created_at) WHERE status = 'running';
