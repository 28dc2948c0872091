"""The set-based SQL that fills a busy database (bench.busy): plan tables, then runs with
their documents, steps, calls, outbox rows, webhooks and decisions, chunk by chunk.

Everything random is a hash of the run's number and the seed (``pg_temp.u``), so a fill is
the same every time and needs no round trip per row. Helpers live in ``pg_temp``: nothing
of the fill's machinery stays in the schema.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

__all__ = [
    "call_log_partitions",
    "fill_runs",
    "finish",
    "insert_batches",
    "largest_ended_batch",
    "prepare",
    "row_counts",
]

Conn = psycopg.Connection[Any]

# Inlinable helpers: the seed and review parameters are written into their bodies.
_HELPERS = """
CREATE FUNCTION pg_temp.u(g bigint, salt integer) RETURNS float8 LANGUAGE sql IMMUTABLE AS
$$ SELECT ((hashint8extended(g, salt + {salt}) & 2147483647)::float8 / 2147483648) $$;
CREATE FUNCTION pg_temp.hex(kind text, g bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT md5(kind || ':{seed}:' || g) $$;
CREATE FUNCTION pg_temp.uid(kind text, g bigint) RETURNS uuid LANGUAGE sql IMMUTABLE AS
$$ SELECT md5(kind || ':{seed}:' || g)::uuid $$;
-- An ended run's status: most are done; reviews are paused only recently (a constant backlog).
CREATE FUNCTION pg_temp.status_of(g bigint, created timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN created > now() - interval '{review_days} days'
             AND pg_temp.u(g, 2) < {review_p} THEN 'needs_review'
        WHEN pg_temp.u(g, 1) < 0.020 THEN 'failed'
        WHEN pg_temp.u(g, 1) < 0.027 THEN 'cancelled'
        WHEN pg_temp.u(g, 1) < 0.030 THEN 'expired'
        WHEN pg_temp.u(g, 1) < 0.032 THEN 'budget_exceeded'
        ELSE 'done' END
$$;
CREATE TEMP TABLE fill_step (i integer, step text);
INSERT INTO fill_step VALUES (0, 'extract_text'), (1, 'extract_sections'),
                             (2, 'extract_fields'), (3, 'summarize');
CREATE TEMP TABLE fill_new (
    g bigint, id uuid, tenant text, lane text, batch_id uuid, position integer,
    status text, steps_done integer, created timestamptz, finished timestamptz,
    admitted timestamptz, callback boolean, variant integer, nfields integer, priority text
);
"""

_PARAMS = """
CREATE TEMP TABLE fill_param AS SELECT
    %(seed)s::integer AS seed, %(span_s)s::float8 AS span_s, %(review_p)s::float8 AS review_p,
    %(review_days)s::integer AS review_days, %(answered_p)s::float8 AS answered_p,
    %(callback_p)s::float8 AS callback_p, %(call_log_days)s::integer AS call_log_days,
    %(outbox_days)s::integer AS outbox_days, %(document_bytes)s::integer AS document_bytes,
    %(pipeline)s::text AS pipeline, %(pipeline_hash)s::text AS pipeline_hash,
    %(interactive_in_flight)s::integer AS interactive_in_flight
"""


def prepare(
    conn: Conn,
    *,
    seed: int,
    tenant_slots: Sequence[str],
    batches: Sequence[tuple[Any, ...]],
    templates: Sequence[dict[str, str]],
    variants: int,
    params: dict[str, Any],
) -> None:
    """The plan: parameters, helpers, tenants by slot, batches, row templates."""
    conn.execute(_PARAMS.encode(), params)
    conn.execute(
        _HELPERS.format(
            seed=int(seed),
            salt=1000 * int(seed),
            review_days=int(params["review_days"]),
            review_p=float(params["review_p"]),
        ).encode()
    )
    conn.execute(b"CREATE TEMP TABLE fill_tenant (slot integer PRIMARY KEY, tenant text)")
    with conn.cursor().copy("COPY fill_tenant FROM STDIN") as copy:
        for slot, tenant in enumerate(tenant_slots):
            copy.write_row((slot, tenant))
    conn.execute(
        b"CREATE TEMP TABLE fill_batch (n integer, id uuid, tenant text, size integer,"
        b" first bigint, created_s_ago float8, duration_s float8, status text, callback boolean,"
        b" active_done integer, active_admitted integer)"
    )
    with conn.cursor().copy("COPY fill_batch FROM STDIN") as copy:
        for row in batches:
            copy.write_row(row)
    conn.execute(
        b"CREATE TEMP TABLE fill_template (variant integer, step text, output jsonb,"
        b" answer jsonb, answer_z bytea, PRIMARY KEY (variant, step))"
    )
    conn.execute(b"CREATE TEMP TABLE fill_document (variant integer PRIMARY KEY, content text)")
    with conn.cursor().copy("COPY fill_template FROM STDIN") as copy:
        for variant, t in enumerate(templates[:variants]):
            for step in ("extract_text", "extract_sections", "extract_fields", "summarize"):
                answer = t.get(f"answer:{step}")
                # As docpipe.state.call_log stores an answer (zlib-compressed JSON).
                answer_z = zlib.compress(orjson.dumps(json.loads(answer))) if answer else None
                copy.write_row((variant, step, t[step], answer, answer_z))
    with conn.cursor().copy("COPY fill_document FROM STDIN") as copy:
        for variant, t in enumerate(templates[:variants]):
            copy.write_row((variant, t["document"]))
    conn.execute(b"ANALYZE fill_tenant, fill_batch, fill_template, fill_document, fill_step")


def insert_batches(conn: Conn) -> None:
    conn.execute(
        b"""
INSERT INTO batch (id, tenant_id, pipeline, status, runs_total, callback_url, idempotency_key,
                   request_hash, created_at, finished_at, cost_usd, notified_at)
SELECT b.id, b.tenant, p.pipeline, b.status, b.size,
       CASE WHEN b.callback THEN 'https://hooks.example.com/' || b.tenant || '/batches' END,
       'bench-batch-' || b.n, pg_temp.hex('batch-request', b.n) || pg_temp.hex('r', b.n),
       now() - make_interval(secs => b.created_s_ago),
       CASE WHEN b.status <> 'running'
            THEN now() - make_interval(secs => b.created_s_ago - b.duration_s) END,
       b.size * 0.0021,
       CASE WHEN b.callback AND b.status <> 'running'
            THEN now() - make_interval(secs => b.created_s_ago - b.duration_s - 1) END
FROM fill_batch b, fill_param p
"""
    )


# One SELECT per kind of run into fill_new; the rest is the same for every kind.
_NEW_RUNS = {
    "batch": """
INSERT INTO fill_new
SELECT g, pg_temp.uid('run', g), b.tenant, 'batch', b.id, (g - b.first)::integer, st.status,
       CASE st.status WHEN 'done' THEN 4 WHEN 'needs_review' THEN 2 ELSE 1 + (g %% 3)::integer END,
       t.created, t.created + make_interval(secs => 30 + 60 * pg_temp.u(g, 4)),
       t.created, false, (g %% %(variants)s)::integer, 6 + (g %% 13)::integer, 'low'
FROM fill_batch b
CROSS JOIN LATERAL generate_series(b.first, b.first + b.size - 1) g
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => b.created_s_ago)
                           + make_interval(secs => b.duration_s * (g - b.first) / b.size)
                           AS created) t
