"""What hostile input costs docpipe: each file of the hostile corpus in a real worker's pool
process, and hostile requests against the API while its probes are timed.

1. The corpus (docpipe_dev.hostile.corpus, one generator per attack). Each file is uploaded
   through the API and read by one interactive worker (prefork, concurrency 1); a file the
   API refuses at upload ends there. Per file: the kind it ended with, the seconds from its
   upload to the end of its extract_text step, the pool process' peak RSS (VmHWM, reset
   before each file) and the largest RSS sampled (every 0.1 s) of the processes beside it
   (the PDF reader, Tesseract). Every pool peak is held to ``--bound-mib`` (300).
2. The API under hostile requests: two batch bodies of 2.9 M tiny documents (32 MB each),
   four zips listing 700,000 members, eight review decisions of about 1 MB and 40 parallel
   requests for a page that takes minutes to render, all at once, while /healthz and
   /readyz are asked every 20 ms at the probes' port (DOCPIPE_PROBE_PORT: what the chart's
   kubelet asks) and, beside them, at the API's own port. The probes' latency (p50, p99,
   max; both, then each) at rest and under the load, with the machine's load average;
   each probe's cost in the app itself, at rest (bench.asgi_probes: through the ASGI app,
   no HTTP); the probes while each kind of hostile request runs alone (which of them they
   wait behind); what each hostile request was answered, and the API's peak RSS.

    python -m bench.hostile [--bound-mib 300] [--only corpus|api] [--pool prefork|threads]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.asgi_probes import probes_in_process
from bench.harness import REPORTS, Bench, bench_stack, percentile, wait_for, write_report
from docpipe.cli.client import ApiError
from docpipe.settings import Settings
from docpipe_dev.big_requests import (
    Answer,
    peak_rss_bytes,
    post_in_chunks,
    reset_peak_rss,
    rss_bytes,
)
from docpipe_dev.hostile import pdf, zips
from docpipe_dev.hostile.corpus import CORPUS, HostileFile
from docpipe_dev.hostile.requests import (
    big_decision,
    many_tiny_documents,
    many_tiny_documents_length,
)
from docpipe_dev.localstack import free_port

MIB = 1024 * 1024
_SAMPLE_S = 0.1
_PROBE_EVERY_S = 0.02


def _children(pid: int) -> list[int]:
    """Live direct children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _rss(pid: int) -> int:
    try:
        return rss_bytes(pid)
    except (OSError, RuntimeError):
        return 0  # it ended between looks


class _Sampler:
    """The largest RSS of a pool process' own children (the PDF reader, Tesseract), sampled
    in a thread until stopped."""

    def __init__(self, pool: int) -> None:
        self.pool = pool
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            for child in _children(self.pool):
                self.largest = max(self.largest, _rss(child))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.largest


def _kind_of(error: str | None) -> str | None:
    return None if not error else error.split(":", 1)[0]


def _one_file(bench: Bench, api: httpx.Client, hostile: HostileFile, pool: int) -> dict[str, Any]:
    data = hostile.make()
    document_id = f"hostile-{hostile.name}"
    reset_peak_rss(pool)
    sampler = _Sampler(pool)
    started = time.monotonic()
    stored = api.put(f"/documents/{document_id}", content=data)
    result: dict[str, Any] = {"file": hostile.name, "bytes": len(data), "expected": hostile.kind}
    if stored.status_code != 201:
        detail = stored.json().get("detail", "")
        result |= {"stage": f"upload {stored.status_code}", "kind": _upload_kind(detail)}
    else:
        run_id = api.post(f"/documents/{document_id}/extract").json()["run_id"]

        def extracted() -> dict[str, Any] | None:
            # Read (its text step done), or ended (a failed step ends its run just after).
            run = bench.client.run(run_id)
            ended = run["status"] not in ("queued", "running")
            return run if run["steps"][0]["status"] == "done" or ended else None

        run = wait_for(extracted, timeout_s=600, every_s=0.1)
        result |= {"stage": "worker", "kind": _kind_of(run.get("error"))}
        if run["status"] in ("queued", "running"):
            try:
                bench.client.cancel(run_id)  # the model's steps are not what is measured
            except ApiError as refused:
                if refused.status != 409:  # it ended meanwhile
                    raise
    result["seconds"] = round(time.monotonic() - started, 2)
    result["beside_mib"] = round(sampler.stop() / MIB, 1)
    result["pool_peak_mib"] = round(peak_rss_bytes(pool) / MIB, 1)
    return result


def _upload_kind(detail: str) -> str | None:
    """The kind an upload's 422 names ("the DOCX cannot be read: decompression_bomb: ...")."""
    _, _, rest = detail.partition("cannot be read: ")
    return rest.split(":", 1)[0] or None


