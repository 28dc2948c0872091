"""What the provider-batch lane saves and what it costs: the same documents through real
time and through provider batches, on one stack against the fake provider.

Two batches of --docs documents, one after the other: first in real time (the batch lane,
the provider answering in --latency-ms), then with ``"provider_batch": true``, the fake
provider's batch interface completing each provider batch in --completion-s (a real
provider's window is up to 24 hours: here it is simulated short). For each:

- the cost per 1,000 documents, as docpipe recorded it (GET /batches/{id}: cost_so_far_usd),
  and what the provider billed (its counters, real time and batch apart);
- the time to done: the batch's creation to its last run's end;
- the database and Redis work per provider call (per waiting call in the provider-batch
  lane: each call that waited in provider_batch_call), counted by the servers over the
  batch: PostgreSQL transactions and rows written (pg_stat_database), Redis commands
  (INFO commandstats). Everything the stack did meanwhile is included (beat's periodic
  jobs, this script's rare polls): a provider batch's wait is long, and what the stack
  does while it waits is part of its price;
- whether the lane gives the same values: each document's step outputs against the same
  document's in real time.

Then what the lane's waits cost everyone else (bench.provider_batch_waits): a third batch of
--parked-docs documents through the lane, and meanwhile --interactive single documents in
the interactive lane, one at a time, once the lane's calls are parked; their median time
to done against the same documents' before any batch ran (at rest). The whole third batch
long, a sampler reads how long a step has been `running` since its first call began to
wait for a provider batch: a wait is parked in PostgreSQL, not held by a worker, so this
stays the time to record a round's calls. (A third batch: the sampler's and the interactive
runs' work would be counted in the second's.)

    python -m bench.provider_batches [--docs 200] [--completion-s 20] [--parked-docs 50]
        [--interactive 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from decimal import Decimal
from typing import Any

import httpx
import redis

from bench.harness import Bench, bench_stack, wait_for, write_report
from bench.provider_batch_waits import interactive_times, same_values, while_parked
from bench.rate_limit_cases import provider
from bench.systems import documents
from docpipe.settings.providers import DEFAULT_PRICES

# Beat packs every second, a provider batch once 100 calls wait or the oldest waited 5 s.
LANE_SETTINGS = {
    "DOCPIPE_PROVIDER_BATCH_INTERVAL_S": "1",
    "DOCPIPE_PROVIDER_BATCH_MIN_CALLS": "100",
    "DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S": "5",
}


def _providers(url: str) -> str:
    """The fake provider with its OpenAI batch interface (half price), docpipe's prices."""
    models = {
        name: {"input_per_mtok": str(p.input_per_mtok), "output_per_mtok": str(p.output_per_mtok)}
        for name, p in DEFAULT_PRICES.items()
    }
    batch = {"completion_window": "24h", "discount": "0.5"}
    return json.dumps([{"name": "fake", "base_url": url + "/v1", "models": models, "batch": batch}])


def _counters(bench: Bench) -> dict[str, int]:
    """What PostgreSQL and Redis have done so far (a backend reports at most once a second:
    the last second's may be missing)."""
    row = bench.sql(
        "SELECT xact_commit + xact_rollback AS postgres_transactions,"
        " tup_inserted + tup_updated + tup_deleted AS postgres_rows_written"
        " FROM pg_stat_database WHERE datname = current_database()"
    )[0]
    with redis.Redis.from_url(bench.stack.env["DOCPIPE_REDIS_URL"]) as client:
        info = client.info("stats")
    return {
        **{k: int(v) for k, v in row.items()},
        "redis_commands": int(info["total_commands_processed"]),
    }


def _submit(bench: Bench, docs: list[tuple[str, str]], lane: str, label: str) -> str:
    """A batch of ``docs`` through ``lane`` (realtime or provider_batch), each document's id
    prefixed with ``label``: its id."""
    options: dict[str, Any] = {"provider_batch": True} if lane == "provider_batch" else {}
    items = [{"id": f"{label}-{i}", "text": t} for i, t in docs]
    return str(bench.client.submit_batch(items, **options)["batch_id"])


