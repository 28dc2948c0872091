-- What a step's deliveries cost, refunded attempts or not (issue 33): a step that hands
-- itself back with its attempt refunded (extract_text continuing a long document) is
-- capped by these, so no document loops for free.
ALTER TABLE pipeline_step_result
    ADD COLUMN deliveries integer NOT NULL DEFAULT 0,
    ADD COLUMN worked_s double precision NOT NULL DEFAULT 0;
