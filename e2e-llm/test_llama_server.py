"""docpipe against llama.cpp's server (SmolLM2-135M-Instruct): the sample contracts through
the whole local stack, what the real server answers differently from the fake provider, and
the generated contracts evaluated against it (its accuracy by field).

Slow by nature (about 18 generated tokens/s on 2 cores): run by ``make e2e-llm`` only, never
by ``make test``. Each run ends done, or needs_review with its reason; its calls carry the
server's real token counts and their cost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import LlamaServer
from psycopg.rows import dict_row

from docpipe.cli.client import DocpipeClient
from docpipe_dev.localstack import free_port
from docpipe_dev.samples import sample_contracts
from docpipe_dev.stack import LocalStack, StackOptions

SCHEMA = {
    "type": "object",
    "properties": {
        "sections": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"number": {"type": "string"}},
                "required": ["number"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["sections"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "List the numbered sections."},
    {"role": "user", "content": "1. DEFINITIONS\nTerms.\n2. FEES\nPay in 30 days."},
]
# A price, so that real usage has a real cost (gpt-4o-mini's list price).
PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.60}
ENDED = {"done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded"}


def post(server: LlamaServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + "/chat/completions", json=body, timeout=300)


def test_where_the_real_server_differs_from_the_fake(llama_server: LlamaServer) -> None:
    """The rows of the table of docs/guides/providers.md: where llama.cpp's server and the
    fake provider differ."""
    openai_style = {
        "type": "json_schema",
        "json_schema": {"name": "s", "strict": True, "schema": SCHEMA},
    }
    refused = post(
        llama_server, {"model": "any", "messages": MESSAGES, "response_format": openai_style}
    )
    # OpenAI's json_schema response_format is refused, as a 500 (a validation error).
    assert refused.status_code == 500
    assert "json_object" in refused.json()["error"]["message"]
    started = time.monotonic()
    answered = post(
        llama_server,
        {
            "model": "gpt-4o-mini",
            "messages": MESSAGES,
            "max_tokens": 60,
            "seed": 1,
            "response_format": {"type": "json_object", "schema": SCHEMA},
        },
    )
    took = time.monotonic() - started
    assert answered.status_code == 200
    body = answered.json()
    answer = json.loads(body["choices"][0]["message"]["content"])
    assert set(answer) == {"sections"} and len(answer["sections"]) <= 3
    assert body["model"] == "gpt-4o-mini", "any model name is answered and echoed"
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0
    assert not [h for h in answered.headers if h.startswith("x-ratelimit")]
    # A malformed request is a 500 too, not a 400.
    malformed = post(llama_server, {"model": "m", "messages": "not a list"})
    assert malformed.status_code == 500
    models = httpx.get(llama_server.url + "/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == [llama_server.model_file]
    print(
        f"\nllama.cpp: a 60-token json_object+schema answer took {took:.1f}s; usage {body['usage']}"
    )


@pytest.fixture
def stack(llama_server: LlamaServer) -> Iterator[LocalStack]:
    providers = [
        {
            "name": "llama",
            "base_url": llama_server.url,
            # One request at a time: the server generates one answer at a time anyway, and a
            # request that waits there runs into docpipe's timeout while it still costs.
            "max_concurrency": 1,
            "output_mode": "json_schema",
            "json_schema_style": "llama_cpp_python",
            "models": {
                "gpt-4o-mini": {**PRICE, "fallback": "gpt-4o", "seed": 7},
                "gpt-4o": {**PRICE, "seed": 8, "temperature": 0.3},
            },
        }
    ]
    env = {
        "DOCPIPE_PROVIDERS": json.dumps(providers),
        "DOCPIPE_LLM_BASE_URL": llama_server.url,  # so that the stack starts no fake
        "DOCPIPE_AUTH": "none",
        "DOCPIPE_API_KEY_RPM": "0",
        "DOCPIPE_DEFAULT_MAX_TOKENS": "600",
        "DOCPIPE_STEP_CALL_CONCURRENCY": "1",
        # ~18 generated tokens/s: a 600-token answer takes half a minute, a step of a dozen
        # calls several minutes.
        "DOCPIPE_LLM_TIMEOUT_S": "240",
        "DOCPIPE_LIMITER_MAX_WAIT_S": "600",
        "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "1500",
        "DOCPIPE_TASK_TIME_LIMIT_S": "1800",
        "DOCPIPE_MAX_STEP_ATTEMPTS": "3",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    for name in ("DOCPIPE_DATABASE_URL", "DOCPIPE_REDIS_URL"):
        os.environ.pop(name, None)
    state = Path(tempfile.mkdtemp(prefix="docpipe-e2e-llm-"))
    state.chmod(0o711)
    options = StackOptions(
        state_dir=state,
        api_port=free_port(),
        interactive_concurrency=2,
        batch_concurrency=1,
        metrics_port=0,
    )
    stack = LocalStack(options).up()
    try:
        yield stack
    finally:
        stack.down()
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.update({name: value})
        shutil.rmtree(state, ignore_errors=True)


def test_the_sample_contracts_run_through_the_whole_stack(
    stack: LocalStack, llama_server: LlamaServer
) -> None:
    count = int(os.environ.get("E2E_LLM_CONTRACTS", "2"))
    contracts = sample_contracts(4)[-count:]  # the shortest of the first four
    started = time.monotonic()
    with DocpipeClient(stack.api_url, timeout_s=60) as client:
        run_ids = []
        for i, contract in enumerate(contracts):
            client.put_document(f"contract-{i}", contract.text)
            run_ids.append(client.extract(f"contract-{i}")["run_id"])
        deadline = time.monotonic() + 45 * 60
        while time.monotonic() < deadline:
            llama_server.assert_alive()
            runs = [client.run(r) for r in run_ids]
            if all(r["status"] in ENDED for r in runs):
                break
            time.sleep(5)
    took = time.monotonic() - started
    for run in runs:
        assert run["status"] in ("done", "needs_review"), run
        if run["status"] == "needs_review":
            assert run["error"], "a run that needs review says why"
    with psycopg.connect(stack.env["DOCPIPE_DATABASE_URL"], row_factory=dict_row) as conn:
        calls = conn.execute(
            "SELECT run_id::text, step, model, status, error_kind, input_tokens, output_tokens,"
            " cost_usd, latency_ms, finish_reason, usage_estimated, output_mode, max_tokens"
            " FROM llm_call_log ORDER BY id"
        ).fetchall()
    answered = [c for c in calls if c["status"] in ("ok", "invalid_output")]
    assert answered, "the server answered"
    assert all(not c["usage_estimated"] and c["input_tokens"] > 0 for c in answered)
    assert all(c["cost_usd"] > 0 for c in answered), "real tokens have a real cost"
    assert {c["output_mode"] for c in calls} == {"json_schema"}
    print(f"\n{len(run_ids)} contracts in {took:.0f}s through llama.cpp's server:")
    for run in runs:
        own = [c for c in calls if c["run_id"] == run["run_id"]]
        print(
            f"  {run['run_id'][:8]} {run['status']:<13} {len(own):>3} calls "
            f"{sum(c['input_tokens'] or 0 for c in own):>6} in "
            f"{sum(c['output_tokens'] or 0 for c in own):>5} out "
            f"${sum(c['cost_usd'] for c in own):.6f}  {run['error'] or ''}"[:200]
        )
    by_kind: dict[str, int] = {}
    for c in calls:
        key = f"{c['status']}/{c['error_kind'] or c['finish_reason']}"
        by_kind[key] = by_kind.get(key, 0) + 1
    latencies = sorted(c["latency_ms"] for c in answered)
    print(
        f"  calls by outcome: {by_kind}; latency p50 {latencies[len(latencies) // 2]} ms, "
        f"max {latencies[-1]} ms"
    )


def test_the_generated_contracts_evaluated_against_smollm2(
    stack: LocalStack, llama_server: LlamaServer
) -> None:
    """An evaluation of the sample generator's contracts (whose every stated value it knows)
    against the 135M model: its accuracy by field, printed as ``docpipe eval show`` prints
    it. The figure is low; what it measures is what a model this small reads."""
    count = int(os.environ.get("E2E_LLM_CONTRACTS", "2"))
    contracts = sample_contracts(4)[-count:]
    items = b"".join(
        json.dumps(
            {"document": {"id": c.slug, "text": c.text}, "expected": {"fields": c.expected}}
        ).encode()
        + b"\n"
        for c in contracts
    )
    with httpx.Client(base_url=stack.api_url, timeout=60) as api:
        made = api.post(
            "/evaluation-sets",
            json={"name": "generated", "pipeline": "document_extract", "step": "extract_fields"},
        )
        assert made.status_code == 201, made.text
        added = api.post(
            "/evaluation-sets/generated/items?source=samples",
            content=items,
            headers={"Content-Type": "application/jsonl"},
        )
        assert added.status_code == 200, added.text
        started = api.post(
            "/evaluations", json={"set": "generated", "pipeline": "document_extract:v1"}
        )
        assert started.status_code == 202, started.text
        evaluation_id = started.json()["id"]
        deadline = time.monotonic() + 45 * 60
        while (found := api.get(f"/evaluations/{evaluation_id}").json())["status"] != "reported":
            llama_server.assert_alive()
            assert time.monotonic() < deadline, found["batch"]
            time.sleep(5)
    report = found["report"]
    assert report["documents"] == count
    assert sum(report["runs_by_status"].values()) == count
    assert report["calls"] > 0 and report["input_tokens"] > 0, "the model was asked"
    assert report["fields"], "every stated field is scored"
    assert 0.0 <= report["overall"]["accuracy"] <= 1.0
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "docpipe.cli",
            "eval",
            "show",
            evaluation_id,
            "--api",
            stack.api_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    print(f"\nSmolLM2-135M on {count} generated contracts (runs {report['runs_by_status']}):")
    print(shown.stdout)
