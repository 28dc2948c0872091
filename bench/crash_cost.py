"""Crash cost: provider calls paid twice and time to resume after SIGKILL mid step 2.

One document at a time, concurrency 1, the fake provider at a fixed --latency-ms per call.
As soon as the provider has received the 5th ``extract_fields`` request of the document
(the first 4 are answered, the next 4 are in flight), the whole worker is SIGKILLed
(every process of it: a node loss or an OOM kill of the container) and started again at
once. Measured from the provider's side:

- wasted calls: requests for the document beyond those of a run without a crash;
- time to resume: from the kill to the first request for the document after it;
- time to done: from the kill to the document's end.

Systems: docpipe; (a) plain Celery with the whole pipeline in one task (late acks, requeue
on a lost worker, Redis visibility timeout --visibility-timeout-s: Celery's default is
3600 s and it must exceed the longest task); (c) DBOS (its workflow is recovered when the
process starts again with the same executor id).

    python -m bench.crash_cost [--rounds 3] [--latency-ms 500] [--visibility-timeout-s 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass

from bench.harness import REPORTS, bench_stack, wait_for, write_report
from bench.systems import (
    Servers,
    System,
    celery_system,
    dbos_system,
    docpipe_system,
    documents,
    rounds,
)

KILL_AT_FIELDS_REQUEST = 5


@dataclass
class Crash:
    system: str
    clean_calls: int
    calls: int
    resume_s: float
    done_s: float

    @property
    def wasted(self) -> int:
        return self.calls - self.clean_calls


def one_round(servers: Servers, system: System, doc: tuple[str, str]) -> Crash:
    clean_calls = rounds(doc[1], 1)  # one call per round trip when sent one at a time
    servers.reset_provider()
    done_before, _ = system.finished()
    system.submit([doc])
    wait_for(
        lambda: (
            servers.provider_stats()["by_step"].get("extract_fields", 0) >= KILL_AT_FIELDS_REQUEST
        ),
        timeout_s=120,
        every_s=0.01,
    )
    system.crash()
    killed = time.monotonic()
    sent_at_kill = servers.provider_calls()
    wait_for(lambda: servers.provider_calls() > sent_at_kill, timeout_s=3600, every_s=0.02)
    resumed = time.monotonic()
    wait_for(lambda: system.finished()[0] > done_before, timeout_s=600, every_s=0.05)
    done = time.monotonic()
    return Crash(
        system.name, clean_calls, servers.provider_calls(), resumed - killed, done - killed
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=int, default=500)
    parser.add_argument("--visibility-timeout-s", type=float, default=30.0)
    args = parser.parse_args()
    docs = documents(args.rounds, "crash")
    crashes: list[Crash] = []
    with bench_stack(
        batch_concurrency=1,
        interactive_concurrency=1,
        latency_ms=f"{args.latency_ms}:{args.latency_ms}",
    ) as bench:
        servers = Servers(bench)
        servers.set_latency(args.latency_ms / 1000)
        docpipe = docpipe_system(servers)
        for doc in docs:
            crashes.append(one_round(servers, docpipe, doc))
            print(crashes[-1], flush=True)
        for name in ("worker-batch", "worker-interactive", "beat"):
            bench.stack.halt(name, kill=False)
        peers = [
            celery_system(servers, "whole", visibility_timeout_s=args.visibility_timeout_s),
            dbos_system(servers),
        ]
        for peer in peers:
            peer.start(1)
            try:
                peer.reset()
                for doc_id, text in docs:
                    crashes.append(one_round(servers, peer, (f"{peer.name}-{doc_id}", text)))
                    print(crashes[-1], flush=True)
            finally:
                peer.stop()

    labels = {
        "docpipe": "**docpipe**",
        "celery-whole": "(a) Celery, pipeline in one task",
        "dbos": "(c) DBOS",
    }
    summary: dict[str, dict[str, float]] = {}
    for name in labels:
        mine = [c for c in crashes if c.system == name]
        summary[name] = {
            "wasted_calls": statistics.fmean(c.wasted for c in mine),
            "clean_calls": statistics.fmean(c.clean_calls for c in mine),
            "resume_s": statistics.fmean(c.resume_s for c in mine),
            "done_s": statistics.fmean(c.done_s for c in mine),
        }
    (REPORTS / "crash-cost.json").write_text(json.dumps({"crashes": [asdict(c) for c in crashes]}))
    rows = "\n".join(
        f"| {labels[name]} | {s['wasted_calls']:.1f} of {s['clean_calls']:.0f} | "
        f"{s['resume_s']:.1f} | {s['done_s']:.1f} |"
        for name, s in summary.items()
    )
    d, a, c = summary["docpipe"], summary["celery-whole"], summary["dbos"]
    report = f"""# Crash cost: SIGKILL of the worker in the middle of step 2

`python -m bench.crash_cost --rounds {args.rounds} --latency-ms {args.latency_ms}
--visibility-timeout-s {args.visibility_timeout_s:g}`: one document at a time, concurrency 1,
provider at {args.latency_ms} ms per call. When the provider receives the document's
{KILL_AT_FIELDS_REQUEST}th `extract_fields` request (4 answered, 4 in flight), every process
of the worker is SIGKILLed and the worker started again at once. Means of {args.rounds}
rounds; calls counted by the provider.

| system | calls paid twice (of a clean run's) | kill -> work resumes (s) | kill -> document done (s) |
|---|---|---|---|
{rows}

- docpipe re-sends only the calls that were in flight: step 1 and every answered call of
  step 2 are memoised in PostgreSQL. It resumes once the dead worker's lease, tied to its
  PostgreSQL session, is handed on (the next claim, or the reaper every second:
  docs/concepts/leases.md, "Leases"), whatever the broker's visibility timeout.
  Ratios: {a["wasted_calls"] / max(d["wasted_calls"], 0.1):.1f}x fewer wasted calls than
  (a), {c["wasted_calls"] / max(d["wasted_calls"], 0.1):.1f}x fewer than (c).
- (a) starts the document over (step 1 too), and only once Redis hands the unacknowledged
  message out again: after the visibility timeout, here {args.visibility_timeout_s:g} s
  (Celery's default: 3600 s; it must exceed the longest task, or a running task is handed
  to a second worker).
- (c) DBOS checkpoints each step, so step 1 is not re-run, but the calls inside step 2 are
  not checkpointed one by one: step 2 starts over. It resumes as soon as the process is
  back (recovery of its executor's pending workflows at launch); a crashed process that is
  not restarted waits for another executor to recover it.
"""
    print(report)
    write_report("crash-cost", report, summary)


if __name__ == "__main__":
    main()
