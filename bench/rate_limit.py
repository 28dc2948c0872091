"""Provider-limit utilisation: every batch worker hammering a provider limited to R req/min.

The fake provider enforces R with its own token bucket and answers 429 beyond it; docpipe's
shared limiter is configured with the same R. Measured from the provider's side: achieved
rate after the first 30 s and share of 429s. Then the provider halves its limit for
--squeeze-s seconds (as a provider under load does): its 429s make the adaptive limiter
back off to the new rate, and climb back once the provider allows R again.
Writes docs/benchmarks/rate-limit.png.

    python -m bench.rate_limit [--rpm 600] [--seconds 120] [--burst-at 60] [--squeeze-s 15]
    python -m bench.rate_limit --case tpm [--tpm 300000] [--seconds 120]
    python -m bench.rate_limit --case two-models [--seconds 120]

The ``tpm`` and ``two-models`` cases (bench.rate_limit_cases) write
docs/benchmarks/rate-limit-tpm.md and rate-limit-two-models.md.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx
import redis

from bench.harness import REPORTS, bench_stack, wait_for, write_report
from bench.rate_limit_cases import run_tpm_case, run_two_model_case
from docpipe_dev.samples import sample_contracts

# The one-provider shorthand's requests bucket (docpipe.providers.limiter).
LIMITER_STATE = "docpipe:limiter:{default}:requests"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--burst-at", type=int, default=60)
    parser.add_argument("--squeeze-s", type=int, default=15)
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--case", choices=["rpm", "tpm", "two-models"], default="rpm")
    parser.add_argument("--tpm", type=int, default=300_000)
    args = parser.parse_args()
    if args.case == "tpm":
        report_tpm(run_tpm_case(args.tpm, args.seconds, args.docs), args)
        return
    if args.case == "two-models":
        rpms = {"gpt-4o": 300, "gpt-4o-mini": 600}
        report_two_models(run_two_model_case(rpms, args.seconds, args.docs // 2), args)
        return
    env = {
        "DOCPIPE_PROVIDER_RPM": str(args.rpm),
        "DOCPIPE_PROVIDER_BURST": str(max(1, args.rpm // 120)),
    }
    contracts = sample_contracts(args.docs)
    samples: list[tuple[float, float]] = []  # (seconds since start, allowed req/s)
    with bench_stack(env=env, batch_concurrency=12, latency_ms="50:150", rpm=args.rpm) as bench:
        fake = httpx.Client(base_url=bench.fake_url)
        broker = redis.Redis.from_url(bench.stack.env["DOCPIPE_REDIS_URL"])
        bench.client.submit_batch(
            [{"id": f"d{i}", "text": c.text} for i, c in enumerate(contracts)]
        )
        wait_for(lambda: fake.get("/control/stats").json()["requests_total"] > 0)
        fake.post("/control/reset")  # count from the first call on
        start = time.time()
        by_status_at: dict[int, dict[str, int]] = {}
        squeeze_end = args.burst_at + args.squeeze_s
        phase = "steady"
        while (elapsed := time.time() - start) < args.seconds:
            rate = broker.hget(LIMITER_STATE, "rate")
            samples.append((elapsed, float(rate) if rate else args.rpm / 60))
            second = int(elapsed)
            if second in (30, args.burst_at) and second not in by_status_at:
                by_status_at[second] = fake.get("/control/stats").json()["by_status"]
            if phase == "steady" and elapsed >= args.burst_at:
                fake.post("/control/config", json={"rpm": args.rpm // 2})
                phase = "squeezed"
            elif phase == "squeezed" and elapsed >= squeeze_end:
                fake.post("/control/config", json={"rpm": args.rpm})
                phase = "restored"
            time.sleep(0.25)
        stats = fake.get("/control/stats").json()
    accepted = {int(t) - int(start): n for t, n in stats["accepted_per_second"]}
    steady = [accepted.get(s, 0) for s in range(30, args.burst_at)]
    achieved = sum(steady) / len(steady) * 60
    before, at_burst = by_status_at[30], by_status_at[args.burst_at]
    ok = at_burst.get("200", 0) - before.get("200", 0)
    limited = at_burst.get("429", 0) - before.get("429", 0)
    share_429 = limited / max(1, ok + limited)
    squeeze_end = args.burst_at + args.squeeze_s
    squeezed = [accepted.get(s, 0) for s in range(args.burst_at + 5, squeeze_end)]
    squeezed_rpm = sum(squeezed) / max(1, len(squeezed)) * 60
    low = min(r for t, r in samples if t >= args.burst_at) * 60
    recovered = next(
        (t - squeeze_end for t, r in samples if t > squeeze_end and r * 60 >= 0.95 * args.rpm),
        None,
    )
    print(
        f"R = {args.rpm}/min: achieved {achieved:.0f}/min ({achieved / args.rpm:.1%}) "
        f"from 30 s to {args.burst_at} s; 429s {limited} of {ok + limited} ({share_429:.2%})"
    )
    print(
        f"provider at R/2 for {args.squeeze_s}s: allowed rate fell to {low:.0f}/min, provider "
        f"answered {squeezed_rpm:.0f}/min; back at 95 % of R "
        f"{recovered if recovered is None else f'{recovered:.1f}'} s after R returned"
    )
    plot(accepted, samples, args)
    write_report(
        "rate-limit",
        f"""# Provider-limit utilisation and adaptive back-off