CROSS JOIN LATERAL (SELECT CASE WHEN b.status = 'cancelled' AND pg_temp.u(g, 9) < 0.5
                                THEN 'cancelled' ELSE pg_temp.status_of(g, t.created) END
                           AS status) st
WHERE b.status <> 'running' AND g >= %(lo)s AND g < %(hi)s
""",
    "interactive": """
INSERT INTO fill_new
SELECT g, pg_temp.uid('run', g), tn.tenant, 'interactive', NULL, NULL, st.status,
       CASE st.status WHEN 'done' THEN 4 WHEN 'needs_review' THEN 2 ELSE 1 + (g %% 3)::integer END,
       t.created, t.created + make_interval(secs => 20 + 40 * pg_temp.u(g, 4)), t.created,
       pg_temp.u(g, 7) < p.callback_p, (g %% %(variants)s)::integer, 6 + (g %% 13)::integer,
       CASE WHEN pg_temp.u(g, 8) < 0.1 THEN 'urgent' ELSE 'normal' END
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) g
CROSS JOIN fill_param p
JOIN fill_tenant tn ON tn.slot = (pg_temp.u(g, 5) * 1000)::integer %% 1000
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => 3600 + (p.span_s - 3600) * pg_temp.u(g, 6))
                           AS created) t
