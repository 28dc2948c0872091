"""Fair admission: tenant B's 10 documents while tenant A's 500 are being processed.

Measures how long B's batch takes alone, then how long it takes when submitted after A's
500-document batch is already running; the ratio is the fairness figure (target <= 1.5).

    python -m bench.fairness [--big 500] [--small 10]
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime

from bench.harness import Bench, bench_stack, wait_for, write_report
from docpipe.cli.client import DocpipeClient
from docpipe.state.db import Database
from docpipe.state.tenants import create_api_key
from docpipe_dev.samples import sample_contracts


def tenant_client(bench: Bench, tenant: str) -> DocpipeClient:
    db = Database(bench.database_url)
    try:
        key = create_api_key(db, tenant, "fairness bench").plaintext
    finally:
        db.close()
    return DocpipeClient(bench.stack.api_url, api_key=key, timeout_s=600)


def batch_seconds(client: DocpipeClient, batch_id: str) -> float:
    """Batch creation to batch end, from the server's own timestamps."""
    status = wait_for(
        lambda: (s := client.batch(batch_id))["status"] != "running" and s,
        timeout_s=1800,
        every_s=0.2,
    )
    created = datetime.fromisoformat(status["created_at"])
    return (datetime.fromisoformat(status["finished_at"]) - created).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big", type=int, default=500)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--latency-ms", default="100:300")
    parser.add_argument("--window", type=int, default=4, help="= the batch workers' concurrency")
    args = parser.parse_args()
    contracts = sample_contracts(args.big + args.small)
    small_docs = [{"id": f"b{i}", "text": c.text} for i, c in enumerate(contracts[: args.small])]
    env = {"DOCPIPE_BATCH_ADMISSION_WINDOW": str(args.window)}
    with bench_stack(env=env, batch_concurrency=4, latency_ms=args.latency_ms) as bench:
        tenant_a, tenant_b = tenant_client(bench, "tenant-a"), tenant_client(bench, "tenant-b")
        alone_id = tenant_b.submit_batch(small_docs, idempotency_key="alone")["batch_id"]
        alone = batch_seconds(tenant_b, alone_id)
        print(f"B alone: {alone:.1f}s")

        big = tenant_a.submit_batch(
            [{"id": f"a{i}", "text": c.text} for i, c in enumerate(contracts[args.small :])]
        )["batch_id"]
        wait_for(lambda: tenant_a.batch(big)["runs_by_status"].get("done", 0) >= 16)
        a_done_before = tenant_a.batch(big)["runs_by_status"].get("done", 0)
        contended_id = tenant_b.submit_batch(small_docs, idempotency_key="contended")["batch_id"]
        contended = batch_seconds(tenant_b, contended_id)
        a_done_during = tenant_a.batch(big)["runs_by_status"].get("done", 0) - a_done_before
        print(
            f"B behind A's {args.big}: {contended:.1f}s (A finished {a_done_during} runs "
            f"meanwhile) -> ratio {contended / alone:.2f}"
        )
        tenant_a.cancel_batch(big)
        time.sleep(1)
        for client in (tenant_a, tenant_b):
            client.close()
    write_report(
        "fairness",
        f"""# Fair admission across tenants

`python -m bench.fairness --big {args.big} --small {args.small}`: 4 batch worker processes,
admission window {args.window}, fake provider at {args.latency_ms} ms per call. Tenant B submits
{args.small} documents alone; later tenant A submits {args.big}, and once A's batch is
running B submits the same {args.small} again.

| measure | value |
|---|---|
| B's batch alone | {alone:.1f} s |
| B's batch while A's {args.big} run | {contended:.1f} s |
| **ratio** | **{contended / alone:.2f}** (target <= 1.5) |
| A's runs finished meanwhile | {a_done_during} |

Admission gives each freed slot to the tenant served least recently (then the batch served
least), so B's documents enter as soon as A's runs in flight finish; A is not starved, it
continues with every slot B does not need.
""",
        {"ratio": contended / alone, "alone_s": alone, "contended_s": contended},
    )


if __name__ == "__main__":
    main()