def _wait_done(bench: Bench, batch_id: str) -> None:
    wait_for(
        lambda: bench.client.batch(batch_id)["status"] != "running", timeout_s=3600, every_s=2.0
    )


def _run(
    bench: Bench, fake: httpx.Client, docs: list[tuple[str, str]], lane: str
) -> dict[str, Any]:
    """One batch of ``docs`` through ``lane`` (realtime or provider_batch), measured."""
    before = _counters(bench)
    billed_before = fake.get("/control/batches").json()["billing"]
    realtime_before = fake.get("/control/stats").json()
    batch_id = _submit(bench, docs, lane, lane)
    _wait_done(bench, batch_id)
    status = bench.client.batch(batch_id)
    counted = {k: v - before[k] for k, v in _counters(bench).items()}
    billed = fake.get("/control/batches").json()["billing"]
    realtime = fake.get("/control/stats").json()
    calls = bench.scalar(
        "SELECT count(*) FROM llm_call_log c JOIN pipeline_run r ON r.id = c.run_id"
        " WHERE r.batch_id = %s AND c.status = 'ok'",
        batch_id,
    )
    waiting = bench.scalar(
        "SELECT count(*) FROM provider_batch_call c JOIN pipeline_run r ON r.id = c.run_id"
        " WHERE r.batch_id = %s",
        batch_id,
    )
    provider_batches = bench.sql(
        "SELECT count(*) AS batches, coalesce(avg(requests), 0) AS mean_requests"
        " FROM provider_batch WHERE id IN (SELECT DISTINCT provider_batch_id"
        " FROM provider_batch_call c JOIN pipeline_run r ON r.id = c.run_id"
        " WHERE r.batch_id = %s)",
        batch_id,
    )[0]
    elapsed_s = float(
        bench.scalar(
            "SELECT extract(epoch FROM max(r.finished_at) - b.created_at) FROM pipeline_run r"
            " JOIN batch b ON b.id = r.batch_id WHERE b.id = %s GROUP BY b.created_at",
            batch_id,
        )
    )
    per = waiting if lane == "provider_batch" else calls
    return {
        "batch_id": batch_id,
        "status": status["status"],
        "runs_by_status": status["runs_by_status"],
        "cost_usd": float(status["cost_so_far_usd"]),
        "cost_per_1000_docs_usd": float(status["cost_so_far_usd"]) * 1000 / len(docs),
        "realtime_cost_usd": status.get("realtime_cost_usd"),
        "billed_batch_usd": float(
            Decimal(str(billed["batch"]["usd"])) - Decimal(str(billed_before["batch"]["usd"]))
        ),
        "billed_batch_requests": billed["batch"]["requests"] - billed_before["batch"]["requests"],
        "realtime_requests": realtime["requests_total"] - realtime_before["requests_total"],
        "answered_calls": int(calls),
        "waiting_calls": int(waiting),
        "provider_batches": int(provider_batches["batches"]),
        "mean_requests_per_provider_batch": float(provider_batches["mean_requests"]),
        "time_to_done_s": elapsed_s,
        "counted": counted,
        "per_call": {k: v / max(1, per) for k, v in counted.items()},
    }


