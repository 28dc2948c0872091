"""How many documents a day a fleet handles, and which part of it saturates first.

The capacity model of docs/capacity.md: each part of the fleet allows at most so many
documents a second, given what one document costs it; the fleet handles the smallest of
those, and that part saturates first. The per-document costs are read from
docs/benchmarks/time-budget.json (written by `python -m bench.time_budget`), so the estimate
follows the code whenever that benchmark is rerun; any of them can be given instead.

    python -m bench.capacity --workers 64 --latency-s 1.5 --pg-tps 4000 --redis-ops 80000 \\
        --rpm 10000 --tpm 2000000 [--worker-cores 16] [--pg-cores 8] [--shared-cores 2] \\
        [--pool threads --slots 200]

``--workers`` counts worker processes. In the prefork pool each runs one step at a time; in
the threads pool each runs ``--slots`` steps at once as threads, and its Python runs on one
core at most (the GIL), so its CPU bound counts at most one core per process. The workers'
memory is estimated from docs/benchmarks/in-flight.json (`python -m bench.in_flight`):
PSS per prefork process, and a threads process' idle PSS plus its growth per slot.

A part whose size is not given is left out (unbounded).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

from bench.harness import REPORTS
from docpipe.settings import Settings

__all__ = ["Costs", "Fleet", "Memory", "bounds", "main", "render"]

SECONDS_A_DAY = 86_400
# Past this share of a part's bound, queues (and latencies) grow fast: plan below it.
PLANNING_SHARE = 0.7
# A worker process' pool (DOCPIPE_DATABASE_POOL_SIZE's default) and its lease session.
DEFAULT_POOL = Settings.model_construct().database_pool_size
CONNECTIONS_PER_WORKER = DEFAULT_POOL + 1


@dataclass(frozen=True)
class Costs:
    """What one document costs each part, as measured (time-budget.json) or given."""

    rounds: float  # sequential provider round trips (calls in a round go out together)
    transport_ms: float  # per round trip, beyond the provider's own answer time
    overhead_ms: float  # docpipe's time in a worker slot: inside steps, hops, handoff
    pg_transactions: float
    redis_commands: float
    provider_calls: float
    tokens: float  # input + output
    worker_cpu_ms: float  # workers, beat and API together
    pg_cpu_ms: float
    redis_cpu_ms: float
    provider_cpu_ms: float  # the fake provider's: counts only where it shares the machine
    measured: str = "given"

    @classmethod
    def from_time_budget(cls, path: Path) -> Costs:
        data = json.loads(path.read_text(encoding="utf-8"))
        f = data["figures"]
        parts, per_doc, cpu = f["parts_ms"], f["per_document"], f["cpu_ms_per_document"]
        return cls(
            rounds=f["mean_rounds"],
            transport_ms=parts["transport"] / f["mean_rounds"],
            overhead_ms=parts["inside steps"] + parts["hops"] + parts["handoff"],
            pg_transactions=per_doc["postgres_transactions"],
            redis_commands=per_doc["redis_commands"],
            provider_calls=per_doc["provider_calls"],
            tokens=per_doc["input_tokens"] + per_doc["output_tokens"],
            worker_cpu_ms=cpu["workers"],
            pg_cpu_ms=cpu["postgres"],
            redis_cpu_ms=cpu["redis"],
            provider_cpu_ms=cpu["provider"],
            measured=f"{path.name}, measured {data['measured']}",
        )

    def slot_s(self, latency_s: float) -> float:
        """How long one document holds a worker process, the provider answering in
        ``latency_s``."""
        return self.rounds * (latency_s + self.transport_ms / 1000) + self.overhead_ms / 1000


@dataclass(frozen=True)
class Memory:
    """What a worker process costs in memory (PSS, MB), from docs/benchmarks/in-flight.json."""

    prefork_process_mb: float  # one process per step in flight
    threads_idle_mb: float  # a threads worker process with nothing in flight
    threads_slot_mb: float  # what each step in flight adds to it
    measured: str = "given"

    @classmethod
    def from_in_flight(cls, path: Path) -> Memory | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError:
            return None
        runs = {(r["config"], r["latency_s"]): r for r in data["runs"]}
        prefork = next((r for (c, _), r in runs.items() if c.startswith("prefork")), None)
        threads = next((r for (c, _), r in runs.items() if c == "threads-1x200"), None)
        if prefork is None or threads is None:
            return None
        return cls(
            prefork_process_mb=prefork["pss_mb_per_step_in_flight"],
            threads_idle_mb=threads["idle_pss_mb"],
            threads_slot_mb=threads["pss_growth_mb_per_step_in_flight"],
            measured=f"{path.name}, measured {data['measured']}",
        )

    def worker_mb(self, pool: str, slots: int) -> float:
        """One worker process with ``slots`` steps in flight."""
        if pool == "threads":
            return self.threads_idle_mb + slots * self.threads_slot_mb
        return self.prefork_process_mb


@dataclass(frozen=True)
class Fleet:
    workers: int  # worker processes
    latency_s: float  # the provider's answer time per call
    pool: str = "prefork"  # prefork: a step at a time per process; threads: ``slots`` at once
    slots: int = 1  # steps in flight per worker process (threads pool)
    worker_cores: float | None = None  # None: a core per worker process
    pg_tps: float | None = None  # transactions a second PostgreSQL sustains
    pg_cores: float | None = None
    redis_ops: float | None = None  # commands a second Redis sustains
    rpm: float | None = None  # the provider's requests a minute
    tpm: float | None = None  # the provider's tokens a minute
    shared_cores: float | None = None  # one machine: everything on these cores


@dataclass(frozen=True)
class Bound:
    part: str
    how: str  # the arithmetic, in words
    docs_per_s: float


def bounds(costs: Costs, fleet: Fleet) -> list[Bound]:
    """Each part's documents a second, the tightest first."""
    c = costs
    slot = c.slot_s(fleet.latency_s)
    cores = fleet.worker_cores if fleet.worker_cores is not None else float(fleet.workers)
    if fleet.pool == "threads":
        slots, what = fleet.workers * fleet.slots, f"{fleet.workers} x {fleet.slots} slots"
        # One process' Python runs on one core at a time, however many threads wait.
        cores = min(cores, float(fleet.workers))
    else:
        slots, what = fleet.workers, f"{fleet.workers} processes"
    found = [
        Bound("worker slots", f"{what} / {slot:.3f} s a document", slots / slot),
        Bound(
            "worker CPU",
            f"{cores:g} cores / {c.worker_cpu_ms:.1f} ms a document",
            1000 * cores / c.worker_cpu_ms,
        ),
    ]
    if fleet.pg_tps is not None:
        found.append(
            Bound(
                "PostgreSQL transactions",
                f"{fleet.pg_tps:,.0f}/s / {c.pg_transactions:.1f} a document",
                fleet.pg_tps / c.pg_transactions,
            )
        )
    if fleet.pg_cores is not None:
        found.append(
            Bound(
                "PostgreSQL CPU",
                f"{fleet.pg_cores:g} cores / {c.pg_cpu_ms:.1f} ms",
                1000 * fleet.pg_cores / c.pg_cpu_ms,
            )
        )
    if fleet.redis_ops is not None:
        found.append(
            Bound(
                "Redis commands",
                f"{fleet.redis_ops:,.0f}/s / {c.redis_commands:.1f} a document",
                fleet.redis_ops / c.redis_commands,
            )
        )
    if fleet.rpm is not None:
        found.append(
            Bound(
                "provider RPM",
                f"{fleet.rpm:,.0f}/min / {c.provider_calls:.2f} calls",
                fleet.rpm / 60 / c.provider_calls,
            )
        )
    if fleet.tpm is not None:
        found.append(
            Bound(
                "provider TPM",
                f"{fleet.tpm:,.0f}/min / {c.tokens:.0f} tokens",
                fleet.tpm / 60 / c.tokens,
            )
        )
    if fleet.shared_cores is not None:
        every = c.worker_cpu_ms + c.pg_cpu_ms + c.redis_cpu_ms + c.provider_cpu_ms
        found.append(
            Bound(
                "shared CPU (one machine)",
                f"{fleet.shared_cores:g} cores / {every:.1f} ms of all parts",
                1000 * fleet.shared_cores / every,
            )
        )
    return sorted(found, key=lambda b: b.docs_per_s)


