-- Calls still waiting for a provider batch (not packed yet, or packed and not answered), by
-- run: the poller finds those of runs whose deadline comes close (switch_waits_near_deadline)
-- without reading the calls already settled, which the table keeps.
CREATE INDEX provider_batch_call_open_idx ON provider_batch_call (run_id)
    WHERE state IN ('waiting', 'packed');
