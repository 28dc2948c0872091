"""The fake provider's batch interfaces over real HTTP: OpenAI's files and batches (driven by
the official ``openai`` client, as a user's code would drive OpenAI) and Anthropic's Message
Batches, with their validation, their state machine, faults at each point and the bill."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from docpipe_dev.samples import sample_contracts
from tests.support.fakellm import FakeLLM, start_fake_llm
from tests.support.processes import wait_until

CONTRACT = sample_contracts(1)[0].text
SECTIONS = {"role": "system", "content": "docpipe-step: extract_sections\nprompt-version: v1"}


def chat_body(model: str = "gpt-4o-mini", text: str = CONTRACT) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [SECTIONS, {"role": "user", "content": text}],
        "response_format": {"type": "json_object"},
        "max_tokens": 2000,
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def requests_file(n: int, model: str = "gpt-4o-mini") -> bytes:
    return jsonl(
        [
            {
                "custom_id": f"docpipe-call-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": chat_body(model),
            }
            for i in range(n)
        ]
    )


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    with start_fake_llm(api_key="sk-test", batch_completion_s=1) as fake:
        yield fake


@pytest.fixture
def fake(fake_server: FakeLLM) -> FakeLLM:
    fake_server.reset()
    return fake_server


@pytest.fixture
def client(fake: FakeLLM) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0) as c:
        yield c


@pytest.fixture
def anthropic(fake: FakeLLM) -> Iterator[httpx.Client]:
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=fake.url + "/v1/messages/", headers=headers) as c:
        yield c


def until(predicate: Callable[[], Any]) -> Any:
    """The first truthy value of ``predicate()``: the fake's batches end within seconds."""
    return wait_until(predicate, timeout_s=20)


def ended(client: openai.OpenAI, batch_id: str) -> Any:
    return until(
        lambda: (
            b
            if (b := client.batches.retrieve(batch_id)).status
            in ("completed", "failed", "expired", "cancelled")
            else None
        )
    )


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).content.splitlines()]


def test_an_openai_batch_goes_through_its_states_and_answers_every_request(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    upload = client.files.create(file=("in.jsonl", requests_file(3)), purpose="batch")
    assert upload.purpose == "batch" and upload.bytes > 0
    batch = client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"docpipe_provider_batch": "pb-1"},
    )
    assert batch.status == "validating" and batch.metadata == {"docpipe_provider_batch": "pb-1"}
    seen = {until(lambda: client.batches.retrieve(batch.id).status == "in_progress")}
    done = ended(client, batch.id)
    assert seen and done.status == "completed"
    assert done.request_counts is not None and done.request_counts.completed == 3
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    answers = lines_of(client, done.output_file_id)
    assert sorted(a["custom_id"] for a in answers) == [f"docpipe-call-{i}" for i in range(3)]
    body = answers[0]["response"]["body"]
    assert answers[0]["response"]["status_code"] == 200
    assert json.loads(body["choices"][0]["message"]["content"])["sections"]
    assert done.error_file_id is None
    stats = fake.control("GET", "/control/batches")
    assert stats["requests_processed"] == 3 and stats["processed_twice"] == []
    # The same request in real time is billed twice what the batch billed for it.
    httpx.post(
        fake.url + "/v1/chat/completions",
        json=chat_body(),
        headers={"Authorization": "Bearer sk-test"},
    ).raise_for_status()
    billing = fake.control("GET", "/control/batches")["billing"]
    assert Decimal(billing["batch"]["usd"]) == 3 * Decimal(billing["realtime"]["usd"]) / 2
    assert billing["batch"]["requests"] == 3


def test_batches_and_files_are_found_again_by_metadata_and_filename(
    client: openai.OpenAI,
) -> None:
    upload = client.files.create(file=("docpipe-pb-7.jsonl", requests_file(1)), purpose="batch")
    for key in ("pb-6", "pb-7"):
        client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"docpipe_provider_batch": key},
        )
    listed = list(client.batches.list(limit=1))  # the client follows the pages
    assert [b.metadata for b in listed] == [
        {"docpipe_provider_batch": "pb-7"},
        {"docpipe_provider_batch": "pb-6"},
    ]
    assert [f.filename for f in client.files.list(purpose="batch")] == ["docpipe-pb-7.jsonl"]