def corpus(bound_mib: float, pool_kind: str = "prefork") -> dict[str, Any]:
    rows = []
    with bench_stack(
        interactive_concurrency=1,
        batch_concurrency=1,
        latency_ms="0:0",
        interactive_pool=pool_kind,
    ) as bench:
        worker = bench.stack.process("worker-interactive")
        headers = {"Authorization": f"Bearer {bench.stack.api_key}"}
        with httpx.Client(base_url=bench.stack.api_url, headers=headers, timeout=600) as api:
            for hostile in CORPUS:
                if pool_kind == "threads":
                    pool = worker.pid  # the step runs in the worker's own process
                else:
                    [pool] = _children(worker.pid)  # concurrency 1; a recycled one is new here
                row = _one_file(bench, api, hostile, pool)
                as_documented = row["kind"] == hostile.kind or (
                    hostile.or_kind is not None and row["kind"] == hostile.or_kind
                )
                row["ok"] = as_documented and row["pool_peak_mib"] <= bound_mib
                rows.append(row)
                print(
                    f"{row['file']:28} {row['stage']:11} {row['kind'] or 'read'!s:18} "
                    f"{row['seconds']:7.2f} s  pool {row['pool_peak_mib']:6.1f} MiB  "
                    f"beside {row['beside_mib']:6.1f} MiB  {'ok' if row['ok'] else 'OFF'}"
                )
    return {
        "pool": pool_kind,
        "bound_mib": bound_mib,
        "files": rows,
        "all_within": all(r["ok"] for r in rows),
        "count": len(rows),
        "as_documented": sum(r["ok"] for r in rows),
        "largest_pool_peak_mib": max(r["pool_peak_mib"] for r in rows),
        "slowest_s": max(r["seconds"] for r in rows),
        "largest_beside_mib": max(r["beside_mib"] for r in rows),
    }


class _Probes:
    """/healthz and /readyz, one after the other every 20 ms, each answer timed."""

    def __init__(self, url: str) -> None:
        self.latencies: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
        self.failures = 0
        self._load_1m = 0.0
        self._url = url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Probes:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._load_1m = os.getloadavg()[0]  # when they ended, not when figures are asked

    def _run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=10) as client:
            while not self._stop.wait(_PROBE_EVERY_S):
                for path, seconds in self.latencies.items():
                    started = time.perf_counter()
                    try:
                        ok = client.get(path).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    seconds.append(time.perf_counter() - started)
                    self.failures += not ok

    def figures(self) -> dict[str, Any]:
        """Both probes' latencies together, then each probe's (where a probe's time goes);
        and the machine's load average (1 min) when they ended: the probes share its cores."""
        every = [s for path in self.latencies.values() for s in path]
        return {
            "probes": len(every),
            "failures": self.failures,
            **_latencies(every),
            "by_path": {path: _latencies(seconds) for path, seconds in self.latencies.items()},
            "load_1m": round(self._load_1m, 1),
        }


def _answered(url: str) -> bool:
    """200 from ``url`` (False while nothing listens there yet)."""
    try:
        return httpx.get(url, timeout=10).status_code == 200
    except httpx.TransportError:
        return False


def _latencies(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(seconds, 50) * 1000, 1),
        "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
    }


_BATCH = "batch of 2.9 M tiny documents"
_ZIP = "zip listing 700,000 members"
_DECISION = "1 MB review decision"
_PAGE = "page image slow to render"


def _hostile_requests(
    url: str, headers: dict[str, str], only: str | None = None
) -> list[tuple[str, int]]:
    """Every hostile request at once (or those of one kind, ``only``: its ``what``);
    (what, status) of each."""
    bearer = {"Authorization": headers["Authorization"]}
    members = zips.many_members(700_000)
    decision = big_decision()

    def batch() -> tuple[str, int]:
        answer: Answer = post_in_chunks(
            url,
            "/batches",
            many_tiny_documents(),
            headers=bearer,
            content_length=many_tiny_documents_length(),
            timeout_s=300,
        )
        return _BATCH, answer.status

    def upload(client: httpx.Client) -> tuple[str, int]:
        return _ZIP, client.put(
            f"/documents/members-{uuid.uuid4().hex[:8]}", content=members
        ).status_code

    def decide(client: httpx.Client) -> tuple[str, int]:
        answer = client.post(
            f"/runs/{uuid.uuid4()}/review",
            content=decision,
            headers={"Content-Type": "application/json"},
        )
        return _DECISION, answer.status_code

    def page(client: httpx.Client) -> tuple[str, int]:
        return _PAGE, client.get("/documents/slow/pages/1").status_code

    with (
        httpx.Client(base_url=url, headers=headers, timeout=300) as client,
        ThreadPoolExecutor(60) as pool,
    ):
        kinds: list[tuple[str, int, Callable[[], tuple[str, int]]]] = [
            (_BATCH, 2, batch),
            (_ZIP, 4, lambda: upload(client)),
            (_DECISION, 8, lambda: decide(client)),
            (_PAGE, 40, lambda: page(client)),
        ]
        calls = [call for what, n, call in kinds if only in (None, what) for _ in range(n)]
        return list(pool.map(lambda call: call(), calls))


