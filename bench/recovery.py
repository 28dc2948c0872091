"""Time from SIGKILL of the interactive worker (mid step 2) to step 2 running again.

Production timings (lease 8 s renewed every 2 s, reaper every 2 s, broker visibility
timeout left at 3600 s): recovery comes from PostgreSQL leases, not from Redis.

    python -m bench.recovery [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.harness import bench_stack, summary, wait_for, write_report
from docpipe_dev.samples import sample_contracts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    contracts = sample_contracts(args.rounds)
    recoveries: list[float] = []
    wasted: list[int] = []
    with bench_stack(interactive_concurrency=1, latency_ms="400:700") as bench:
        for i, contract in enumerate(contracts):
            doc = f"recovery-{i}"
            bench.client.put_document(doc, contract.text)
            run_id = bench.client.extract(doc)["run_id"]
            wait_for(lambda run_id=run_id: bench.scalar(
                "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND step = 'extract_fields'"
                " AND status = 'ok'", run_id) >= 2)  # fmt: skip
            bench.stack.replace("worker-interactive", kill=True)
            killed_at = time.time()
            resumed = wait_for(lambda run_id=run_id: bench.scalar(
                "SELECT extract(epoch FROM started_at) FROM pipeline_step_result"
                " WHERE run_id = %s AND step = 'extract_fields' AND attempt >= 2", run_id),
                timeout_s=120)  # fmt: skip
            recoveries.append(float(resumed) - killed_at)
            wait_for(lambda run_id=run_id: bench.client.run(run_id)["status"] == "done")
            step1 = bench.scalar("SELECT count(*) FROM llm_call_log WHERE run_id = %s"
                                 " AND step = 'extract_sections'", run_id)  # fmt: skip
            assert step1 == 1, "step 1 ran again"
            wasted.append(int(bench.scalar(
                "SELECT count(*) FROM llm_call_log WHERE run_id = %s AND status = 'sent'",
                run_id)))  # fmt: skip
            print(f"round {i + 1}: step 2 running again {recoveries[-1]:.2f}s after the kill, "
                  f"{wasted[-1]} call(s) lost in flight")  # fmt: skip
    line = summary(recoveries)
    print(f"kill -> step 2 running again (s): {line}")
    write_report(
        "recovery",
        f"""# Recovery after SIGKILL of a worker mid step 2

`python -m bench.recovery --rounds {args.rounds}`: the interactive worker (parent and pool
children) is SIGKILLed while step 2 of a run is sending its calls, then restarted at once.
Production timings: lease 8 s renewed every 2 s, reaper every 2 s, Redis visibility
timeout untouched (3600 s).

| measure | value |
|---|---|
| kill -> step 2 claimed again (s) | {line} |
| median (s) | {statistics.median(recoveries):.2f} |
| step 1 provider calls per run | 1 (never re-run) |
| calls lost in flight per kill (sent, never answered) | {statistics.fmean(wasted):.1f} |

Bound: lease_ttl_s (8) + reaper_interval_s (2) after the last renewal; the broker's
visibility timeout plays no part.
""",
        {"median_s": statistics.median(recoveries), "lost_in_flight": statistics.fmean(wasted)},
    )


if __name__ == "__main__":
    main()
