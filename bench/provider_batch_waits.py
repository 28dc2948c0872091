"""What the provider-batch lane's waits cost everyone else, and whether its values are real
time's (bench.provider_batches runs these):

- the same values: each document's step outputs through the lane against the same
  document's through real time;
- parked, not held: how long a step stays ``running`` once one of its calls waits for a
  provider batch (sampled), and an interactive run's time to done while the lane's calls
  are parked against the same at rest.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.harness import Bench, wait_for
from bench.interactive_latency import interactive_latencies

# Every SAMPLE_EVERY_S: the calls parked (waiting for a provider batch or packed in one), and
# how long each step that is `running` with such a call has been running since the later of
# its claim and its first parked call's record (a recheck's claim of a step whose calls
# wait still counts from the claim). A step whose calls wait should hand its slot back as
# soon as its round's calls are recorded.
SAMPLE_EVERY_S = 0.05
_SAMPLE = """
WITH parked AS (
    SELECT run_id, step, min(created_at) AS since, count(*) AS calls
    FROM provider_batch_call WHERE state IN ('waiting', 'packed')
    GROUP BY run_id, step
), holding AS (
    SELECT extract(epoch FROM now() - greatest(s.started_at, p.since)) AS held_s
    FROM pipeline_step_result s JOIN parked p ON p.run_id = s.run_id AND p.step = s.step
    WHERE s.status = 'running'
)
SELECT (SELECT coalesce(sum(calls), 0) FROM parked) AS parked_calls,
       (SELECT count(*) FROM holding) AS holding_steps,
       (SELECT coalesce(max(held_s), 0) FROM holding) AS held_s
"""


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    parked_calls: int
    holding_steps: int
    held_s: float


@dataclass
class ParkedWaits:
    """A sampler of parked calls and of steps running while their calls wait (a thread on
    its own connection)."""

    database_url: str
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ParkedWaits:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self._stop.wait(SAMPLE_EVERY_S):
                row = conn.execute(_SAMPLE).fetchone()
                assert row is not None
                self.samples.append(
                    Sample(time.monotonic(), int(row[0]), int(row[1]), float(row[2]))
                )

    def parked_now(self) -> int:
        return self.samples[-1].parked_calls if self.samples else 0

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]


def interactive_times(bench: Bench, docs: list[str], tag: str) -> list[float]:
    """Seconds from creation to done of a run of each of ``docs`` in the interactive lane,
    one at a time (server timestamps)."""
    return interactive_latencies(bench, docs, 1, tag)


def while_parked(
    bench: Bench,
    start_lane: Callable[[], str],
    wait_done: Callable[[str], None],
    interactive_docs: list[str],
    *,
    parked_at_least: int,
) -> dict[str, Any]:
    """Start a lane batch (``start_lane``: its id), time ``interactive_docs`` once at least
    ``parked_at_least`` of its calls are parked, and sample its steps until it ends."""
    with ParkedWaits(bench.database_url) as waits:
        batch_id = start_lane()
        wait_for(lambda: waits.parked_now() >= parked_at_least, timeout_s=600, every_s=0.1)
        started = time.monotonic()
        times = interactive_times(bench, interactive_docs, "while-parked")
        ended = time.monotonic()
        wait_done(batch_id)
    during = waits.between(started, ended)
    return {
        "batch_id": batch_id,
        "interactive_s": times,
        "interactive_median_s": statistics.median(times),
        "parked_calls_during": [
            min(s.parked_calls for s in during),
            max(s.parked_calls for s in during),
        ],
        "samples": len(waits.samples),
        "sample_every_s": SAMPLE_EVERY_S,
        "samples_holding": sum(1 for s in waits.samples if s.holding_steps),
        "most_steps_holding": max(s.holding_steps for s in waits.samples),
        "longest_held_s": max(s.held_s for s in waits.samples),
        # A hold longer than the longest gap between two samples is seen at least once.
        "longest_gap_s": max(b.at - a.at for a, b in itertools.pairwise(waits.samples)),
    }


def same_values(bench: Bench, realtime: tuple[str, str], lane: tuple[str, str]) -> dict[str, int]:
    """Documents (and steps) whose outputs through the lane equal real time's: each side a
    (batch id, the prefix of its documents' ids)."""
    outputs = [_outputs(bench, batch_id, label) for batch_id, label in (realtime, lane)]
    expected, got = outputs
    steps_equal = sum(1 for key, output in got.items() if expected.get(key) == output)
    documents = {doc for doc, _ in got}
    differing = {doc for (doc, step), output in got.items() if expected.get((doc, step)) != output}
    return {
        "documents": len(documents),
        "documents_equal": len(documents - differing),
        "steps": len(got),
        "steps_equal": steps_equal,
    }


def _outputs(bench: Bench, batch_id: str, label: str) -> dict[tuple[str, str], Any]:
    """Each step's output of the batch's runs, by (document id without ``label``, step)."""
    rows = bench.sql(
        "SELECT r.document_id, s.step, s.output FROM pipeline_step_result s"
        " JOIN pipeline_run r ON r.id = s.run_id WHERE r.batch_id = %s",
        batch_id,
    )
    return {(r["document_id"].removeprefix(f"{label}-"), r["step"]): r["output"] for r in rows}
