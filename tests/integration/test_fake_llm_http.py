"""The fake provider over real HTTP, started as a subprocess exactly as the stack runs it."""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from docpipe_dev.samples import sample_contracts
from tests.support.fakellm import FakeLLM, start_fake_llm
from tests.support.processes import wait_until

MODEL = "fake-model"
CONTRACT = sample_contracts(1)[0]


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    with start_fake_llm() as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeLLM) -> FakeLLM:
    fake_server.reset()
    return fake_server


def chat(
    fake: FakeLLM,
    step: str | None,
    content: str,
    *,
    model: str = MODEL,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """Send one completion request the way the pipeline does."""
    system = f"docpipe-step: {step}\nprompt-version: 1\nAnswer in JSON." if step else "Be nice."
    body = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": content}],
        "response_format": {"type": "json_object"},
    }
    return httpx.post(
        fake.url + "/v1/chat/completions", json=body, timeout=timeout, headers=headers
    )


def answer(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["content"])


def test_a_completion_has_the_openai_shape_and_counts_tokens(fake: FakeLLM) -> None:
    response = chat(fake, "extract_sections", CONTRACT.text)
    body = response.json()
    assert response.status_code == 200
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["id"].startswith("chatcmpl-") and isinstance(body["created"], int)
    choice = body["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    content = choice["message"]["content"]
    assert json.loads(content)["sections"][0]["heading"] in CONTRACT.text
    system = "docpipe-step: extract_sections\nprompt-version: 1\nAnswer in JSON."
    usage = body["usage"]
    assert usage["prompt_tokens"] == math.ceil((len(system) + len(CONTRACT.text)) / 4)
    assert usage["completion_tokens"] == math.ceil(len(content) / 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_extract_fields_reads_the_preamble_it_is_sent(fake: FakeLLM) -> None:
    sections = answer(chat(fake, "extract_sections", CONTRACT.text))["sections"]
    preamble = CONTRACT.text[: CONTRACT.text.index(sections[0]["heading"])]
    fields = answer(chat(fake, "extract_fields", f"Section 0. Preamble\n\n{preamble}"))["fields"]
    assert fields["parties"]["value"] == CONTRACT.expected["parties"]
    assert fields["effective_date"]["value"] == CONTRACT.expected["effective_date"]
    assert fields["effective_date"]["quote"] in " ".join(preamble.split())


def test_an_empty_bucket_answers_429_with_retry_after(fake: FakeLLM) -> None:
    fake.configure(rpm=60, burst=1)
    assert chat(fake, "extract_fields", "Section 1. Fees\n\nNone.").status_code == 200
    limited = chat(fake, "extract_fields", "Section 1. Fees\n\nNone.")
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "1"
    assert 1 <= int(limited.headers["retry-after-ms"]) <= 1000
    assert limited.json()["error"]["type"] == "rate_limit_error"
    # Waiting out the Retry-After is the behaviour under test: the bucket refills by then.
    time.sleep(int(limited.headers["retry-after-ms"]) / 1000)
    assert chat(fake, "extract_fields", "Section 1. Fees\n\nNone.").status_code == 200


def test_start_up_flags_set_the_rate_limit_and_the_api_key() -> None:
    with start_fake_llm(rpm=60, burst=1, api_key="sesame") as fake:
        denied = chat(fake, "summarize", '{"fields": {}}')
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        key = {"Authorization": "Bearer sesame"}
        assert chat(fake, "summarize", '{"fields": {}}', headers=key).status_code == 200
        assert chat(fake, "summarize", '{"fields": {}}', headers=key).status_code == 429
        assert fake.stats()["by_status"] == {"401": 1, "200": 1, "429": 1}


def test_faults_hit_only_their_step_and_only_count_times(fake: FakeLLM) -> None:
    fake.add_fault("429", count=2, step="extract_fields", retry_after=0.25)
    assert chat(fake, "extract_sections", CONTRACT.text).status_code == 200
    for _ in range(2):
        limited = chat(fake, "extract_fields", "Section 0. Preamble\n\nText.")
        assert limited.status_code == 429
        assert (limited.headers["Retry-After"], limited.headers["retry-after-ms"]) == ("1", "250")
    assert chat(fake, "extract_fields", "Section 0. Preamble\n\nText.").status_code == 200
    assert fake.pending_faults() == []


@pytest.mark.parametrize(
    ("kind", "error_type"),
    [("400", "invalid_request_error"), ("500", "server_error"), ("503", "server_error")],
)
def test_error_faults_answer_their_status_once(fake: FakeLLM, kind: str, error_type: str) -> None:
    fake.add_fault(kind, step="summarize")
    failed = chat(fake, "summarize", '{"fields": {}}')
    assert failed.status_code == int(kind)
    assert failed.json()["error"]["type"] == error_type
    assert chat(fake, "summarize", '{"fields": {}}').status_code == 200


def test_a_malformed_answer_is_not_json(fake: FakeLLM) -> None:
    fake.add_fault("malformed", step="extract_sections")
    response = chat(fake, "extract_sections", CONTRACT.text)
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.json()["choices"][0]["message"]["content"])


def test_an_invalid_answer_is_json_without_the_step_schema(fake: FakeLLM) -> None:
    fake.add_fault("invalid")
    assert answer(chat(fake, "extract_fields", "Section 1. Fees\n\nNone.")) == {"result": "ok"}


def test_faults_are_consumed_in_order_and_filtered_by_model(fake: FakeLLM) -> None:
    fake.add_fault("500", model="another-model")
    fake.add_fault("503")
    fake.add_fault("400")
    assert chat(fake, "summarize", '{"fields": {}}').status_code == 503
    assert chat(fake, "summarize", '{"fields": {}}').status_code == 400
    assert chat(fake, "summarize", '{"fields": {}}').status_code == 200
    assert [f["model"] for f in fake.pending_faults()] == ["another-model"]
    assert chat(fake, "summarize", '{"fields": {}}', model="another-model").status_code == 500
    fake.add_fault("503", count=3)
    fake.control("DELETE", "/control/faults")
    assert chat(fake, "summarize", '{"fields": {}}').status_code == 200


def test_a_hang_outlasts_the_client_timeout_and_ends_when_the_client_leaves(
    fake: FakeLLM,
) -> None:
    fake.add_fault("hang", step="extract_fields", hang_s=60)
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        chat(fake, "extract_fields", "Section 1. Fees\n\nNone.", timeout=0.5)
    assert time.monotonic() - started < 5
    assert chat(fake, "extract_fields", "Section 1. Fees\n\nNone.", timeout=2).status_code == 200
    # The hung request is released (and logged 499) once its client has gone.
    wait_until(lambda: fake.stats()["by_status"].get("499") == 1, timeout_s=5, every_s=0.05)


@pytest.mark.parametrize(
    ("step", "content", "code"),
    [
        (None, "text", "missing_step_header"),
        ("translate", "text", "unknown_step"),
        ("extract_sections", "   ", "empty_content"),
        ("summarize", "not json", "invalid_summarize_input"),
    ],
)
def test_requests_the_steps_cannot_use_answer_400(
    fake: FakeLLM, step: str | None, content: str, code: str
) -> None:
    refused = chat(fake, step, content)
    assert refused.status_code == 400
    assert refused.json() == {
        "error": {
            "message": refused.json()["error"]["message"],
            "type": "invalid_request_error",
            "code": code,
        }
    }


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[]", b'{"messages": []}', b'{"model": "m", "messages": [{"role": "user"}]}'],
)
def test_malformed_request_bodies_answer_400(fake: FakeLLM, body: bytes) -> None:
    refused = httpx.post(fake.url + "/v1/chat/completions", content=body, timeout=5)
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"