def api(idle_s: float) -> dict[str, Any]:
    probe_port = free_port()
    probe_env = {"DOCPIPE_PROBE_PORT": str(probe_port), "DOCPIPE_PROBE_HOST": "127.0.0.1"}
    with bench_stack(
        env=probe_env, interactive_concurrency=1, batch_concurrency=1, latency_ms="0:0"
    ) as bench:
        headers = {"Authorization": f"Bearer {bench.stack.api_key}"}
        url = bench.stack.api_url
        probe_url = f"http://127.0.0.1:{probe_port}"
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            assert client.put("/documents/slow", content=pdf.slow_to_render()).status_code == 201
            run_id = client.post("/documents/slow/extract").json()["run_id"]
        wait_for(lambda: bench.client.run(run_id)["steps"][0]["status"] == "done", timeout_s=300)
        bench.client.cancel(run_id)
        server = bench.stack.process("api").pid
        wait_for(lambda: _answered(f"{probe_url}/readyz"), timeout_s=30)
        with _Probes(probe_url) as at_rest, _Probes(url) as own_at_rest:
            time.sleep(idle_s)
        in_process = probes_in_process(
            Settings(
                database_url=bench.database_url,
                redis_url=bench.stack.env["DOCPIPE_REDIS_URL"],
                metrics_port=0,
                probe_port=0,  # the stack's API has the probes' port
            )
        )
        reset_peak_rss(server)
        rest_mib = rss_bytes(server) / MIB
        with _Probes(probe_url) as loaded, _Probes(url) as own_loaded:
            started = time.monotonic()
            answers = _hostile_requests(url, headers)
            seconds = time.monotonic() - started
        peak_mib = peak_rss_bytes(server) / MIB
        # Then each kind alone: which of them the probes wait behind.
        alone = {}
        for what in (_BATCH, _ZIP, _DECISION, _PAGE):
            with _Probes(probe_url) as probes, _Probes(url) as own:
                began = time.monotonic()
                _hostile_requests(url, headers, only=what)
                alone[what] = {
                    "seconds": round(time.monotonic() - began, 1),
                    **probes.figures(),
                    "api_port": own.figures(),
                }
    statuses: dict[str, Counter[int]] = {}
    for what, status in answers:
        statuses.setdefault(what, Counter())[status] += 1
    return {
        "at_rest": at_rest.figures(),
        "in_process": in_process,
        "under_load": loaded.figures(),
        "api_port_at_rest": own_at_rest.figures(),
        "api_port_under_load": own_loaded.figures(),
        "load_seconds": round(seconds, 1),
        "alone": alone,
        "answers": {what: dict(counts) for what, counts in statuses.items()},
        "api_rss_at_rest_mib": round(rest_mib, 1),
        "api_peak_rss_mib": round(peak_mib, 1),
    }


def _corpus_table(result: dict[str, Any]) -> str:
    lines = [
        "| file | attack | ends as | where | seconds | pool peak RSS | beside it | within |",
        "|---|---|---|---|---|---|---|---|",
    ]
    attacks = {f.name: f.attack for f in CORPUS}
    for row in result["files"]:
        lines.append(
            f"| {row['file']} | {attacks[row['file']]} | {row['kind'] or 'read'} | "
            f"{row['stage']} | {row['seconds']} | {row['pool_peak_mib']} MiB | "
            f"{row['beside_mib']} MiB | {'yes' if row['ok'] else '**no**'} |"
        )
    return "\n".join(lines)