CROSS JOIN LATERAL (SELECT pg_temp.status_of(g, t.created) AS status) st
""",
    # The running batches (done, then admitted and running, then waiting) and the
    # interactive runs in flight.
    "active": """
INSERT INTO fill_new
SELECT g, pg_temp.uid('run', g), b.tenant, 'batch', b.id, pos, s.status,
       CASE s.status WHEN 'done' THEN 4 WHEN 'queued' THEN 1 ELSE 1 + (g %% 3)::integer END,
       now() - make_interval(secs => b.created_s_ago) + make_interval(secs => pos * 0.001),
       CASE WHEN s.status = 'done' THEN now() - make_interval(secs => b.created_s_ago)
                                        + make_interval(secs => 60 + pos * 0.5) END,
       CASE WHEN s.status <> 'queued' THEN now() - make_interval(secs => b.created_s_ago)
                                           + make_interval(secs => pos * 0.5) END,
       false, (g %% %(variants)s)::integer, 6 + (g %% 13)::integer, 'low'
FROM fill_batch b
CROSS JOIN LATERAL generate_series(b.first, b.first + b.size - 1) g
CROSS JOIN LATERAL (SELECT (g - b.first)::integer AS pos) o
CROSS JOIN LATERAL (SELECT CASE WHEN pos < b.active_done THEN 'done'
                                WHEN pos < b.active_done + b.active_admitted THEN 'running'
                                ELSE 'queued' END AS status) s
WHERE b.status = 'running'
UNION ALL
SELECT g, pg_temp.uid('run', g), tn.tenant, 'interactive', NULL, NULL,
       CASE WHEN g %% 4 = 0 THEN 'queued' ELSE 'running' END,
       CASE WHEN g %% 4 = 0 THEN 1 ELSE 1 + (g %% 3)::integer END,
       now() - make_interval(secs => 600 * pg_temp.u(g, 6)), NULL,
       now() - make_interval(secs => 600 * pg_temp.u(g, 6)),
       pg_temp.u(g, 7) < p.callback_p, (g %% %(variants)s)::integer, 6 + (g %% 13)::integer,
       'normal'
FROM fill_param p
CROSS JOIN generate_series(%(hi)s::bigint - p.interactive_in_flight, %(hi)s::bigint - 1) g
JOIN fill_tenant tn ON tn.slot = (pg_temp.u(g, 5) * 1000)::integer %% 1000
""",
}

_INSERT_ROWS = [
    # Documents: one per run, text, known at creation.
    """
INSERT INTO document (tenant_id, id, content, content_sha256, size_bytes, created_at)
SELECT n.tenant, 'doc-' || n.g, c.content, pg_temp.hex('doc', n.g) || pg_temp.hex('d', n.g),
       length(c.content), n.created
FROM fill_new n
JOIN fill_param p ON true
CROSS JOIN LATERAL (SELECT left(repeat(d.content || ' ' || n.g || E'\\n',
                                        1 + p.document_bytes / length(d.content)),
                                 p.document_bytes) AS content
                    FROM fill_document d WHERE d.variant = n.variant) c
""",
    """
INSERT INTO pipeline_run (id, tenant_id, pipeline, document_id, lane, batch_id, status,
                          current_step, steps_total, steps_done, cost_usd, admitted_at,
                          callback_url, idempotency_key, request_hash, traceparent, error,
                          created_at, updated_at, finished_at, notified_at, pipeline_hash,
                          priority, review_step, review_reason, review_reasons,
                          review_revision, review_since)
