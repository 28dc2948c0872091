-- Named queries of docpipe.state.call_log: each block starts with "-- name: <name>" and a
-- line saying what it does. A transition is one guarded statement: a lost race matches
-- no row and returns nothing.

-- name: check_and_start_calls
-- Before a round of a step's calls (one or several sent together): each call's memoised
-- answer if any, whether the run still runs and the step is still leased to this worker,
-- the run's priority and the spending of the run, its batch and (when it has a budget) the
-- step against budgets; for each call that all allow (its estimated cost included), its
-- llm_call_log row (for the step's first candidate model) is written in the same statement,
-- still before any request is sent. One row per call, in the order given. A run of the
-- provider-batch lane also reads each call's last wait for a provider batch
-- (provider_batch_call): a call still waiting, or answered and not yet validated, gets no
-- new row (its wait's row is the call's). Such a run whose deadline is nearer than
-- %(deadline_margin_s)s sends its calls in real time (deadline_near): they are checked at
-- the real-time price.
WITH checked AS (
    SELECT (SELECT lease_owner FROM pipeline_step_result
            WHERE run_id = r.id AND step = %(step)s) AS lease_owner,
           r.id AS run_id, r.status, r.priority, r.cost_usd, r.budget_usd, r.reuse_answers,
           r.provider_batch, b.cost_usd AS batch_cost_usd, b.budget_usd AS batch_budget_usd,
           coalesce(r.provider_batch AND r.deadline_at
                    <= now() + make_interval(secs => %(deadline_margin_s)s::float8),
                    false) AS deadline_near,
           coalesce(b.reserved_usd, 0) AS batch_reserved_usd,
           -- What the run's calls waiting for provider batches hold (the lane's runs only).
           CASE WHEN r.provider_batch THEN
               (SELECT coalesce(sum(q.reserved_usd), 0) FROM provider_batch_call q
                WHERE q.run_id = r.id AND q.state IN ('waiting', 'packed', 'answered'))
           ELSE 0 END AS reserved_usd,
           -- A step's spending (and reservations) is summed only for a step that has a
           -- budget of its own.
           CASE WHEN %(step_budget_usd)s::numeric IS NOT NULL THEN
               (SELECT coalesce(sum(cost_usd), 0) FROM llm_call_log
                WHERE run_id = r.id AND step = %(step)s AND generation = %(generation)s
                  AND created_at >= r.created_at)
               + CASE WHEN r.provider_batch THEN
                     (SELECT coalesce(sum(q.reserved_usd), 0) FROM provider_batch_call q
                      WHERE q.run_id = r.id AND q.step = %(step)s
                        AND q.generation = %(generation)s
                        AND q.state IN ('waiting', 'packed', 'answered'))
                 ELSE 0 END
           END AS step_cost_usd
    FROM pipeline_run r
    LEFT JOIN batch b ON b.id = r.batch_id
    WHERE r.id = %(run_id)s
), wanted AS (
    -- The memo: the answer of the call's last 'ok' row, compressed (response_z) or, in a
    -- row written before compression, as it is (response).
    SELECT w.*, m.response AS memo, m.response_z AS memo_z,
           m.response IS NOT NULL OR m.response_z IS NOT NULL AS memoised,
           -- What the budgets are checked against: a lane run's call at the batch price
           -- (unless it goes in real time: deadline_near).
           CASE WHEN (SELECT provider_batch AND NOT deadline_near FROM checked)
                THEN w.batch_cost_usd
                ELSE w.estimated_cost_usd END AS lane_cost_usd
    FROM ROWS FROM (jsonb_to_recordset(%(calls)s::jsonb)
                    AS (call_key text, model text, provider text, route_reason text,
                        output_mode text, max_tokens integer, temperature numeric, seed bigint,
                        estimated_cost_usd numeric, batch_cost_usd numeric)) WITH ORDINALITY
         AS w (call_key, model, provider, route_reason, output_mode, max_tokens, temperature,
               seed, estimated_cost_usd, batch_cost_usd, n)
    LEFT JOIN LATERAL (
        -- A run's calls are written after it: the call log's partitions of the weeks before
        -- the run are not looked into (llm_call_log is partitioned by created_at).
        SELECT response, response_z
        FROM llm_call_log
        WHERE run_id = %(run_id)s AND step = %(step)s AND generation = %(generation)s
          AND call_key = w.call_key AND status = 'ok'
          AND created_at >= (SELECT created_at FROM pipeline_run WHERE id = %(run_id)s)
        ORDER BY id DESC
        LIMIT 1
    ) m ON true
), waits AS (
    -- The provider-batch lane only (an InitPlan: other runs never read the table).
    SELECT w.call_key, p.state AS batch_state, p.call_id AS batch_call_id,
           p.model AS batch_model, p.answer_z AS batch_answer_z, p.error_kind AS batch_error_kind,
           p.error AS batch_error, p.attempts AS batch_attempts
    FROM wanted w
    CROSS JOIN LATERAL (
        SELECT q.state, q.call_id, q.model, q.answer_z, q.error_kind, q.error,
               count(*) OVER () AS attempts
        FROM provider_batch_call q
        WHERE q.run_id = %(run_id)s AND q.step = %(step)s AND q.generation = %(generation)s
          AND q.call_key = w.call_key
        ORDER BY q.call_id DESC
        LIMIT 1
    ) p
    WHERE (SELECT provider_batch FROM checked) AND NOT w.memoised
), started AS (
    INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id,
                              model, prompt_version, provider, route_reason, output_mode,
                              max_tokens, temperature, seed)
    SELECT k.run_id, %(step)s, %(generation)s, w.call_key, %(step_attempt)s, %(tenant_id)s,
           w.model, %(prompt_version)s, w.provider, w.route_reason, w.output_mode,
           w.max_tokens, w.temperature, w.seed
    FROM wanted w CROSS JOIN checked k
    WHERE NOT w.memoised AND k.status IN ('queued', 'running')
      AND NOT EXISTS (SELECT 1 FROM waits a WHERE a.call_key = w.call_key
                      AND a.batch_state IN ('waiting', 'packed', 'answered'))
      AND (%(owner)s::text IS NULL OR k.lease_owner = %(owner)s)
      -- A call of the lane is checked at the batch price, beside what is reserved.
      AND (k.budget_usd IS NULL
           OR k.cost_usd + k.reserved_usd + w.lane_cost_usd <= k.budget_usd)
      AND (k.batch_budget_usd IS NULL
           OR k.batch_cost_usd + k.batch_reserved_usd + w.lane_cost_usd <= k.batch_budget_usd)
      AND (k.step_cost_usd IS NULL
           OR k.step_cost_usd + w.lane_cost_usd <= %(step_budget_usd)s)
    ORDER BY w.n
    RETURNING id, call_key
)
SELECT w.memo, w.memo_z, k.lease_owner, k.status, k.priority, k.cost_usd, k.budget_usd,
       k.batch_cost_usd, k.batch_budget_usd, k.step_cost_usd, s.id AS call_id, k.reuse_answers,
       k.reserved_usd, k.batch_reserved_usd,
       k.provider_batch, k.deadline_near, a.batch_state, a.batch_call_id, a.batch_model,
       a.batch_answer_z, a.batch_error_kind, a.batch_error,
       coalesce(a.batch_attempts, 0) AS batch_attempts
