-- docpipe: no-transaction
-- Beat's reads of the batch table by what they look for (issue 36): the batch table holds
-- every batch of the runs' retention, and these two read it whole at every pass.
-- Batches ended whose webhook is owed (queue_batch_webhooks): a handful at any time ...
CREATE INDEX CONCURRENTLY IF NOT EXISTS batch_webhook_owed_idx ON batch (id) WHERE callback_url IS NOT NULL AND notified_at IS NULL AND status <> 'running';
-- ... and ended batches by their end (prune_batches: those past the retention).
CREATE INDEX CONCURRENTLY IF NOT EXISTS batch_ended_idx ON batch (finished_at) WHERE status <> 'running';