SELECT n.id, n.tenant, p.pipeline, 'doc-' || n.g, n.lane, n.batch_id, n.status,
       CASE WHEN n.status <> 'done' THEN s.step END, 4, n.steps_done,
       0.00012 * (2 + n.nfields) * least(n.steps_done, 3), n.admitted,
       CASE WHEN n.callback THEN 'https://hooks.example.com/' || n.tenant || '/runs' END,
       CASE WHEN n.batch_id IS NOT NULL
            THEN 'batch:' || n.batch_id || ':' || (n.position + 1) ELSE 'key-' || n.g END,
       CASE WHEN n.batch_id IS NOT NULL THEN 'doc-' || n.g
            ELSE pg_temp.hex('request', n.g) || pg_temp.hex('q', n.g) END,
       '00-' || pg_temp.hex('trace', n.g) || '-' || left(pg_temp.hex('span', n.g), 16) || '-01',
       CASE n.status WHEN 'failed' THEN 'permanent provider error: 400 invalid request'
                     WHEN 'cancelled' THEN 'cancelled on request'
                     WHEN 'expired' THEN 'deadline passed before the run finished'
                     WHEN 'budget_exceeded' THEN 'the run''s budget would be exceeded'
                     WHEN 'needs_review' THEN 'extract_fields: output failed its schema' END,
       n.created, coalesce(n.finished, n.created), n.finished,
       CASE WHEN n.callback AND n.finished IS NOT NULL THEN n.finished + interval '1 second' END,
       p.pipeline_hash, n.priority,
       CASE WHEN n.status = 'needs_review' THEN 'extract_fields' END,
       CASE WHEN n.status = 'needs_review' THEN 'invalid_output' END,
       CASE WHEN n.status = 'needs_review' THEN jsonb_build_array(jsonb_build_object(
           'kind', 'invalid_output', 'field', 'total_value',
           'message', 'total_value: 12 is not of type object')) END,
       CASE WHEN n.status = 'needs_review' THEN 1 ELSE 0 END,
       CASE WHEN n.status = 'needs_review' THEN n.finished END
FROM fill_new n
CROSS JOIN fill_param p
LEFT JOIN fill_step s ON s.i = least(n.steps_done, 3)
""",
    """
INSERT INTO pipeline_step_result (run_id, step, step_index, status, attempt, output,
                                  input_tokens, output_tokens, cost_usd, model, prompt_version,
                                  error, started_at, finished_at, input_hash, lease_owner,
                                  lease_expires_at, enqueued_at)
