-- A run keeps the definition it started with: the hash of its pipeline's definition, so a
-- changed definition under the same name:vN is refused while runs use the old one.
ALTER TABLE pipeline_run ADD COLUMN pipeline_hash text;
