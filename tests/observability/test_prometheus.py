"""Proof against a real Prometheus: Debian's ``prometheus`` scrapes the API, both worker
pools and beat (each serving /metrics as in production) while a small batch and a few
interactive runs go through, with 429s and a 5xx from the provider; then every query of
every dashboard must return data, and the alert rules load and evaluate without error."""

from __future__ import annotations

import contextlib
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from docpipe.state.db import Database
from docpipe_dev import dashboards
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess
from tests.observability.conftest import CONTRACTS, extract
from tests.observability.test_alert_rules import RULES, promtool
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow

# What Grafana substitutes: rate windows of a few scrapes, the whole test as the range.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s"}


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, list[str]]], Prometheus]]:
    """Start ``prometheus`` on a loopback port scraping the given jobs every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: `make deps` installs Debian's prometheus package")
    started: list[ManagedProcess] = []

    def start(jobs: dict[str, list[str]]) -> Prometheus:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": targets}]}
                for job, targets in jobs.items()
            ],
        }
        config_file = tmp_path / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        checked = promtool("check", "config", str(config_file))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        port = free_port()
        proc = ManagedProcess(
            "prometheus",
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            tmp_path / "prometheus.log",
        ).start()
        started.append(proc)
        server = Prometheus(f"http://127.0.0.1:{port}")
        wait_until(lambda: _ready(server), timeout_s=30)
        return server

    yield start
    for proc in started:
        proc.stop(timeout_s=10)


def _ready(server: Prometheus) -> bool:
    try:
        return httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    db: Database,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
    start_api: Callable[..., str],
    prometheus: Callable[[dict[str, list[str]]], Prometheus],
) -> None:
    ports = {name: free_port() for name in ("interactive", "batch", "beat", "api")}
    api_metrics = ports.pop("api")  # its own port, not the API's public one
    # Prometheus first: it applies its targets about 5 s after it starts, which the
    # processes' own start-up then covers.
    server = prometheus(
        {
            "docpipe-api": [f"127.0.0.1:{api_metrics}"],
            "docpipe-celery": [f"127.0.0.1:{port}" for port in ports.values()],
        }
    )
    metrics_env = {"DOCPIPE_METRICS_HOST": "127.0.0.1", "DOCPIPE_PROVIDER_RPM": "3000"}
    for lane in ("interactive", "batch"):
        start_worker(lane, concurrency=2, DOCPIPE_METRICS_PORT=str(ports[lane]), **metrics_env)
    start_beat(DOCPIPE_METRICS_PORT=str(ports["beat"]), **metrics_env)
    api = start_api(DOCPIPE_METRICS_PORT=str(api_metrics), **metrics_env)
    wait_until(lambda: server.value("count(up == 1)") == 4, timeout_s=20)

    fake_llm.configure(latency_ms=[20, 60])
    fake_llm.add_fault("429", count=2, step="extract_fields", retry_after=0.2)
    fake_llm.add_fault("503", count=1, step="summarize")
    run_ids = [extract(api, f"doc-{i}", CONTRACTS[i].text) for i in range(2)]
    batch = httpx.post(
        f"{api}/batches",
        timeout=10,
        json={
            "documents": [{"id": f"batch-{i}", "text": c.text} for i, c in enumerate(CONTRACTS)],
        },
    )
    assert batch.status_code == 202, batch.text
    runs = len(run_ids) + len(CONTRACTS)
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM pipeline_run WHERE status = 'done'") == runs,
        timeout_s=90,
    )
    # Prometheus has scraped the end state, and the counters have two samples since. Ended
    # runs are estimated from the table's statistics: fresh ones, on a table this small,
    # hold every row.
    with db.session() as s:
        s.conn.execute(b"ANALYZE pipeline_run")
    wait_until(
        lambda: (
            server.value('sum(max by (lane) (docpipe_runs_ended_estimate{status="done"}))') == runs
        ),
        timeout_s=20,
    )

    def empty_panels() -> list[str]:
        empty = []
        for name, model in dashboards.build().items():
            for title, expr in dashboards.queries(model):
                for variable, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, value)
                result = server.query(expr)
                values = [float(sample["value"][1]) for sample in result]
                if not any(math.isfinite(v) for v in values):
                    empty.append(f"{name} / {title}: {expr} -> {values}")
        return empty

    # A rate needs two samples of its counter: polled until every panel has a value, and
    # then asserted, so that the message names the panels still empty.
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not empty_panels(), timeout_s=20, every_s=0.5)
    assert (empty := empty_panels()) == [], "\n".join(empty)

    # The numbers are the stack's, not just any numbers.
    assert server.value("sum(docpipe_provider_rate_limited_total)") == 2
    assert server.value('sum(docpipe_provider_calls_total{status_code="503"})') == 1
    calls = scalar(db, "SELECT count(*) FROM llm_call_log")
    assert server.value("sum(docpipe_provider_calls_total)") == calls
    cost = float(scalar(db, "SELECT sum(cost_usd) FROM llm_call_log"))
    assert server.value("sum(docpipe_cost_usd_total)") == pytest.approx(cost)
    assert server.value('sum(docpipe_runs_created_total{lane="batch"})') == len(CONTRACTS)
    assert server.value("max(celery_queue_length)") == 0
    assert server.value("sum(celery_worker_up)") == 2

    # The alert rules were loaded and evaluate against the real series without error.
    groups = httpx.get(f"{server.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert len(rules) == sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert {rule["health"] for rule in rules} == {"ok"}, rules
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