SELECT n.id, s.step, s.i, st.status,
       CASE WHEN s.i > 0 AND s.i <= n.steps_done THEN 1 ELSE 0 END,
       CASE WHEN st.status = 'done' THEN t.output
            WHEN st.status = 'failed' AND n.status = 'needs_review' THEN t.output END,
       CASE WHEN st.status = 'done' AND s.i > 0 THEN 2800 * calls.n END,
       CASE WHEN st.status = 'done' AND s.i > 0 THEN 220 * calls.n END,
       CASE WHEN st.status = 'done' THEN 0.00012 * calls.n END,
       CASE WHEN st.status = 'done' AND s.i > 0 THEN 'gpt-4o-mini' END,
       CASE WHEN st.status <> 'pending' THEN s.step || '@v1' END,
       CASE WHEN st.status = 'failed' THEN n.status || ' at ' || s.step END,
       CASE WHEN st.status <> 'pending' THEN n.created + make_interval(secs => 5 * s.i) END,
       CASE WHEN st.status IN ('done', 'failed')
            THEN n.created + make_interval(secs => 5 * s.i + 4) END,
       CASE WHEN st.status IN ('done', 'failed')
            THEN pg_temp.hex('input-' || s.i, n.g) || pg_temp.hex('h' || s.i, n.g) END,
       CASE WHEN st.status = 'running' THEN 'celery@worker-batch-0:' || (n.g % 16) END,
       -- Live through a benchmark's timing, as a worker renews it: an expired lease is a
       -- crash, which the recovery queries then join to its run (a minute-long lease had
       -- expired by the time a large fill was timed, and the reaper's work looked larger).
       CASE WHEN st.status = 'running' THEN now() + interval '1 hour' END,
       CASE WHEN st.status <> 'pending' OR (s.i = n.steps_done AND n.admitted IS NOT NULL)
            THEN n.created + make_interval(secs => 5 * s.i) END
FROM fill_new n
CROSS JOIN fill_step s
JOIN fill_template t ON t.variant = n.variant AND t.step = s.step
CROSS JOIN LATERAL (SELECT CASE s.i WHEN 0 THEN 0 WHEN 2 THEN n.nfields ELSE 1 END AS n) calls
CROSS JOIN LATERAL (SELECT CASE
    WHEN s.i < n.steps_done THEN 'done'
    WHEN s.i = n.steps_done THEN CASE n.status WHEN 'running' THEN 'running'
                                               WHEN 'queued' THEN 'pending'
                                               WHEN 'cancelled' THEN 'cancelled'
                                               WHEN 'expired' THEN 'cancelled'
                                               ELSE 'failed' END
    WHEN n.status IN ('cancelled', 'expired') THEN 'cancelled'
    ELSE 'pending' END AS status) st
""",
    # A call per provider request of the steps each run reached (the fields step: one per
    # section), the last of a failing step failed; a few rate-limited attempts besides.
    """
INSERT INTO llm_call_log (run_id, step, generation, call_key, step_attempt, tenant_id, model,
                          prompt_version, status, http_status, error_kind, error, input_tokens,
                          output_tokens, cost_usd, latency_ms, __RESPONSE__, created_at,
                          finished_at, provider, route_reason, output_mode, max_tokens,
                          temperature, finish_reason)
SELECT n.id, s.step, 0,
       CASE WHEN s.i = 2 THEN 'section:' || k ELSE 'document' END, 1, n.tenant, 'gpt-4o-mini',
       s.step || '@v1', c.status,
       CASE c.status WHEN 'ok' THEN 200 WHEN 'invalid_output' THEN 200 WHEN 'error' THEN 400 END,
       CASE WHEN c.status = 'error' THEN 'permanent' END,
       CASE WHEN c.status = 'error' THEN 'HTTP 400: invalid request' END,
       CASE WHEN c.status <> 'sent' THEN 2800 END, CASE WHEN c.status <> 'sent' THEN 220 END,
       CASE WHEN c.status <> 'sent' THEN 0.00012 ELSE 0 END,
       CASE WHEN c.status <> 'sent' THEN 900 + (n.g % 700)::integer END,
       CASE WHEN c.status IN ('ok', 'invalid_output') THEN t.__ANSWER__ END,
       n.created + make_interval(secs => 5 * s.i + 0.01 * k),
       CASE WHEN c.status <> 'sent' THEN n.created + make_interval(secs => 5 * s.i + 1 + 0.01 * k) END,
       'default', 'cheapest', 'json_schema', 1024, 0,
       CASE WHEN c.status <> 'sent' THEN 'stop' END
FROM fill_new n
CROSS JOIN fill_param p
CROSS JOIN fill_step s
JOIN fill_template t ON t.variant = n.variant AND t.step = s.step
CROSS JOIN LATERAL generate_series(1, CASE WHEN s.i = 2 THEN n.nfields ELSE 1 END) k
CROSS JOIN LATERAL (SELECT CASE
    WHEN s.i < n.steps_done THEN 'ok'
    WHEN k < CASE WHEN s.i = 2 THEN n.nfields ELSE 1 END THEN 'ok'
    WHEN n.status = 'running' THEN 'sent'
    WHEN n.status = 'needs_review' THEN 'invalid_output'
    ELSE 'error' END AS status) c
WHERE s.i >= 1
  AND (s.i < n.steps_done
       OR (s.i = n.steps_done AND n.status IN ('running', 'failed', 'needs_review',
                                                'budget_exceeded')))
  AND (p.call_log_days IS NULL OR n.created > now() - make_interval(days => p.call_log_days))
UNION ALL
SELECT n.id, 'extract_sections', 0, 'document', 1, n.tenant, 'gpt-4o-mini',
       'extract_sections@v1', 'error', 429, 'rate_limited', 'HTTP 429: rate limited', NULL,
       NULL, 0, 40, NULL, n.created + interval '4 seconds', n.created + interval '4 seconds',
       'default', 'cheapest', 'json_schema', 1024, 0, NULL
FROM fill_new n CROSS JOIN fill_param p
WHERE n.steps_done >= 2 AND pg_temp.u(n.g, 10) < 0.03
  AND (p.call_log_days IS NULL OR n.created > now() - make_interval(days => p.call_log_days))
""",
    # The step messages of the last outbox_days, published (the claim marked them).
    """
INSERT INTO outbox (topic, run_id, step, queue, traceparent, available_at, created_at,
                    published_at)
SELECT 'step', n.id, s.step, 'llm_' || n.lane,
       '00-' || pg_temp.hex('trace', n.g) || '-' || left(pg_temp.hex('span', n.g), 16) || '-01',
       n.created + make_interval(secs => 5 * s.i), n.created + make_interval(secs => 5 * s.i),
       n.created + make_interval(secs => 5 * s.i + 0.01)
FROM fill_new n CROSS JOIN fill_param p CROSS JOIN fill_step s
WHERE s.i >= 1 AND s.i <= least(n.steps_done, 3) AND n.admitted IS NOT NULL
  AND n.created > now() - make_interval(days => p.outbox_days)
""",
    # Webhooks of runs whose caller asked for one: delivered.
    """
INSERT INTO webhook_delivery (run_id, tenant_id, url, payload, status, attempts, last_status,
                              created_at, last_attempt_at, delivered_at, message_id,
                              next_attempt_at, enqueued_at)
SELECT n.id, n.tenant, 'https://hooks.example.com/' || n.tenant || '/runs',
       jsonb_build_object('event', 'run.ended', 'run_id', n.id, 'document_id', 'doc-' || n.g,
                          'batch_id', NULL, 'status', n.status, 'steps_done', n.steps_done,
                          'steps_total', 4, 'cost_usd', 0.0017, 'error', NULL,
                          'finished_at', n.finished, 'review', NULL),
       'delivered', 1, 200, n.finished, n.finished + interval '2 seconds',
       n.finished + interval '2 seconds', 'msg_' || pg_temp.hex('message', n.g),
       n.finished, n.finished + interval '1 second'
FROM fill_new n
WHERE n.callback AND n.finished IS NOT NULL
""",
    # Reviews answered: the run paused at its fields step, a person approved an edit.
    """
INSERT INTO review_decision (run_id, tenant_id, step, revision, action, reviewer_key_id,
                             reviewer_name, reason, output_before, output_after, edits, diff,
                             pipeline_hash, input_hash, decided_at)
SELECT n.id, n.tenant, 'extract_fields', 1, 'approve', NULL, 'reviewer ' || (n.g % 7),
       'checked against the contract', t.output, t.output,
       '[{"op": "replace", "path": "/fields/term_months", "value": 24}]',
       '[{"path": "/fields/term_months", "before": 18, "after": 24}]',
       p.pipeline_hash, pg_temp.hex('input-2', n.g) || pg_temp.hex('h2', n.g),
       n.created + interval '2 hours'
FROM fill_new n
CROSS JOIN fill_param p
JOIN fill_template t ON t.variant = n.variant AND t.step = 'extract_fields'
WHERE n.status = 'done' AND pg_temp.u(n.g, 3) < p.answered_p
""",
]


def fill_runs(conn: Conn, kind: str, lo: int, hi: int) -> None:
    """Runs number ``lo`` to ``hi`` of one kind, with everything that hangs off them."""
    if hi <= lo:
        return
    # Answers compressed where the schema stores them so (migration 0073), else as JSONB.
    compressed = _has_column(conn, "llm_call_log", "response_z")
    with conn.transaction():
        conn.execute(b"TRUNCATE fill_new")
        conn.execute(_NEW_RUNS[kind].encode(), {"lo": lo, "hi": hi, "variants": _variants(conn)})
        conn.execute(b"ANALYZE fill_new")
        for statement in _INSERT_ROWS:
            statement = statement.replace(
                "__RESPONSE__", "response_z" if compressed else "response"
            )
            statement = statement.replace("__ANSWER__", "answer_z" if compressed else "answer")
            conn.execute(statement.encode())


def _has_column(conn: Conn, table: str, column: str) -> bool:
    return (
        conn.execute(
            b"SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
            (table, column),
        ).fetchone()
        is not None
    )


def call_log_partitions(conn: Conn, since_s_ago: float) -> None:
    """Weekly partitions of the call log for the weeks of the history, as beat would have
    made them week after week (when the schema partitions it)."""
    if conn.execute(b"SELECT to_regproc('llm_call_log_add_partition')").fetchone() == (None,):
        return
    conn.execute(
        b"""
SELECT llm_call_log_add_partition(
           'llm_call_log_p' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD'),
           format('FOR VALUES FROM (%%L) TO (%%L)', w, w + interval '1 week'))
FROM generate_series(date_trunc('week', now() - make_interval(secs => %s), 'UTC'),
                     date_trunc('week', now(), 'UTC'), interval '1 week') w
WHERE NOT EXISTS (SELECT 1 FROM llm_call_log_partitions() p
                  WHERE p.from_at < w + interval '1 week' AND p.to_at > w)
""",
        (since_s_ago,),
    )


def _variants(conn: Conn) -> int:
    row = conn.execute(b"SELECT count(DISTINCT variant) FROM fill_template").fetchone()
    assert row is not None
    return int(row[0])


def finish(conn: Conn) -> None:
    """Batch webhooks and outbox rows, then statistics as autovacuum would keep them (and a
    visibility map, so index-only scans are what they would be)."""
    conn.execute(
        b"""
INSERT INTO webhook_delivery (batch_id, tenant_id, url, payload, status, attempts, last_status,
                              created_at, last_attempt_at, delivered_at, message_id,
                              next_attempt_at, enqueued_at)
SELECT b.id, b.tenant_id, b.callback_url,
       jsonb_build_object('event', 'batch.ended', 'batch_id', b.id, 'status', b.status,
                          'runs_total', b.runs_total, 'cost_usd', b.cost_usd,
                          'finished_at', b.finished_at),
       'delivered', 1, 200, b.finished_at, b.finished_at + interval '2 seconds',
       b.finished_at + interval '2 seconds', 'msg_' || md5('batch' || b.id::text),
       b.finished_at, b.finished_at + interval '1 second'
FROM batch b WHERE b.callback_url IS NOT NULL AND b.status <> 'running'
"""
    )
    conn.execute(
        b"VACUUM ANALYZE batch, document, pipeline_run, pipeline_step_result, llm_call_log,"
        b" outbox, webhook_delivery, review_decision"
    )
    _all_visible(conn)


# The tables whose pages a fill leaves all-visible (their index-only scans read no heap).
_VISIBLE = (
    "batch",
    "document",
    "pipeline_run",
    "pipeline_step_result",
    "outbox",
    "webhook_delivery",
    "review_decision",
)


def _all_visible(conn: Conn, tries: int = 3) -> None:
    """VACUUM again until every page of the fill is all-visible. A VACUUM marks a page only
    if its rows are older than every snapshot: an autovacuum worker's ANALYZE running
    meanwhile (the fill's tables are new and large) leaves the newest pages, those of the
    runs in flight, unmarked, and an index-only scan then reads the heap for each of their
    rows (run_counts on a 100,000-run fill: 117 buffers and 1,059 heap fetches; 52 and none
    on a 1,000,000-run fill whose pages were all marked)."""
    for _ in range(tries):
        short = [
            r[0]
            for r in conn.execute(
                b"SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r'"
                b" AND relallvisible < relpages",
                (list(_VISIBLE),),
            )
        ]
        if not short:
            return
        # Wait for the snapshots of the database's other sessions (autovacuum's) to end, then
        # mark again (a snapshot in another database holds no horizon back here).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and conn.execute(
            b"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            b" AND datname = current_database() AND backend_xmin IS NOT NULL)"
        ).fetchone() == (True,):
            time.sleep(0.5)
        conn.execute(f"VACUUM {', '.join(short)}".encode())


def row_counts(conn: Conn) -> dict[str, int]:
    tables = (
        "batch",
        "document",
        "pipeline_run",
        "pipeline_step_result",
        "llm_call_log",
        "outbox",
        "webhook_delivery",
        "review_decision",
    )
    return {
        t: int(conn.execute(f"SELECT count(*) FROM {t}".encode()).fetchone()[0]) for t in tables
    }  # type: ignore[index]


def largest_ended_batch(conn: Conn, tenant: str) -> str:
    row = conn.execute(
        b"SELECT id FROM batch WHERE tenant_id = %s AND status <> 'running'"
        b" ORDER BY runs_total DESC, id LIMIT 1",
        (tenant,),
    ).fetchone()
    return str(row[0]) if row else str(uuid.UUID(int=0))
