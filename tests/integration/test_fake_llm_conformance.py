"""The fake provider driven by the official ``openai`` client, as a user's code would drive a
real provider: if the fake is a faithful stand-in, the client parses everything it sends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from pydantic import BaseModel

from tests.support.fakellm import FakeLLM, start_fake_llm

SYSTEM = {"role": "system", "content": "You read invoices."}
USER = {"role": "user", "content": "Invoice INV-20931 from Acme Ltd, total 1,250.00 EUR."}
INVOICE = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "pattern": "^INV-[0-9]{5}$"},
        "total": {"type": "number", "minimum": 0},
        "lines": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "paid": {"type": ["boolean", "null"]},
    },
    "required": ["number", "total", "lines", "paid"],
    "additionalProperties": False,
}

INVOICE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "invoice", "strict": True, "schema": INVOICE},
}


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    with start_fake_llm(api_key="sk-test", tpm=100_000, rpm=600) as fake:
        yield fake


@pytest.fixture
def client(fake_server: FakeLLM) -> Iterator[openai.OpenAI]:
    fake_server.reset()
    with openai.OpenAI(base_url=fake_server.url + "/v1", api_key="sk-test", max_retries=0) as c:
        yield c


def test_a_json_schema_completion_parses_with_usage(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[SYSTEM, USER],  # type: ignore[list-item]
        response_format=INVOICE_FORMAT,  # type: ignore[arg-type]
        max_tokens=200,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    answer = json.loads(choice.message.content or "")
    assert answer["number"].startswith("INV-") and len(answer["number"]) == 9
    assert set(answer) == {"number", "total", "lines", "paid"}
    assert completion.usage is not None
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_the_clients_structured_parse_helper_accepts_the_answer(client: openai.OpenAI) -> None:
    class Invoice(BaseModel):
        number: str
        total: float
        lines: list[str]

    parsed = client.chat.completions.parse(
        model="gpt-4o-mini",
        messages=[SYSTEM, USER],  # type: ignore[list-item]
        response_format=Invoice,
    )
    assert isinstance(parsed.choices[0].message.parsed, Invoice)


def test_a_schema_strict_mode_refuses_is_a_400_the_client_raises(client: openai.OpenAI) -> None:
    loose = {**INVOICE, "additionalProperties": True}
    with pytest.raises(openai.BadRequestError, match="additionalProperties") as caught:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[SYSTEM, USER],  # type: ignore[list-item]
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "invoice", "strict": True, "schema": loose},
            },
        )
    assert caught.value.status_code == 400


def test_strict_mode_judges_each_schema_sent_however_often_it_was_seen(
    client: openai.OpenAI,
) -> None:
    # The fake provider remembers what it found in a schema (clients send the same few with
    # every call); an accepted schema must not make a refused one pass, nor the reverse.
    loose = {**INVOICE, "additionalProperties": True}
    for schema, refused in ((INVOICE, False), (loose, True), (loose, True), (INVOICE, False)):
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": "invoice", "strict": True, "schema": schema},
        }
        if refused:
            with pytest.raises(openai.BadRequestError, match="additionalProperties"):
                client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[SYSTEM, USER],  # type: ignore[list-item]
                    response_format=response_format,
                )
        else:
            answer = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[SYSTEM, USER],  # type: ignore[list-item]
                response_format=response_format,
            )
            assert set(json.loads(answer.choices[0].message.content or "{}")) == set(
                INVOICE["properties"]
            )


def test_errors_map_to_the_clients_exceptions(client: openai.OpenAI, fake_server: FakeLLM) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=fake_server.url + "/v1", api_key="wrong", max_retries=0
        ).models.list()
    fake_server.add_fault("429", retry_after=3)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=[SYSTEM, USER])  # type: ignore[list-item]
    assert limited.value.response.headers["retry-after"] == "3"
    fake_server.add_fault("503")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[SYSTEM, USER])  # type: ignore[list-item]


def test_rate_limit_headers_come_with_every_answer(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[SYSTEM, USER],
        max_tokens=100,  # type: ignore[list-item]
    )
    headers = raw.headers
    assert headers["x-ratelimit-limit-requests"] == "600"
    assert headers["x-ratelimit-limit-tokens"] == "100000"
    assert int(headers["x-ratelimit-remaining-tokens"]) < 100_000
    assert headers["x-ratelimit-reset-tokens"].endswith(("ms", "s"))
    assert raw.parse().choices[0].message.content


def test_models_are_listed(client: openai.OpenAI) -> None:
    assert {m.id for m in client.models.list()} >= {"gpt-4o-mini", "gpt-4o"}


def test_streaming_yields_the_answer_in_chunks_then_the_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[SYSTEM, USER],  # type: ignore[list-item]
        response_format=INVOICE_FORMAT,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert set(json.loads(text)) == set(INVOICE["properties"])  # type: ignore[arg-type]
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_an_answer_past_max_tokens_is_cut_off_with_finish_reason_length(
    client: openai.OpenAI,
) -> None:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[SYSTEM, USER],  # type: ignore[list-item]
        response_format=INVOICE_FORMAT,  # type: ignore[arg-type]
        max_tokens=3,
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    with pytest.raises(json.JSONDecodeError):
        json.loads(completion.choices[0].message.content or "")
