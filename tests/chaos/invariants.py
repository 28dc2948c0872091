"""What must hold after any crash, read from PostgreSQL and from the provider's own request
log: every run ended for a real reason, no finished provider call was paid twice, every
request the provider received is a call on record (and was sent once), every step result
exists once, costs add up."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from cryptography.fernet import Fernet
from psycopg.rows import dict_row

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import LocalRedis
from docpipe_dev.partition import NetworkNamespace
from docpipe_dev.samples import sample_contracts
from docpipe_dev.stack import LocalStack

CONTRACTS = sample_contracts(200)
# What docpipe sends as X-Client-Request-Id (docpipe.providers.calls.call_request_id).
_CALL_ID = re.compile(r"docpipe-call-(\d+)")
# Webhooks on, to receivers on 127.0.0.1, with a short deadline and few, quick retries; at
# most two attempts in flight, so hanging receivers leave the other processes to the steps.
WEBHOOK_ENV = {
    "DOCPIPE_WEBHOOKS_ENABLED": "true",
    "DOCPIPE_SECRETS_KEY": Fernet.generate_key().decode(),
    "DOCPIPE_WEBHOOK_ALLOWED_DESTINATIONS": "127.0.0.1/32",
    "DOCPIPE_WEBHOOK_TIMEOUT_S": "2",
    "DOCPIPE_WEBHOOK_RETRY_BASE_S": "0.5",
    "DOCPIPE_WEBHOOK_MAX_ATTEMPTS": "3",
    "DOCPIPE_WEBHOOK_CONCURRENCY": "2",
}


@dataclass
class ChaosStack:
    stack: LocalStack
    client: DocpipeClient
    broker: LocalRedis
    # One line per request the fake provider received: the call's id (FAKE_LLM_REQUEST_LOG).
    request_log: Path
    # Set for scenarios marked provider_in_namespace: the provider's network, to partition.
    provider_ns: NetworkNamespace | None = None
    faults: int = 0

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        url = self.stack.env["DOCPIPE_DATABASE_URL"]
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(query.encode(), params).fetchall()

    def execute(self, statements: str) -> None:
        """Run SQL that returns no rows (DDL, several statements)."""
        with psycopg.connect(self.stack.env["DOCPIPE_DATABASE_URL"], autocommit=True) as conn:
            conn.execute(statements.encode())

    def scalar(self, query: str, *params: Any) -> Any:
        rows = self.sql(query, *params)
        return next(iter(rows[0].values())) if rows else None

    def submit_batch(self, count: int, prefix: str = "doc", **options: Any) -> str:
        documents = [{"id": f"{prefix}-{i}", "text": CONTRACTS[i].text} for i in range(count)]
        return str(self.client.submit_batch(documents, **options)["batch_id"])

    def steps_done(self) -> int:
        return int(self.scalar("SELECT count(*) FROM pipeline_step_result WHERE status = 'done'"))

    def wait_until(self, predicate: Callable[[], Any], timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (psycopg.OperationalError, OSError):
                pass  # the scenario may have the database down right now
            time.sleep(0.5)
        raise TimeoutError(f"not within {timeout_s}s: {self.status_counts()}")

    def status_counts(self) -> dict[str, int]:
        rows = self.sql("SELECT status, count(*) AS n FROM pipeline_run GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def wait_for_all_runs(self, timeout_s: float = 240) -> None:
        self.wait_until(
            lambda: (
                self.scalar(
                    "SELECT count(*) FROM pipeline_run WHERE status IN ('queued', 'running')"
                )
                == 0
            ),
            timeout_s,
        )


@dataclass
class ScenarioResult:
    name: str
    runs: int
    done: int
    retried_steps: int
    duplicate_paid_calls: int
    lost: int
    provider_requests: int
    call_rows: int
    longest_stall_s: float
    faults: int
    problems: list[str] = field(default_factory=list)

    def row(self) -> tuple[object, ...]:
        # Rows the provider never received are calls that died on the way (refused, dropped).
        unsent = self.call_rows - self.provider_requests
        requests = f"{self.provider_requests} = {self.call_rows}" + (
            f" - {unsent} never arrived" if unsent else ""
        )
        return (
            self.name,
            self.runs,
            self.done,
            self.retried_steps,
            self.duplicate_paid_calls,
            self.lost,
            requests,
            f"{self.longest_stall_s:.1f}",
            self.faults,
        )


REPORT: list[ScenarioResult] = []


def check_invariants(
    chaos: ChaosStack, name: str, judged_apart: Collection[str] = ()
) -> ScenarioResult:
    """Record the scenario's figures and return them; ``problems`` lists broken invariants.
    ``judged_apart``: ids of runs the scenario expects to end otherwise than done (it checks
    how they ended itself); they must still end."""
    problems: list[str] = []
    counts = chaos.status_counts()
    runs = sum(counts.values())
    lost = counts.get("queued", 0) + counts.get("running", 0)
    apart = list(judged_apart)
    ended_apart = Counter(
        r["status"]
        for r in chaos.sql(
            "SELECT status FROM pipeline_run WHERE id::text = ANY(%s)"
            " AND status NOT IN ('done', 'queued', 'running')",
            apart,
        )
    )
    unexpected = {
        s: n - ended_apart[s]
        for s, n in counts.items()
        if s not in {"done", "queued", "running"} and n > ended_apart[s]
    }
    if lost:
        problems.append(f"{lost} runs never ended")
    if unexpected:
        errors = chaos.sql(
            "SELECT DISTINCT left(error, 300) AS e FROM pipeline_run"
            " WHERE status NOT IN ('done', 'queued', 'running') AND id::text <> ALL(%s) LIMIT 3",
            apart,
        )
        problems.append(f"runs ended badly: {unexpected}: {[r['e'] for r in errors]}")
    duplicates = int(
        chaos.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM llm_call_log WHERE status = 'ok'"
            " GROUP BY run_id, step, generation, call_key HAVING count(*) > 1) twice"
        )
    )
    if duplicates:
        example = chaos.sql(
            "SELECT step, call_key, step_attempt, created_at::time AS sent,"
            " finished_at::time AS answered FROM llm_call_log WHERE (run_id, step, call_key) ="
            " (SELECT run_id, step, call_key FROM llm_call_log WHERE status = 'ok'"
            "  GROUP BY run_id, step, generation, call_key HAVING count(*) > 1 LIMIT 1)"
            " ORDER BY id"
        )
        problems.append(f"{duplicates} finished calls were paid twice, e.g. {example}")
    bad_steps = chaos.scalar(
        "SELECT count(*) FROM pipeline_run r WHERE r.status = 'done' AND (r.steps_done <> 4 OR"
        " (SELECT count(*) FROM pipeline_step_result s WHERE s.run_id = r.id"
        "  AND s.status = 'done' AND s.output IS NOT NULL) <> 4)"
    )
    if bad_steps:
        # extract_text, extract_sections, extract_fields, summarize
        problems.append(f"{bad_steps} done runs without exactly 4 saved step results")
    cost_mismatch = chaos.scalar(
        "SELECT count(*) FROM pipeline_run r WHERE r.cost_usd <>"
        " (SELECT coalesce(sum(cost_usd), 0) FROM llm_call_log c WHERE c.run_id = r.id)"
    )
    batch_mismatch = chaos.scalar(
        "SELECT count(*) FROM batch b WHERE b.cost_usd <>"
        " (SELECT coalesce(sum(cost_usd), 0) FROM pipeline_run r WHERE r.batch_id = b.id)"
    )
    if cost_mismatch or batch_mismatch:
        problems.append(f"costs do not add up: {cost_mismatch} runs, {batch_mismatch} batches")
    requests, rows = _provider_requests_are_calls_on_record(chaos, problems)
    stall = chaos.scalar(
        "SELECT coalesce(max(gap), 0) FROM (SELECT extract(epoch FROM finished_at"
        " - lag(finished_at) OVER (ORDER BY finished_at)) AS gap FROM pipeline_step_result"
        " WHERE finished_at IS NOT NULL) gaps"
    )
    result = ScenarioResult(
        name=name,
        runs=runs,
        done=counts.get("done", 0),
        retried_steps=int(
            chaos.scalar("SELECT count(*) FROM pipeline_step_result WHERE attempt > 1")
        ),
        duplicate_paid_calls=duplicates,
        lost=lost,
        provider_requests=requests,
        call_rows=rows,
        longest_stall_s=float(stall),
        faults=chaos.faults,
        problems=problems,
    )
    REPORT.append(result)
    return result


def _provider_requests_are_calls_on_record(
    chaos: ChaosStack, problems: list[str]
) -> tuple[int, int]:
    """No call is paid without being recorded: every request the provider received names an
    llm_call_log row, no row was sent twice, and every row that got an answer was received;
    the only rows the provider never saw are calls that failed on the way to it. Returns
    (requests received, call-log rows)."""
    received = chaos.request_log.read_text().splitlines() if chaos.request_log.exists() else []
    ids = Counter(int(m.group(1)) for line in received if (m := _CALL_ID.fullmatch(line)))
    rows = {
        r["id"]: r
        for r in chaos.sql("SELECT id, status, http_status, error_kind FROM llm_call_log")
    }
    anonymous = len(received) - sum(ids.values())
    unrecorded = sorted(set(ids) - set(rows))
    twice = sorted(i for i, n in ids.items() if n > 1)
    answered_unseen = sorted(
        i
        for i, r in rows.items()
        if i not in ids and (r["status"] in ("ok", "invalid_output") or r["http_status"])
    )
    if anonymous or unrecorded:
        problems.append(
            f"paid without a record: {anonymous} requests without a call id, "
            f"calls {unrecorded[:5]} not in llm_call_log"
        )
    if twice:
        problems.append(f"calls sent to the provider twice under one record: {twice[:5]}")
    if answered_unseen:
        problems.append(f"calls answered that the provider never received: {answered_unseen[:5]}")
    return len(received), len(rows)