def test_latency_is_waited_concurrently(fake: FakeLLM) -> None:
    # One second each: waited one after another, 20 requests take 20 s; concurrently about 1.
    # Half of the one-after-another time leaves room for any machine's load.
    fake.configure(latency_ms=[1000, 1000])
    started = time.monotonic()
    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(lambda _: chat(fake, "summarize", '{"fields": {}}'), range(20)))
    elapsed = time.monotonic() - started
    assert [response.status_code for response in responses] == [200] * 20
    assert 1.0 <= elapsed < 10.0, f"20 requests of 1 s took {elapsed:.2f}s"


def test_stats_count_requests_by_step_and_status(fake: FakeLLM) -> None:
    fake.add_fault("503", step="extract_sections")
    chat(fake, "extract_sections", CONTRACT.text)
    chat(fake, "extract_sections", CONTRACT.text)
    chat(fake, "summarize", '{"fields": {}}')
    chat(fake, None, "text")
    stats = fake.stats()
    assert stats["requests_total"] == 4
    assert stats["by_step"] == {"extract_sections": 2, "summarize": 1}
    assert stats["by_status"] == {"503": 1, "200": 2, "400": 1}
    assert sum(n for _, n in stats["accepted_per_second"]) == 2
    assert all(second > 1_600_000_000 for second, _ in stats["accepted_per_second"])


