"""The capacity model (bench.capacity): its arithmetic against docs/capacity.md's worked
examples, which the command must print exactly (bench.figures prints them again), and its
inputs read from the benchmark file that bench.time_budget writes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bench.capacity import (
    WORKED_EXAMPLE,
    Costs,
    Fleet,
    Memory,
    bounds,
    estimate,
    main,
    rewrite_worked_examples,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"


def test_the_worked_examples_print_what_the_doc_shows(capsys: pytest.CaptureFixture[str]) -> None:
    found = WORKED_EXAMPLE.findall(DOC.read_text(encoding="utf-8"))
    assert len(found) >= 2, "docs/capacity.md has a worked example for each pool"
    for _, command, shown, _ in found:
        printed = main(shlex.split(command)[3:])
        assert printed == shown, "run `python -m bench.figures`: it prints the examples again"
        assert capsys.readouterr().out.rstrip("\n") == shown


def test_a_stale_worked_example_is_printed_again_and_the_rest_of_the_page_kept(
    tmp_path: Path,
) -> None:
    command = "python -m bench.capacity --workers 8 --latency-s 0.2 --shared-cores 2"
    page = tmp_path / "capacity.md"
    page.write_text(f"Before.\n\n```sh\n{command}\n```\n\n```text\nold figures\n```\n\nAfter.\n")
    assert rewrite_worked_examples(page, write=False)
    assert "old figures" in page.read_text()  # a check writes nothing
    assert rewrite_worked_examples(page)
    printed = estimate(shlex.split(command)[3:])
    assert page.read_text() == (
        f"Before.\n\n```sh\n{command}\n```\n\n```text\n{printed}\n```\n\nAfter.\n"
    )
    assert not rewrite_worked_examples(page)


def test_each_bound_is_the_parts_size_over_what_a_document_costs_it() -> None:
    costs = Costs(
        rounds=5.0,
        transport_ms=10.0,
        overhead_ms=100.0,
        pg_transactions=50.0,
        redis_commands=400.0,
        provider_calls=10.0,
        tokens=6000.0,
        worker_cpu_ms=50.0,
        pg_cpu_ms=20.0,
        redis_cpu_ms=5.0,
        provider_cpu_ms=25.0,
    )
    fleet = Fleet(
        workers=10,
        latency_s=1.0,
        worker_cores=2,
        pg_tps=1000,
        pg_cores=4,
        redis_ops=40_000,
        rpm=600,
        tpm=720_000,
        shared_cores=1,
    )
    found = {b.part: b.docs_per_s for b in bounds(costs, fleet)}
    assert costs.slot_s(1.0) == pytest.approx(5 * 1.010 + 0.100)
    assert found == pytest.approx(
        {
            "worker slots": 10 / 5.15,
            "worker CPU": 2 / 0.050,
            "PostgreSQL transactions": 1000 / 50,
            "PostgreSQL CPU": 4 / 0.020,
            "Redis commands": 40_000 / 400,
            "provider RPM": 600 / 60 / 10,
            "provider TPM": 720_000 / 60 / 6000,
            "shared CPU (one machine)": 1 / 0.100,
        }
    )
    assert next(iter(found)) == "provider RPM", "the tightest bound comes first"


def test_a_threads_process_holds_its_slots_on_one_core_at_most() -> None:
    costs = Costs(
        rounds=5.0,
        transport_ms=10.0,
        overhead_ms=100.0,
        pg_transactions=50.0,
        redis_commands=400.0,
        provider_calls=10.0,
        tokens=6000.0,
        worker_cpu_ms=50.0,
        pg_cpu_ms=20.0,
        redis_cpu_ms=5.0,
        provider_cpu_ms=25.0,
    )
    fleet = Fleet(workers=3, latency_s=1.0, pool="threads", slots=100, worker_cores=8)
    found = {b.part: b.docs_per_s for b in bounds(costs, fleet)}
    assert found == pytest.approx({"worker slots": 300 / 5.15, "worker CPU": 3 / 0.050})
    memory = Memory(prefork_process_mb=60, threads_idle_mb=80, threads_slot_mb=0.5)
    assert memory.worker_mb("threads", 100) == 130
    assert memory.worker_mb("prefork", 1) == 60


def test_the_measured_costs_come_from_the_time_budget_benchmark() -> None:
    costs = Costs.from_time_budget(DOC.parent / "benchmarks" / "time-budget.json")
    assert costs.rounds > 1 and costs.provider_calls > costs.rounds
    assert costs.pg_transactions > 0 and costs.redis_commands > 0 and costs.tokens > 0
    assert costs.worker_cpu_ms > 0 and costs.overhead_ms > 0
    assert "time-budget.json, measured" in costs.measured