def test_validation_fails_a_batch_with_the_lines_at_fault(client: openai.OpenAI) -> None:
    lines = [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat_body()},
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": chat_body()},
        {"custom_id": "b", "method": "POST", "url": "/v1/embeddings", "body": chat_body()},
    ]
    upload = client.files.create(file=("bad.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = ended(client, batch.id)
    assert done.status == "failed" and done.errors is not None and done.errors.data
    assert [(e.code, e.line) for e in done.errors.data] == [
        ("duplicate_custom_id", 2),
        ("mismatched_endpoint", 3),
    ]
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="1d"
        )


def test_the_limits_on_requests_and_bytes_hold(client: openai.OpenAI, fake: FakeLLM) -> None:
    fake.configure(batch_max_requests=2, batch_max_bytes=20_000)
    with pytest.raises(openai.BadRequestError, match="too large"):
        client.files.create(file=("big.jsonl", requests_file(3)), purpose="batch")
    bodies = (chat_body(text="short"), chat_body("gpt-4o", "short"), chat_body(text="s"))
    mixed = jsonl(
        [
            {"custom_id": f"x{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
            for i, b in enumerate(bodies)
        ]
    )
    upload = client.files.create(file=("mixed.jsonl", mixed), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    errors = ended(client, batch.id).errors
    assert {e.code for e in errors.data} >= {"too_many_requests", "mixed_models"}


def test_cancel_ends_the_requests_not_yet_processed_unbilled(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.configure(batch_completion_s=4)
    upload = client.files.create(file=("in.jsonl", requests_file(8)), purpose="batch")
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 2)
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = ended(client, batch.id)
    assert done.status == "cancelled" and done.cancelling_at and done.cancelled_at
    answered = lines_of(client, done.output_file_id)
    cancelled = lines_of(client, done.error_file_id)
    assert 2 <= len(answered) < 8 and len(answered) + len(cancelled) == 8
    assert {c["error"]["code"] for c in cancelled} == {"batch_cancelled"}
    billing = fake.control("GET", "/control/batches")["billing"]["batch"]
    assert billing["requests"] == len(answered)


def test_expiry_and_partial_errors_go_to_the_error_file(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    fake.configure(batch_window_s=3)
    fake.control("POST", "/control/batch-fates", {"kind": "expire", "share": 0.5})
    fake.control("POST", "/control/batch-fates", {"kind": "errors", "requests": 2, "status": 500})
    upload = client.files.create(file=("in.jsonl", requests_file(4)), purpose="batch")
    expiring, erring = (
        client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for _ in range(2)
    )
    expired = ended(client, expiring.id)
    assert expired.status == "expired" and expired.expired_at
    assert len(lines_of(client, expired.output_file_id)) == 2
    assert {e["error"]["code"] for e in lines_of(client, expired.error_file_id)} == {
        "batch_expired"
    }
    partial = ended(client, erring.id)
    assert partial.status == "completed"
    errors = lines_of(client, partial.error_file_id)
    assert [e["response"]["status_code"] for e in errors] == [500, 500]
    assert len(lines_of(client, partial.output_file_id)) == 2


def test_a_fault_after_the_create_loses_only_the_answer(
    client: openai.OpenAI, fake: FakeLLM
) -> None:
    upload = client.files.create(file=("in.jsonl", requests_file(1)), purpose="batch")
    fake.control("POST", "/control/batch-faults", {"point": "create", "kind": "500", "after": True})
    with pytest.raises(openai.InternalServerError):
        client.batches.create(
            input_file_id=upload.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"docpipe_provider_batch": "pb-lost"},
        )
    [made] = client.batches.list()
    assert made.metadata == {"docpipe_provider_batch": "pb-lost"}
    fake.control(
        "POST", "/control/batch-faults", {"point": "retrieve", "kind": "hang", "hang_s": 5}
    )
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.5).batches.retrieve(made.id)
    assert client.batches.retrieve(made.id).id == made.id  # the fault was used up


def test_an_anthropic_message_batch_ends_with_its_results(
    anthropic: httpx.Client, fake: FakeLLM
) -> None:
    fake.control("POST", "/control/batch-fates", {"kind": "errors", "requests": 1, "status": 529})
    params = {
        "model": "gpt-4o-mini",
        "max_tokens": 2000,
        "system": SECTIONS["content"],
        "messages": [{"role": "user", "content": CONTRACT}],
    }
    requests = [{"custom_id": f"docpipe-call-{i}", "params": params} for i in range(3)]
    created = anthropic.post("batches", json={"requests": requests}).raise_for_status().json()
    assert created["type"] == "message_batch" and created["processing_status"] == "in_progress"
    assert created["results_url"] is None
    done = until(
        lambda: (
            b
            if (b := anthropic.get(f"batches/{created['id']}").json())["processing_status"]
            == "ended"
            else None
        )
    )
    assert done["request_counts"] == {
        "processing": 0,
        "succeeded": 2,
        "errored": 1,
        "canceled": 0,
        "expired": 0,
    }
    results = [
        json.loads(line)
        for line in httpx.get(done["results_url"], headers=anthropic.headers)
        .raise_for_status()
        .text.splitlines()
    ]
    by_type = {r["result"]["type"]: r["result"] for r in results}
    assert by_type["errored"]["error"]["error"]["type"] == "overloaded_error"
    message = by_type["succeeded"]["message"]
    assert message["type"] == "message" and message["stop_reason"] == "end_turn"
    assert json.loads(message["content"][0]["text"])["sections"]
    assert message["usage"]["input_tokens"] > 0
    assert [b["id"] for b in anthropic.get("batches", params={"limit": 5}).json()["data"]] == [
        created["id"]
    ]


def test_anthropic_validates_at_creation_and_cancels(
    anthropic: httpx.Client, fake: FakeLLM
) -> None:
    bad = anthropic.post("batches", json={"requests": [{"custom_id": "a b", "params": {}}]})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert anthropic.post("batches", json={"requests": []}).status_code == 400
    unauthorized = httpx.post(fake.url + "/v1/messages/batches", json={"requests": []})
    assert unauthorized.status_code == 401
    fake.configure(batch_completion_s=30)
    params = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    created = anthropic.post(
        "batches", json={"requests": [{"custom_id": "one", "params": params}]}
    ).json()
    assert (
        anthropic.post(f"batches/{created['id']}/cancel").json()["processing_status"] == "canceling"
    )
    done = until(lambda: (b := anthropic.get(f"batches/{created['id']}").json())["ended_at"] and b)
    assert done["request_counts"]["canceled"] == 1
    [line] = anthropic.get(f"batches/{created['id']}/results").text.splitlines()
    assert json.loads(line) == {"custom_id": "one", "result": {"type": "canceled"}}