FROM wanted w
CROSS JOIN checked k
LEFT JOIN started s ON s.call_key = w.call_key
LEFT JOIN waits a ON a.call_key = w.call_key
ORDER BY w.n;

-- name: start_call
-- Log a provider call before it is sent.
INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id, model,
                          prompt_version, provider, route_reason, output_mode, max_tokens,
                          temperature, seed)
VALUES (%(run_id)s, %(step)s, %(generation)s, %(call_key)s, %(step_attempt)s, %(tenant_id)s,
        %(model)s, %(prompt_version)s, %(provider)s, %(route_reason)s, %(output_mode)s,
        %(max_tokens)s, %(temperature)s, %(seed)s)
RETURNING id;

-- name: route_call
-- Before it is sent, move a call's row to the model the router chose (and its request).
UPDATE llm_call_log
SET model = %(model)s, provider = %(provider)s, route_reason = %(route_reason)s,
    output_mode = %(output_mode)s, max_tokens = %(max_tokens)s, temperature = %(temperature)s,
    seed = %(seed)s
WHERE id = %(id)s AND status = 'sent' AND run_id = %(run_id)s
  AND created_at >= (SELECT created_at FROM pipeline_run WHERE id = %(run_id)s);

-- name: finish_calls
-- Complete calls' log rows (each once; those whose answers arrived together in one
-- statement) and add their cost to their runs and to the runs' batches. An answer comes
-- compressed (zlib, in base64: docpipe.state.call_log) and is stored so (response_z).
WITH finished AS (
    SELECT *
    FROM jsonb_to_recordset(%(finished)s::jsonb)
         AS f (id bigint, status text, http_status integer, error_kind text, error text,
               input_tokens integer, output_tokens integer, cost_usd numeric, latency_ms integer,
               response_z text, route_reason text, finish_reason text,
               usage_estimated boolean)
), call AS (
    UPDATE llm_call_log c
    SET status = f.status, http_status = f.http_status, error_kind = f.error_kind,
        error = f.error, input_tokens = f.input_tokens, output_tokens = f.output_tokens,
        cost_usd = f.cost_usd, latency_ms = f.latency_ms,
        response_z = decode(f.response_z, 'base64'),
        route_reason = coalesce(f.route_reason, c.route_reason),
        finish_reason = f.finish_reason, usage_estimated = f.usage_estimated,
        finished_at = now()
    FROM finished f
    -- A step's calls, written after its run: the partitions of the weeks before the run are
    -- not looked into (llm_call_log is partitioned by created_at, not by id).
    WHERE c.id = f.id AND c.status = 'sent' AND c.run_id = %(run_id)s
      AND c.created_at >= (SELECT created_at FROM pipeline_run WHERE id = %(run_id)s)
    RETURNING c.run_id, c.cost_usd
), run AS (
    UPDATE pipeline_run r
    SET cost_usd = r.cost_usd + spent.cost_usd, updated_at = now()
    FROM (SELECT run_id, sum(cost_usd) AS cost_usd FROM call GROUP BY run_id) spent
    WHERE r.id = spent.run_id
    RETURNING r.batch_id, spent.cost_usd
)
UPDATE batch b
SET cost_usd = b.cost_usd + spent.cost_usd
FROM (SELECT batch_id, sum(cost_usd) AS cost_usd FROM run GROUP BY batch_id) spent
WHERE b.id = spent.batch_id AND spent.cost_usd > 0;