def test_reset_restores_the_start_up_settings(fake: FakeLLM) -> None:
    unlimited = {"tpm": 0, "model_limits": {}, "rate_headers": True}
    # The batch interface's start-up settings (as the provider documents its limits).
    unlimited |= {
        "batch_completion_s": 5.0,
        "batch_window_s": None,
        "batch_max_requests": 50_000,
        "batch_max_bytes": 200 * 1024 * 1024,
    }
    assert fake.configure(latency_ms=[5, 10], rpm=120) == {
        "latency_ms": [5, 10],
        "rpm": 120,
        "burst": 0,
        **unlimited,
    }
    fake.add_fault("500")
    fake.reset()
    assert fake.control("GET", "/control/config") == {
        "latency_ms": [0, 0],
        "rpm": 0,
        "burst": 0,
        **unlimited,
    }
    assert fake.pending_faults() == []
    assert fake.stats()["requests_total"] == 0


def test_an_invalid_fault_is_refused(fake: FakeLLM) -> None:
    for spec in ({"kind": "418"}, {"kind": "500", "count": 0}):
        response = httpx.post(fake.url + "/control/faults", json=spec, timeout=5)
        assert response.status_code == 422


def test_sigterm_stops_the_provider_cleanly_despite_a_hanging_request() -> None:
    fake = start_fake_llm()
    fake.add_fault("hang", hang_s=600)
    outcome: list[object] = []

    def send_hanging_request() -> None:
        try:
            outcome.append(chat(fake, "summarize", '{"fields": {}}', timeout=30).status_code)
        except httpx.HTTPError as error:
            outcome.append(error)

    hanging = threading.Thread(target=send_hanging_request)
    hanging.start()
    wait_until(lambda: not fake.pending_faults(), timeout_s=5, every_s=0.05)
    started = time.monotonic()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status reports it.
    assert fake.stop() in (0, -signal.SIGTERM)
    assert time.monotonic() - started < 8
    hanging.join(10)
    assert outcome, "the hanging request ended with the provider"


def test_healthz_answers_ok(fake: FakeLLM) -> None:
    assert httpx.get(fake.url + "/healthz", timeout=5).json() == {"status": "ok"}


def test_the_request_log_keeps_each_requests_client_id_across_a_sigkill(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    fake = start_fake_llm(request_log=str(log))
    chat(fake, "extract_sections", CONTRACT.text, headers={"X-Client-Request-Id": "call-7"})
    chat(fake, "summarize", '{"fields": {}}')  # no id: recorded as "-"
    fake.process.kill_group()  # no chance to flush anything
    fake.stop()
    assert log.read_text().splitlines() == ["call-7", "-"]
    with start_fake_llm(request_log=str(log)) as again:  # a restart appends
        chat(again, "summarize", '{"fields": {}}', headers={"X-Client-Request-Id": "call-8"})
    assert log.read_text().splitlines() == ["call-7", "-", "call-8"]
