-- Named queries of docpipe.state.admission: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: admit_batch_runs
-- Admit waiting batch runs up to the window of runs in flight, fairly: the next slot goes
-- to the tenant (then the batch) served least so far (least attained service), so a
-- client's 10 documents are not queued behind another's 500. Each admitted run's first
-- step goes into the outbox in the same statement, and comes back whole to be published.
-- Every part reads only what waits or was admitted lately, through an index that leads with
-- it, never a table's history: the runs in flight (pipeline_run_admitted_in_flight_idx), each
-- running batch's first waiting runs (pipeline_run_admission_order_idx), the admissions
-- within the fairness memory (pipeline_run_batch_admitted_idx) and each batch's count of
-- runs admitted so far (batch.runs_admitted, kept here); a provider-batch run in flight is
-- checked for calls waiting for a provider batch (provider_batch_call_key_idx).
WITH free AS (
    -- A run of the provider-batch lane whose calls wait for a provider batch is parked in
    -- PostgreSQL: it holds no worker and no message, so it takes no slot of the window
    -- (else a window of 8 would put at most 8 runs' calls into each provider batch).
    SELECT greatest(0, %(window)s - count(*)) AS slots FROM pipeline_run r
    WHERE r.lane = 'batch' AND r.admitted_at IS NOT NULL AND r.status IN ('queued', 'running')
      AND NOT (r.provider_batch AND EXISTS (
          SELECT 1 FROM provider_batch_call q
          WHERE q.run_id = r.id AND q.state IN ('waiting', 'packed')))
), waiting AS (
    -- A batch's runs go in creation order, so only its first `slots` waiting runs can be
    -- admitted now: only they are ranked, not the whole backlog. A batch's waiting runs
    -- belong to a running batch (stopping a batch ends its runs).
    SELECT w.id, w.tenant_id, b.id AS batch_id, w.created_at, b.runs_admitted + w.batch_rank
           AS batch_turn
    FROM batch b CROSS JOIN free
    CROSS JOIN LATERAL (
        SELECT r.id, r.tenant_id, r.created_at,
               row_number() OVER (ORDER BY r.created_at, r.id) AS batch_rank
        FROM pipeline_run r
        WHERE r.batch_id = b.id AND r.lane = 'batch' AND r.status = 'queued'
          AND r.admitted_at IS NULL
        ORDER BY r.created_at, r.id
        LIMIT free.slots
    ) w
    WHERE b.status = 'running'
    UNION ALL
    -- Batch-lane runs started one at a time (no batch): a tenant's are one more queue.
    SELECT id, tenant_id, NULL, created_at,
           row_number() OVER (PARTITION BY tenant_id ORDER BY created_at, id)
    FROM pipeline_run
    WHERE batch_id IS NULL AND lane = 'batch' AND status = 'queued' AND admitted_at IS NULL
), served_tenant AS (
    SELECT tenant_id, count(*) AS n FROM pipeline_run
    WHERE lane = 'batch' AND admitted_at IS NOT NULL
      AND admitted_at > now() - make_interval(secs => %(memory_s)s)
    GROUP BY tenant_id
), ordered AS (
    SELECT w.id, w.batch_turn, w.created_at,
           coalesce(st.n, 0)
             + row_number() OVER (PARTITION BY w.tenant_id ORDER BY w.batch_turn, w.created_at)
             AS tenant_turn
    FROM waiting w LEFT JOIN served_tenant st USING (tenant_id)
), admitted AS (
    UPDATE pipeline_run r SET admitted_at = now(), updated_at = now()
    WHERE r.id IN (SELECT id FROM ordered
                   ORDER BY tenant_turn, batch_turn, created_at
                   LIMIT (SELECT slots FROM free))
      AND r.admitted_at IS NULL AND r.status = 'queued'
    RETURNING r.id, r.batch_id, r.current_step, r.traceparent
), served AS (
    UPDATE batch b SET runs_admitted = b.runs_admitted + n.runs
    FROM (SELECT batch_id, count(*) AS runs FROM admitted GROUP BY batch_id) n
    WHERE b.id = n.batch_id
), first_steps AS (
    UPDATE pipeline_step_result s SET enqueued_at = now()
    FROM admitted a
    WHERE s.run_id = a.id AND s.step = a.current_step
)
INSERT INTO outbox (topic, run_id, step, queue, traceparent)
SELECT 'step', id, current_step, %(queues)s::jsonb ->> 'batch', traceparent FROM admitted
RETURNING id, topic, run_id::text, step, queue, traceparent;