`python -m bench.rate_limit --rpm {args.rpm} --seconds {args.seconds}`: {args.docs} documents
in the batch lane, 12 batch worker processes with 4 calls in flight per step (demand far
above the limit), fake provider at 50-150 ms per call enforcing R = {args.rpm} requests/min
with its own token bucket; docpipe's shared limiter configured with the same R.

| measure (from the provider's side) | value |
|---|---|
| achieved rate, 30 s to {args.burst_at} s | {achieved:.0f}/min = **{achieved / args.rpm:.1%} of R** |
| 429 answers in that window | {limited} of {ok + limited} = **{share_429:.2%}** |
| provider halves its limit for {args.squeeze_s} s: docpipe's allowed rate fell to | {low:.0f}/min |
| ... and the provider still answered (200s, from 5 s into the squeeze) | {squeezed_rpm:.0f}/min (its limit: {args.rpm // 2}) |
| back at >= 95 % of R after the provider restored R | {recovered if recovered is None else f"{recovered:.1f}"} s |

![accepted requests per second and the limiter's allowed rate](rate-limit.png)
""",
        {"utilisation": achieved / args.rpm, "share_429": share_429, "recovered_s": recovered},
    )


def report_tpm(result: dict[str, object], args: argparse.Namespace) -> None:
    line = (
        f"TPM = {args.tpm}/min: achieved {result['achieved_tpm']:.0f}/min "
        f"({result['utilisation']:.1%}) from 30 s to {args.seconds} s; 429s "
        f"{result['429s']} of {result['answers']} ({result['share_429']:.2%})"
    )
    print(line)
    write_report(
        "rate-limit-tpm",
        f"""# Provider limit on tokens per minute

`python -m bench.rate_limit --case tpm --tpm {args.tpm} --seconds {args.seconds}`:
{args.docs} documents in the batch lane, 12 batch worker processes, fake provider at
50-150 ms per call limiting tokens per minute only (prompt + max_tokens reserved when a
request is admitted, settled to its usage when answered; x-ratelimit-* headers sent);
docpipe configured with the same limit (`DOCPIPE_PROVIDER_TPM`).

| measure (from the provider's side, 30 s to {args.seconds} s) | value |
|---|---|
| tokens answered per minute | {result["achieved_tpm"]:.0f} = **{result["utilisation"]:.1%} of the limit** |
| 429 answers | {result["429s"]} of {result["answers"]} = **{result["share_429"]:.2%}** |
""",
        result,
    )


def report_two_models(result: dict[str, Any], args: argparse.Namespace) -> None:
    rows = "\n".join(
        f"| {m} | {v['rpm']} | {v['achieved_rpm']:.0f} | **{v['utilisation']:.1%}** |"
        for m, v in result["models"].items()
    )
    print(rows)
    print(f"429s {result['429s']} of {result['answers']} ({result['share_429']:.2%})")
    write_report(
        "rate-limit-two-models",
        f"""# Two models, each with its own limit

`python -m bench.rate_limit --case two-models --seconds {args.seconds}`: the same
{args.docs // 2} contracts as urgent interactive runs (routed to the fast model) and as a
batch (low priority: routed to the cheap model), at once; the fake provider limits each
model's requests per minute on its own (50-150 ms per call, x-ratelimit-* headers sent),
docpipe's `DOCPIPE_PROVIDERS` states the same limits.

| model | limit (req/min) | achieved, 30 s to {args.seconds} s | share of its limit |
|---|---|---|---|
{rows}

429 answers: {result["429s"]} of {result["answers"]} = **{result["share_429"]:.2%}**.
""",
        result,
    )


def plot(
    accepted: dict[int, int], samples: list[tuple[float, float]], args: argparse.Namespace
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = sorted(s for s in accepted if 0 <= s < args.seconds)
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(seconds, [accepted[s] for s in seconds], label="provider: answered 200 per second")
    ax.plot([t for t, _ in samples], [r for _, r in samples], label="docpipe: allowed rate (req/s)")
    end = args.burst_at + args.squeeze_s
    ax.plot(
        [0, args.burst_at, args.burst_at, end, end, args.seconds],
        [
            args.rpm / 60,
            args.rpm / 60,
            args.rpm / 120,
            args.rpm / 120,
            args.rpm / 60,
            args.rpm / 60,
        ],
        linestyle="--",
        color="grey",
        label=f"provider limit (R = {args.rpm}/min, then R/2)",
    )
    ax.set_xlabel("seconds")
    ax.set_ylabel("requests per second")
    ax.legend(loc="lower right")
    fig.tight_layout()
    REPORTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(REPORTS / "rate-limit.png", dpi=100)


if __name__ == "__main__":
    main()