def render(costs: Costs, fleet: Fleet, memory: Memory | None = None) -> str:
    """The estimate as ``python -m bench.capacity`` prints it."""
    c = costs
    found = bounds(costs, fleet)
    first = found[0]
    lines = [
        f"Per document ({c.measured}): {c.rounds:.2f} provider round trips, "
        f"{c.provider_calls:.2f} calls, {c.tokens:.0f} tokens; {c.pg_transactions:.1f} "
        f"PostgreSQL transactions; {c.redis_commands:.1f} Redis commands; CPU: workers "
        f"{c.worker_cpu_ms:.1f} ms, PostgreSQL {c.pg_cpu_ms:.1f} ms, Redis {c.redis_cpu_ms:.1f} ms.",
        f"A worker slot per document: {c.rounds:.2f} x ({fleet.latency_s:g} + "
        f"{c.transport_ms / 1000:.4f}) s + {c.overhead_ms / 1000:.3f} s = "
        f"{c.slot_s(fleet.latency_s):.3f} s.",
        "",
        f"{'part':<26} {'bound':<52} {'documents/s':>11} {'a day':>12}",
    ]
    for b in found:
        lines.append(
            f"{b.part:<26} {b.how:<52} {b.docs_per_s:>11.2f} {b.docs_per_s * SECONDS_A_DAY:>12,.0f}"
        )
    lines += [
        "",
        f"Capacity: {first.docs_per_s:.2f} documents/s, "
        f"{first.docs_per_s * SECONDS_A_DAY:,.0f} a day. First to saturate: {first.part}"
        + (f"; next: {found[1].part} at {found[1].docs_per_s:.2f}/s." if len(found) > 1 else "."),
        f"PostgreSQL connections: up to {fleet.workers * CONNECTIONS_PER_WORKER:,} for the "
        f"workers ({DEFAULT_POOL} pooled + 1 lease session each), besides the API's and beat's.",
        *([_memory_line(memory, fleet)] if memory is not None else []),
        f"Plan for {PLANNING_SHARE:.0%} of it: {PLANNING_SHARE * first.docs_per_s:.2f} documents/s, "
        f"{PLANNING_SHARE * first.docs_per_s * SECONDS_A_DAY:,.0f} a day.",
    ]
    return "\n".join(lines)


