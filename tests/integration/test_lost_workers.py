"""A worker lost mid step while another one serves the same queue, with real `celery worker`
processes: killed, its step goes to the other worker before its lease could have expired
(the lease ended with its PostgreSQL session); cut off by a partition, its session still
looks alive, so the step goes on after the lease expired, and whatever the partitioned worker
sends once it is back is refused. Correctness only: bench/recovery.py measures the times."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from docpipe.broker.transport import CeleryPublisher
from docpipe.state.db import Database
from docpipe_dev.localstack import LocalRedis
from docpipe_dev.partition import NetworkNamespace, TcpForwarder
from docpipe_dev.processes import ManagedProcess, worker_argv
from tests.integration.test_workers import calls, submit, wait_for_end
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

StartWorker = Callable[..., ManagedProcess]
STEP2 = "extract_fields"
# A lease that cannot run out while its dead worker's step is handed on: what hands it on
# within it is the session.
LONG_LEASE = {"DOCPIPE_LEASE_TTL_S": "10", "DOCPIPE_HEARTBEAT_INTERVAL_S": "2"}
# The partitioned worker's calls are answered once it is back (within its call timeout), so
# that it does try to carry on with a step that is no longer its own.
PATIENT = {
    "DOCPIPE_LLM_TIMEOUT_S": "15",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "30",
    "DOCPIPE_TASK_TIME_LIMIT_S": "50",
}


@dataclass(frozen=True)
class Lease:
    owner: str
    attempt: int
    started_at: datetime
    expires_at: datetime

    @property
    def pid(self) -> int:
        return int(self.owner.split(":")[1])  # worker_identity(): host:pid:nonce


def step2_lease(db: Database) -> Lease | None:
    with db.session() as s:
        row = s.conn.execute(
            b"SELECT lease_owner, attempt, started_at, lease_expires_at FROM pipeline_step_result"
            b" WHERE step = %s AND status = 'running'",
            (STEP2,),
        ).fetchone()
    return Lease(*row.values()) if row else None


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_a_killed_worker_loses_its_step_to_the_other_one_before_its_lease_expires(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
) -> None:
    fake_llm.configure(latency_ms=[250, 250])
    start_beat(**LONG_LEASE)
    workers = [start_worker(concurrency=1, **LONG_LEASE) for _ in range(2)]
    run_id = submit(db, publisher)
    wait_until(lambda: calls(db, run_id, STEP2, "ok") >= 2, timeout_s=30)
    first = step2_lease(db)
    assert first is not None
    victim = next(w for w in workers if w.pid == parent_of(first.pid))
    victim.kill_group()  # parent and pool process: no one puts its message back

    second = wait_until(
        lambda: (lease := step2_lease(db)) and lease.attempt == 2 and lease, timeout_s=30
    )
    assert second.started_at < first.expires_at, "handed on before the lease could expire"
    survivor = next(w for w in workers if w is not victim)
    assert parent_of(second.pid) == survivor.pid
    assert wait_for_end(db, run_id) == "done"
    assert calls(db, run_id, "extract_sections") == 1, "step 1 must not run again"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", STEP2) == 2


@pytest.fixture
def cut_off_worker(
    database_url: str,
    redis_server: LocalRedis,
    fake_llm_server: FakeLLM,
    stack_env: dict[str, str],
    tmp_path: Path,
) -> Iterator[tuple[NetworkNamespace, ManagedProcess]]:
    """An interactive worker in a network namespace of its own, reaching this test's
    PostgreSQL, Redis and provider through forwarders on the host's end of its veth."""
    with NetworkNamespace() as ns:
        ports = {
            "pg": psycopg.conninfo.conninfo_to_dict(database_url)["port"],
            "redis": redis_server.port,
            "llm": fake_llm_server.port,
        }
        forwarders = {
            name: TcpForwarder(ns.host_address, int(port)) for name, port in ports.items()
        }
        try:
            env = {
                **stack_env,
                **PATIENT,
                "DOCPIPE_DATABASE_URL": psycopg.conninfo.make_conninfo(
                    database_url, host=ns.host_address, port=forwarders["pg"].port
                ),
                "DOCPIPE_REDIS_URL": f"redis://{ns.host_address}:{forwarders['redis'].port}/0",
                "DOCPIPE_LLM_BASE_URL": f"http://{ns.host_address}:{forwarders['llm'].port}/v1",
                "DOCPIPE_LIVENESS_FILE": str(tmp_path / "cut-off.alive"),
            }
            argv = worker_argv("interactive", concurrency=1, name="cut-off")
            worker = ns.start("worker-cut-off", argv, tmp_path / "worker-cut-off.log", env=env)
            worker.wait_for_log(r"\bready\.", timeout_s=60)
            yield ns, worker
        finally:
            for forwarder in forwarders.values():
                forwarder.close()


def test_a_partitioned_worker_loses_its_step_after_its_lease_expires_and_is_refused_after(
    db: Database,
    publisher: CeleryPublisher,
    broker: object,
    fake_llm: FakeLLM,
    start_worker: StartWorker,
    start_beat: Callable[..., ManagedProcess],
    cut_off_worker: tuple[NetworkNamespace, ManagedProcess],
) -> None:
    ns, partitioned = cut_off_worker
    fake_llm.configure(latency_ms=[1000, 1000])
    start_beat()
    run_id = submit(db, publisher)  # the only interactive worker is the namespaced one
    wait_until(lambda: calls(db, run_id, STEP2, "ok") >= 1, timeout_s=60)
    ns.drop()
    first = step2_lease(db)
    assert first is not None and parent_of(first.pid) == partitioned.pid
    other = start_worker(concurrency=1, **PATIENT)

    second = wait_until(
        lambda: (lease := step2_lease(db)) and lease.attempt == 2 and lease, timeout_s=60
    )
    assert parent_of(second.pid) == other.pid
    # Its session looked alive (no FIN crossed the partition): the lease had to expire.
    assert second.started_at >= first.expires_at
    ns.heal()

    refused = rf"lease of {run_id}/{STEP2} lost|result of {run_id}/{STEP2} refused"
    try:
        wait_until(lambda: re.search(refused, partitioned.log_text()), timeout_s=60)
    except TimeoutError:
        # Beat's periodic tasks fill a log's tail once healed; the step's own lines are the
        # ones that say where its renewal or its result went.
        own = [line for line in partitioned.log_text().splitlines() if ".periodic." not in line]
        pytest.fail("the partitioned worker refused nothing:\n" + "\n".join(own[-60:]))
    assert wait_for_end(db, run_id) == "done"
    assert scalar(db, "SELECT attempt FROM pipeline_step_result WHERE step = %s", STEP2) == 2
    late = scalar(
        db,
        "SELECT count(*) FROM llm_call_log WHERE step = %s AND step_attempt = 1"
        " AND created_at > %s",
        STEP2,
        second.started_at,
    )
    assert late == 0, "the partitioned worker sent no call once the step was taken over"
    assert calls(db, run_id, "extract_sections") == 1
