"""The limits providers state besides requests per minute: a tokens-per-minute limit, and
two models each with a limit of its own (the case and the two-model case of
``python -m bench.rate_limit``).

Both run the whole stack against a fake provider started here with those limits (it answers
429 beyond them and sends OpenAI's x-ratelimit-* headers), docpipe configured with the same
limits, and demand far above them. Measured from the provider's side, from 30 s to the end:
the share of the binding limit achieved and the share of 429 answers.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.harness import bench_stack, wait_for
from docpipe_dev.localstack import free_port
from docpipe_dev.processes import ManagedProcess, fake_llm_argv
from docpipe_dev.samples import sample_contracts

__all__ = ["run_tpm_case", "run_two_model_case"]

WARMUP_S = 30


@contextmanager
def provider(*flags: str, latency_ms: str = "50:150") -> Iterator[str]:
    """A fake provider with ``flags``; yields its base URL (without /v1)."""
    port = free_port()
    argv = [*fake_llm_argv(host="127.0.0.1", port=port, latency_ms=latency_ms), *flags]
    log = Path(tempfile.mkdtemp(prefix="docpipe-bench-fake-")) / "fake-llm.log"
    process = ManagedProcess("fake-llm", argv, log).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(url), timeout_s=30)
        yield url
    finally:
        process.stop(timeout_s=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _measure(fake: httpx.Client, seconds: int) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Stats at WARMUP_S and at the end, and the start time (the first call's second)."""
    wait_for(lambda: fake.get("/control/stats").json()["requests_total"] > 0)
    fake.post("/control/reset")  # count from the first call on (keeps the limits)
    start = time.time()
    time.sleep(WARMUP_S)
    at_warmup = fake.get("/control/stats").json()
    time.sleep(max(0, seconds - WARMUP_S))
    return at_warmup, fake.get("/control/stats").json(), start


def _share_429(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int]:
    ok = after["by_status"].get("200", 0) - before["by_status"].get("200", 0)
    limited = after["by_status"].get("429", 0) - before["by_status"].get("429", 0)
    return limited, ok + limited


def _per_model(stats: dict[str, Any], start: float, seconds: int) -> dict[str, list[int]]:
    """Answers and tokens per model from WARMUP_S to the end: {model: [answers, tokens]}."""
    totals: dict[str, list[int]] = {}
    for second, model, answers, tokens in stats["answered_per_second_by_model"]:
        if WARMUP_S <= second - int(start) < seconds:
            entry = totals.setdefault(model, [0, 0])
            entry[0] += answers
            entry[1] += tokens
    return totals


def run_tpm_case(tpm: int, seconds: int, docs: int) -> dict[str, Any]:
    """The provider limits tokens per minute only; docpipe knows the same limit."""
    contracts = sample_contracts(docs)
    with provider("--tpm", str(tpm)) as url:
        env = {"DOCPIPE_LLM_BASE_URL": url + "/v1", "DOCPIPE_PROVIDER_TPM": str(tpm)}
        with bench_stack(env=env, batch_concurrency=12, latency_ms="50:150") as bench:
            fake = httpx.Client(base_url=url)
            bench.client.submit_batch(
                [{"id": f"d{i}", "text": c.text} for i, c in enumerate(contracts)]
            )
            before, after, start = _measure(fake, seconds)
    window_min = (seconds - WARMUP_S) / 60
    used = sum(tokens for _, tokens in _per_model(after, start, seconds).values())
    limited, total = _share_429(before, after)
    return {
        "tpm": tpm,
        "achieved_tpm": used / window_min,
        "utilisation": used / window_min / tpm,
        "429s": limited,
        "answers": total,
        "share_429": limited / max(1, total),
    }


def run_two_model_case(rpms: dict[str, int], seconds: int, docs: int) -> dict[str, Any]:
    """Each model has its own requests-per-minute limit; urgent interactive runs go to the
    fast model, the batch lane's (low priority) to the cheap one, both at once."""
    (fast, fast_rpm), (cheap, cheap_rpm) = rpms.items()
    flags = [a for model, rpm in rpms.items() for a in ("--model-limit", f"{model}={rpm}:0")]
    contracts = sample_contracts(docs)
    with provider(*flags) as url:
        models = {
            fast: {"input_per_mtok": 2.5, "output_per_mtok": 10, "rpm": fast_rpm, "speed": "fast"},
            cheap: {
                "input_per_mtok": 0.15,
                "output_per_mtok": 0.6,
                "rpm": cheap_rpm,
                "speed": "slow",
            },
        }
        env = {
            "DOCPIPE_LLM_BASE_URL": url + "/v1",
            "DOCPIPE_PROVIDERS": json.dumps(
                [{"name": "fake", "base_url": url + "/v1", "models": models}]
            ),
        }
        with bench_stack(
            env=env, interactive_concurrency=6, batch_concurrency=8, latency_ms="50:150"
        ) as bench:
            fake = httpx.Client(base_url=url)
            bench.client.submit_batch(
                [{"id": f"b{i}", "text": c.text} for i, c in enumerate(contracts)]
            )
            for i, contract in enumerate(contracts):
                bench.client.put_document(f"u{i}", contract.text)
                bench.client.extract(f"u{i}", priority="urgent")
            before, after, start = _measure(fake, seconds)
    window_min = (seconds - WARMUP_S) / 60
    per_model = _per_model(after, start, seconds)
    limited, total = _share_429(before, after)
    return {
        "models": {
            m: {
                "rpm": rpm,
                "achieved_rpm": per_model.get(m, [0, 0])[0] / window_min,
                "utilisation": per_model.get(m, [0, 0])[0] / window_min / rpm,
            }
            for m, rpm in rpms.items()
        },
        "429s": limited,
        "answers": total,
        "share_429": limited / max(1, total),
    }