def _seconds(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.1f}" for v in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--completion-s", type=float, default=20.0)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--parked-docs", type=int, default=50)
    parser.add_argument("--interactive", type=int, default=10)
    args = parser.parse_args()
    ms = f"{args.latency_ms}:{args.latency_ms}"
    docs = documents(args.docs, "provider-batches")
    interactive = documents(args.interactive + 1, "interactive-")
    load_at_start = os.getloadavg()
    with provider(latency_ms=ms) as url:
        fake = httpx.Client(base_url=url, timeout=30)
        fake.post("/control/config", json={"batch_completion_s": args.completion_s})
        env = {
            "DOCPIPE_LLM_BASE_URL": url + "/v1",
            "DOCPIPE_PROVIDERS": _providers(url),
            **LANE_SETTINGS,
        }
        with bench_stack(env=env, batch_concurrency=args.concurrency, latency_ms=ms) as bench:
            for doc, text in interactive:
                bench.client.put_document(doc, text)
            # The first interactive document warms the stack up (worker processes'
            # connections, the API's caches) and is not timed.
            warm, *timed = [doc for doc, _ in interactive]
            interactive_times(bench, [warm], "warm-up")
            at_rest = interactive_times(bench, timed, "at-rest")
            realtime = _run(bench, fake, docs, "realtime")
            lane = _run(bench, fake, docs, "provider_batch")
            parked = while_parked(
                bench,
                lambda: _submit(bench, docs[: args.parked_docs], "provider_batch", "parked"),
                lambda batch_id: _wait_done(bench, batch_id),
                timed,
                parked_at_least=min(10, args.parked_docs),
            )
            equal = same_values(
                bench, (realtime["batch_id"], "realtime"), (lane["batch_id"], "provider_batch")
            )
            equal_parked = same_values(
                bench, (realtime["batch_id"], "realtime"), (parked["batch_id"], "parked")
            )
            parked_status = bench.client.batch(parked["batch_id"])
        fake.close()
    load_average = os.getloadavg()
    for name, figures in (("real time", realtime), ("provider batch", lane)):
        if figures["status"] != "done":
            raise SystemExit(f"{name}: the batch ended {figures['runs_by_status']}")
    if parked_status["status"] != "done":
        raise SystemExit(f"the third batch ended {parked_status['runs_by_status']}")
    figures = {
        "docs": args.docs,
        "completion_s": args.completion_s,
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "realtime": realtime,
        "provider_batch": lane,
        "cost_ratio": lane["cost_usd"] / realtime["cost_usd"],
        "same_values": equal,
        "parked_docs": args.parked_docs,
        "same_values_parked": equal_parked,
        "interactive_at_rest_s": at_rest,
        "interactive_at_rest_median_s": statistics.median(at_rest),
        "while_parked": parked,
        "interactive_ratio": parked["interactive_median_s"] / statistics.median(at_rest),
        "load_average_at_start": load_at_start,
        "load_average": load_average,
    }
    r, p = realtime, lane
    rows = [
        ("cost per 1,000 documents (docpipe's record)", "${:.4f}", "cost_per_1000_docs_usd"),
        ("time to done, s", "{:.1f}", "time_to_done_s"),
        ("provider calls answered and used", "{}", "answered_calls"),
        ("provider requests billed in real time", "{}", "realtime_requests"),
        ("provider requests billed in batches", "{}", "billed_batch_requests"),
        ("provider batches", "{}", "provider_batches"),
        ("mean requests per provider batch", "{:.1f}", "mean_requests_per_provider_batch"),
    ]
    table = "\n".join(
        f"| {what} | {fmt.format(r[key])} | {fmt.format(p[key])} |" for what, fmt, key in rows
    )
    work = "\n".join(
        f"| {what} | {r['per_call'][key]:.2f} | {p['per_call'][key]:.2f} |"
        for what, key in (
            ("PostgreSQL transactions", "postgres_transactions"),
            ("PostgreSQL rows written", "postgres_rows_written"),
            ("Redis commands", "redis_commands"),
        )
    )
    w, e, ep = parked, equal, equal_parked
    report = f"""# The provider-batch lane against real time

`python -m bench.provider_batches --docs {args.docs} --completion-s {args.completion_s:g}
--latency-ms {args.latency_ms} --concurrency {args.concurrency} --parked-docs
{args.parked_docs} --interactive {args.interactive}`: {args.docs} sample contracts through
the batch lane ({args.concurrency} batch workers), first in real time (the fake provider
answering in {args.latency_ms} ms), then through the provider-batch lane (its OpenAI batch
interface at half price, each provider batch completing in {args.completion_s:g} s: a real
provider's window of up to 24 hours simulated short; beat packing every
{LANE_SETTINGS["DOCPIPE_PROVIDER_BATCH_INTERVAL_S"]} s once
{LANE_SETTINGS["DOCPIPE_PROVIDER_BATCH_MIN_CALLS"]} calls wait or the oldest waited
{LANE_SETTINGS["DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S"]} s). Both batches ended `done`.

| | real time | provider batch |
|---|---|---|
{table}

The provider-batch lane cost **{figures["cost_ratio"]:.3f}x** real time (docpipe's record;
the provider billed ${p["billed_batch_usd"]:.4f} in batches). Its time to done is about the
simulated window times the rounds of calls a document needs (sections, fields, summary),
plus packing: it says how the lane behaves, nothing of real providers, whose windows are
hours.

## The same values

Each document's step outputs through the lane against the same document's through real
time: **{e["documents_equal"]} of {e["documents"]}** documents equal
({e["steps_equal"]} of {e["steps"]} step outputs); in the third batch below,
{ep["documents_equal"]} of {ep["documents"]} ({ep["steps_equal"]} of {ep["steps"]} step
outputs).

## Waits parked, not held

A third batch, of the first {args.parked_docs} documents, through the lane; once
{min(10, args.parked_docs)} of its calls were parked, {args.interactive} documents through
the interactive lane one at a time (run created to done, server timestamps), the same
documents' times before any batch ran beside them (at rest, after one untimed run):

| interactive run, time to done | median (s) | all (s) |
|---|---|---|
| at rest | {figures["interactive_at_rest_median_s"]:.2f} | {_seconds(at_rest)} |
| while the lane's calls are parked | {w["interactive_median_s"]:.2f} | {_seconds(w["interactive_s"])} |
| **ratio** | **{figures["interactive_ratio"]:.2f}** | |

Calls parked meanwhile: {w["parked_calls_during"][0]} to {w["parked_calls_during"][1]}.

The longest a step of the lane stayed `running` after its first call began to wait for a
provider batch: **{w["longest_held_s"] * 1000:.0f} ms**, sampled every
{w["sample_every_s"] * 1000:.0f} ms over the third batch ({w["samples"]} samples, at most
{w["longest_gap_s"] * 1000:.0f} ms apart: a longer hold is seen at least once, so none lasted
beyond {(w["longest_held_s"] + w["longest_gap_s"]) * 1000:.0f} ms). {w["samples_holding"]} samples
caught such a step, at most {w["most_steps_holding"]} at once: the time a step takes to
record its round's calls and hand its slot back; then it waits in PostgreSQL, holding no
worker.

Work of the stores per provider call (real time: per call answered; provider batch: per call
that waited, {p["waiting_calls"]} in all), counted by the servers over each of the first two
batches, the stack's periodic work meanwhile included:

| per call | real time | provider batch |
|---|---|---|
{work}

The machine's load average (1, 5, 15 min): {_load(load_at_start)} at the start,
{_load(load_average)} at the end, on {os.cpu_count()} CPUs, other sessions' work included.
"""
    print(report)
    write_report("provider-batches", report, figures)
    if broken := _broken_promises(figures):
        raise SystemExit("the lane broke its promises: " + "; ".join(broken))


def _broken_promises(figures: dict[str, Any]) -> list[str]:
    """What issue 38 promises of the 200 documents, checked on every run (the report is
    written first, so that a broken run can be read)."""
    lane, broken = figures["provider_batch"], []
    for name, equal in (("lane", figures["same_values"]), ("third", figures["same_values_parked"])):
        if equal["documents_equal"] != equal["documents"]:
            broken.append(f"{name} batch: {equal['documents_equal']} of {equal['documents']} equal")
    if abs(figures["cost_ratio"] - 0.5) > 0.001:
        broken.append(f"cost {figures['cost_ratio']:.4f}x real time, not half")
    if lane["realtime_requests"] or lane["billed_batch_requests"] != lane["answered_calls"]:
        broken.append(
            f"{lane['answered_calls']} answers, {lane['billed_batch_requests']} billed in"
            f" batches and {lane['realtime_requests']} in real time: not each once"
        )
    if lane["mean_requests_per_provider_batch"] < 50:
        broken.append(f"{lane['mean_requests_per_provider_batch']:.1f} calls a provider batch")
    return broken


if __name__ == "__main__":
    main()
