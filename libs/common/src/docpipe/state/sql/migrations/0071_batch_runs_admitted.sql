-- Each batch counts the runs admitted from it, as admission admits them: the fairness order
-- reads the count instead of counting a large batch's admitted runs on every admission.
ALTER TABLE batch ADD COLUMN runs_admitted integer NOT NULL DEFAULT 0;
UPDATE batch b
SET runs_admitted = (SELECT count(*) FROM pipeline_run r
                     WHERE r.batch_id = b.id AND r.admitted_at IS NOT NULL)
WHERE b.status = 'running';
