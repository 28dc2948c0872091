"""Where a batch worker's CPU goes: py-spy over its pool processes.

A batch of --docs documents runs through a fresh stack (fake provider at --latency-ms,
0 by default) while py-spy samples the batch worker and its pool processes. Writes the
flame graph (docs/benchmarks/profile.svg, or --svg) and prints the costliest frames, own and
inclusive. With ``--pool threads --concurrency 200 --latency-ms 2000`` it profiles the
threads pool with hundreds of steps in flight (bench/in_flight.py's load).

    python -m bench.profile_hot_path [--docs 200] [--concurrency 4] [--pool prefork]
        [--latency-ms 0] [--rate 100] [--idle] [--svg PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.harness import REPORTS, ROOT, bench_stack, wait_for
from bench.in_flight import LIMITS, WIDE_PROVIDER
from bench.procstat import cpu_seconds, tree_pids
from bench.systems import documents


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    return found


def frame_shares(path: Path) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(self, inclusive) share of samples per function in a collapsed-stack file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue  # a frame name with a line break in it (a process title) split this line
        n = int(count)
        total += n
        # "function (path/file.py:line)" -> "function (path/file.py)"
        frames = [f.rsplit(":", 1)[0] + ")" if ".py:" in f else f for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    shares = [(f, n / total) for f, n in own.most_common()]
    return shares, [(f, n / total) for f, n in inclusive.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--pool", choices=("prefork", "threads"), default="prefork")
    parser.add_argument("--latency-ms", type=int, default=0, help="every provider call's")
    parser.add_argument("--idle", action="store_true", help="wall clock: count waiting too")
    parser.add_argument("--svg", type=Path, default=REPORTS / "profile.svg")
    args = parser.parse_args()
    docs = documents(args.docs, prefix="profile")
    out = Path(tempfile.mkdtemp(prefix="docpipe-profile-"))
    with bench_stack(
        # Room for a step of seconds-long calls (bench/in_flight.py's limits), and a provider
        # bound wide enough that the slots bind.
        env=LIMITS | WIDE_PROVIDER,
        batch_concurrency=args.concurrency,
        batch_pool=args.pool,
        interactive_concurrency=1,
        latency_ms=f"{args.latency_ms}:{args.latency_ms}",
    ) as bench:
        worker = bench.stack.process("worker-batch")
        # On CPU is sampled as "holds the GIL": py-spy's own idle detection counts a thread
        # blocked in a socket read or a condition wait as running in some containers.
        record = [
            py_spy(),
            "record",
            "--pid",
            str(worker.pid),
            "--subprocesses",
            "--nonblocking",
            "--rate",
            str(args.rate),
            "--idle" if args.idle else "--gil",
        ]
        # Warm up first: pool processes connect and import lazily on their first tasks.
        bench.client.submit_batch([{"id": f"warm-{i}", "text": t} for i, t in docs[:8]])
        wait_for(
            lambda: bench.scalar("SELECT count(*) FROM pipeline_run WHERE status = 'done'") >= 8,
            timeout_s=300,
        )
        raw = subprocess.Popen([*record, "--format", "raw", "-o", str(out / "profile.txt")])
        svg = subprocess.Popen([*record, "-o", str(args.svg)])
        time.sleep(1)
        cpu_before = cpu_seconds(tree_pids(worker.pid))
        started = time.monotonic()
        bench.client.submit_batch([{"id": i, "text": t} for i, t in docs])
        wait_for(
            lambda: (
                bench.scalar("SELECT count(*) FROM pipeline_run WHERE status = 'done'")
                >= len(docs) + 8
            ),
            timeout_s=1800,
        )
        elapsed = time.monotonic() - started
        worker_cpu = cpu_seconds(tree_pids(worker.pid)) - cpu_before
        for proc in (raw, svg):
            proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
            proc.wait(60)
    _drop_machine_paths(args.svg)
    print(
        f"{args.docs} documents in {elapsed:.1f}s ({args.docs / elapsed:.1f}/s), batch worker "
        f"CPU {1000 * worker_cpu / (3 * args.docs):.1f} ms per step (py-spy's sampling "
        f"included), load average {os.getloadavg()[1]:.1f}"
    )
    own, inclusive = frame_shares(out / "profile.txt")
    mode = "wall clock" if args.idle else "on CPU, holding the GIL"
    print(f"top functions by own samples ({mode}):")
    for frame, share in own[:25]:
        print(f"  {share:6.1%}  {frame}")
    print(f"docpipe's functions, inclusive ({mode}):")
    for frame, share in [(f, x) for f, x in inclusive if "docpipe/" in f][:30]:
        print(f"  {share:6.1%}  {frame}")
    print(f"flame graph: {args.svg}; collapsed stacks: {out / 'profile.txt'}")


def _drop_machine_paths(svg: Path) -> None:
    """The flame graph is committed: its process titles and py-spy's own command line name
    files relative to the project, not where this machine keeps it."""
    svg.write_text(svg.read_text(encoding="utf-8").replace(f"{ROOT}/", ""), encoding="utf-8")


if __name__ == "__main__":
    main()