-- name: reuse_answer
-- Complete a call, before it is sent, with the answer the tenant's reuse cache holds for
-- the same request (answered_request): it costs nothing, and reused_answer records the call
-- it came from. Nothing when the cache has none (or its call's week is gone).
WITH prior AS (
    SELECT p.id, p.response, p.response_z, p.finish_reason
    FROM answered_request a
    JOIN llm_call_log p ON p.id = a.call_id
    WHERE a.tenant_id = %(tenant_id)s AND a.request_sha256 = %(request_sha256)s
      AND p.status = 'ok' AND p.id <> %(id)s
), reused AS (
    UPDATE llm_call_log c
    SET status = 'ok', response = prior.response, response_z = prior.response_z, cost_usd = 0,
        latency_ms = 0, finish_reason = prior.finish_reason, finished_at = now()
    FROM prior
    WHERE c.id = %(id)s AND c.status = 'sent'
    RETURNING c.id, c.run_id, c.tenant_id, prior.id AS reused_from, prior.response,
              prior.response_z
), recorded AS (
    INSERT INTO reused_answer (call_id, reused_from, tenant_id, run_id)
    SELECT id, reused_from, tenant_id, run_id FROM reused
)
SELECT response, response_z, reused_from FROM reused;

-- name: remember_answer
-- Put a call a run that reuses answers had answered into the tenant's reuse cache (the
-- first answer to a request stays the one every later reuse names).
INSERT INTO answered_request (tenant_id, request_sha256, call_id)
VALUES (%(tenant_id)s, %(request_sha256)s, %(call_id)s)
ON CONFLICT (tenant_id, request_sha256) DO NOTHING;