def _memory_line(memory: Memory, fleet: Fleet) -> str:
    each = memory.worker_mb(fleet.pool, fleet.slots)
    if fleet.pool == "threads":
        how = (
            f"{memory.threads_idle_mb:.0f} MB idle + {fleet.slots} slots x "
            f"{memory.threads_slot_mb:.2f} MB"
        )
    else:
        how = "a step in flight each"
    return (
        f"Worker memory (PSS): about {fleet.workers * each / 1024:,.1f} GiB, "
        f"{each:,.0f} MB a process ({how}; {memory.measured})."
    )


def _overrides(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("per-document costs instead of the measured ones")
    for f in fields(Costs):
        if f.name != "measured":
            group.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=None)


def estimate(argv: Sequence[str] | None = None) -> str:
    """What the command prints for these arguments."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--latency-s", type=float, default=0.2)
    for name in ("worker-cores", "pg-tps", "pg-cores", "redis-ops", "rpm", "tpm", "shared-cores"):
        parser.add_argument(f"--{name}", type=float, default=None)
    parser.add_argument("--pool", choices=("prefork", "threads"), default="prefork")
    parser.add_argument("--slots", type=int, default=1, help="steps at once per threads process")
    parser.add_argument("--costs", type=Path, default=REPORTS / "time-budget.json")
    parser.add_argument("--memory", type=Path, default=REPORTS / "in-flight.json")
    _overrides(parser)
    args = vars(parser.parse_args(argv))
    given = {f.name: args[f.name] for f in fields(Costs) if args.get(f.name) is not None}
    if len(given) == len(fields(Costs)) - 1:
        costs = Costs(**given)
    else:
        measured = Costs.from_time_budget(args["costs"])
        label = measured.measured + (", some given" if given else "")
        costs = replace(measured, **given, measured=label)
    fleet = Fleet(**{f.name: args[f.name] for f in fields(Fleet)})
    return render(costs, fleet, Memory.from_in_flight(args["memory"]))


# A worked example in the docs: the command, then what it prints. Its output quotes the
# benchmark reports, so bench.figures renders it again whenever they are rerun.
WORKED_EXAMPLE = re.compile(
    r"(```sh\n(python -m bench\.capacity [^\n]+)\n```\n\n```text\n)(.*?)(\n```)", re.S
)


def rewrite_worked_examples(path: Path, *, write: bool = True) -> bool:
    """Print every worked example of one page again; True when the page changed (or, with
    ``write=False``, would change)."""
    text = path.read_text(encoding="utf-8")

    def again(match: re.Match[str]) -> str:
        printed = estimate(shlex.split(match[2])[3:])
        return f"{match[1]}{printed}{match[4]}"

    updated = WORKED_EXAMPLE.sub(again, text)
    if write and updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


def main(argv: Sequence[str] | None = None) -> str:
    text = estimate(argv)
    print(text)
    return text


if __name__ == "__main__":
    main()
