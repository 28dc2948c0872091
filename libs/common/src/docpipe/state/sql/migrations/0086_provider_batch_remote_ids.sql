-- A provider's batch is docpipe's provider batch at most once: recovery after a lost answer
-- (Anthropic's Message Batches keep no metadata: a batch is found among those created since
-- the intent) looks up which of the provider's batches are already on record, and never
-- records one twice.
CREATE UNIQUE INDEX provider_batch_remote_idx ON provider_batch (provider, remote_id)
    WHERE remote_id IS NOT NULL;
