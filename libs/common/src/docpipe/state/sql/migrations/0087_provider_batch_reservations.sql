-- Budgets reserved at the provider-batch price (issue 38). A call waiting for a provider
-- batch is not paid yet, so the spending of its run, batch and step does not show it: each
-- wait holds what its call is estimated to cost at the batch price
-- (provider_batch_call.reserved_usd) while it is open (waiting, packed, or answered and not
-- yet recorded), and a budget check counts those reservations beside what was spent. A
-- run's and a step's are summed from their waits; a batch's, which may have thousands open,
-- are kept in batch.reserved_usd by triggers, whichever statement opens or closes a wait
-- (one update of each batch a statement, however many waits it moves).
ALTER TABLE batch ADD COLUMN reserved_usd numeric(14,6) NOT NULL DEFAULT 0;
ALTER TABLE provider_batch_call ADD COLUMN reserved_usd numeric(14,6) NOT NULL DEFAULT 0;

CREATE FUNCTION add_batch_reservations(deltas jsonb) RETURNS void LANGUAGE sql AS $$
    UPDATE batch b
    SET reserved_usd = b.reserved_usd + d.delta
    FROM (SELECT r.batch_id, sum(x.delta) AS delta
          FROM jsonb_to_recordset(deltas) AS x (run_id uuid, delta numeric)
          JOIN pipeline_run r ON r.id = x.run_id
          WHERE r.batch_id IS NOT NULL
          GROUP BY r.batch_id) d
    WHERE b.id = d.batch_id AND d.delta <> 0
$$;

CREATE FUNCTION provider_batch_reservations() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    deltas jsonb := '[]';
BEGIN
    -- Each event has only its own transition tables: a branch names those it has.
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        deltas := deltas || coalesce(
            (SELECT jsonb_agg(jsonb_build_object('run_id', run_id, 'delta', reserved_usd))
             FROM opened
             WHERE state IN ('waiting', 'packed', 'answered') AND reserved_usd <> 0),
            '[]');
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        deltas := deltas || coalesce(
            (SELECT jsonb_agg(jsonb_build_object('run_id', run_id, 'delta', -reserved_usd))
             FROM closed
             WHERE state IN ('waiting', 'packed', 'answered') AND reserved_usd <> 0),
            '[]');
    END IF;
    IF deltas <> '[]' THEN
        PERFORM add_batch_reservations(deltas);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER provider_batch_call_opened AFTER INSERT ON provider_batch_call
    REFERENCING NEW TABLE AS opened
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
CREATE TRIGGER provider_batch_call_moved AFTER UPDATE ON provider_batch_call
    REFERENCING OLD TABLE AS closed NEW TABLE AS opened
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
CREATE TRIGGER provider_batch_call_closed AFTER DELETE ON provider_batch_call
    REFERENCING OLD TABLE AS closed
    FOR EACH STATEMENT EXECUTE FUNCTION provider_batch_reservations();