def _api_table(result: dict[str, Any]) -> str:
    rest, load = result["at_rest"], result["under_load"]
    lines = [
        "| probes (/healthz, /readyz) | answered | failed | p50 | p99 | max | load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("at rest, probes' port", rest),
        (f"under the hostile requests ({result['load_seconds']} s), probes' port", load),
    ]
    if "api_port_at_rest" in result:
        rows += [
            ("at rest, API's port", result["api_port_at_rest"]),
            ("under the hostile requests, API's port", result["api_port_under_load"]),
        ]
    for name, probes in rows:
        lines.append(
            f"| {name} | {probes['probes']} | {probes['failures']} | {probes['p50_ms']} ms | "
            f"{probes['p99_ms']} ms | {probes['max_ms']} ms | {probes.get('load_1m', '')} |"
        )
        for path, each in probes.get("by_path", {}).items():
            lines.append(
                f"| ... {path} | | | {each['p50_ms']} ms | {each['p99_ms']} ms | "
                f"{each['max_ms']} ms | |"
            )
    if own := result.get("in_process"):
        lines += [
            "",
            f"In the API's process, through its whole ASGI app without HTTP ({own['calls']} "
            f"calls each, one at a time, at rest; load {own['load_1m']}): what a probe costs "
            "the app itself.",
            "",
            "| probe in process | p50 | p99 | max |",
            "|---|---|---|---|",
        ]
        for path, each in own["by_path"].items():
            lines.append(
                f"| {path} | {each['p50_ms']} ms | {each['p99_ms']} ms | {each['max_ms']} ms |"
            )
    if alone := result.get("alone"):
        lines += [
            "",
            "Each kind of hostile request alone, the probes asked meanwhile: which of them the "
            "probes wait behind.",
            "",
            "| alone | seconds | probes | p50 | p99 (/healthz, /readyz) | max | API's port: "
            "p99 (max) | load (1 min) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for what, each in alone.items():
            paths = each["by_path"]
            own = each.get("api_port", {})
            lines.append(
                f"| {what} | {each['seconds']} | {each['probes']} | {each['p50_ms']} ms | "
                f"{each['p99_ms']} ms ({paths['/healthz']['p99_ms']}, "
                f"{paths['/readyz']['p99_ms']}) | {each['max_ms']} ms | "
                f"{own.get('p99_ms', '')} ms ({own.get('max_ms', '')} ms) | {each['load_1m']} |"
            )
    lines += [
        "",
        "| hostile request | answers |",
        "|---|---|",
    ]
    for what, counts in result["answers"].items():
        shown = ", ".join(f"{n} x {status}" for status, n in sorted(counts.items()))
        lines.append(f"| {what} | {shown} |")
    return "\n".join(lines)


def _corpus_section(result: dict[str, Any]) -> list[str]:
    within = "within it, ending" if result["all_within"] else "NOT all within it, nor all ending"
    if result.get("pool", "prefork") == "threads":
        head = [
            "## The hostile corpus in a threads worker",
            "",
            "`python -m bench.hostile --only corpus --pool threads`: the same files read by a "
            "worker of the threads pool (one slot), whose own process runs the step: its peak "
            "RSS is the figure, the worker's Celery machinery included (a prefork pool process "
            f"holds less of it). Bound: {result['bound_mib']:g} MiB; every file {within} as "
            "documented.",
        ]
    else:
        head = [
            "## The hostile corpus in a worker's pool process",
            "",
            "`python -m bench.hostile --only corpus`: each file of "
            "`docpipe_dev.hostile.corpus` uploaded through the API and read by one worker "
            f"(prefork, concurrency 1). Bound: {result['bound_mib']:g} MiB of peak RSS in the "
            f'pool process; every file {within} as documented. "Beside it": the largest RSS '
            "sampled of the pool process' own children (the process that reads a PDF, "
            "Tesseract), which die with their page.",
        ]
    return [*head, "", _corpus_table(result), ""]


def _api_section(result: dict[str, Any]) -> list[str]:
    return [
        "## The API under hostile requests",
        "",
        "`python -m bench.hostile --only api`: every hostile request at once while the "
        "probes are asked every 20 ms, at the probes' port (DOCPIPE_PROBE_PORT: a process of "
        "their own, fed by the API's event loop's heartbeat; what the chart's kubelet asks) "
        "and beside them at the API's own port (one connection each). API RSS: "
        f"{result['api_rss_at_rest_mib']} MiB before, peak {result['api_peak_rss_mib']} "
        "MiB under the load (the chart's limit: 512Mi).",
        "",
        _api_table(result),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound-mib", type=float, default=300)
    parser.add_argument("--only", choices=("corpus", "api"))
    parser.add_argument(
        "--pool", choices=("prefork", "threads"), default="prefork", help="the corpus' worker"
    )
    parser.add_argument("--idle-s", type=float, default=10, help="probes at rest, before")
    args = parser.parse_args()
    # A part not run this time keeps its last figures (the report shows both parts).
    figures: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        figures = dict(json.loads((REPORTS / "hostile.json").read_text())["figures"])
    if args.only in (None, "corpus"):
        key = "corpus" if args.pool == "prefork" else "corpus_threads"
        figures[key] = corpus(args.bound_mib, args.pool)
    if args.only in (None, "api"):
        figures["api"] = api(args.idle_s)
        print(_api_table(figures["api"]))
    sections = ["# What hostile input costs", ""]
    for key in ("corpus", "corpus_threads"):
        if key in figures:
            sections += _corpus_section(figures[key])
    if "api" in figures:
        sections += _api_section(figures["api"])
    path = write_report("hostile", "\n".join(sections), figures)
    print(f"report: {path}")


if __name__ == "__main__":
    main()
