"""Real providers on real workers: strict json_schema answers, two providers with a fallback
across them, limits of tokens per minute learned from the provider's headers, and the same
document routed to three models by priority and budget."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import redis

from docpipe.broker.transport import CeleryPublisher
from docpipe.pipelines.text_extraction import with_text_extraction
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.documents import put_document
from docpipe.state.outbox import publish_outbox
from docpipe_dev.processes import ManagedProcess, worker_argv
from docpipe_dev.samples import sample_contracts
from tests.support.factories import TENANT, new_run, scalar
from tests.support.fakellm import FakeLLM, start_fake_llm
from tests.support.processes import ProcessFactory, wait_until
from tests.support.routing_pipeline import CLASSIFY

CONTRACTS = sample_contracts(3)
PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}


def run_all(
    db: Database, publisher: CeleryPublisher, texts: list[str], **options: Any
) -> list[str]:
    ids = []
    for i, text in enumerate(texts):
        created = new_run(db, text, key=f"k{i}", document_id=f"doc-{i}", **options)
        publish_outbox(db, publisher, created.outbox_ids)
        ids.append(created.run_id)
    return ids


def ended(db: Database, run_ids: list[str], timeout_s: float = 90) -> list[str]:
    def statuses() -> list[str] | None:
        found = [
            str(scalar(db, "SELECT status FROM pipeline_run WHERE id = %s", r)) for r in run_ids
        ]
        return None if {"queued", "running"} & set(found) else found

    result: list[str] = wait_until(statuses, timeout_s)
    return result


def call_rows(db: Database, *columns: str) -> list[tuple[Any, ...]]:
    with db.session() as s:
        rows = s.conn.execute(f"SELECT {', '.join(columns)} FROM llm_call_log ORDER BY id".encode())
        return [tuple(r.values()) for r in rows.fetchall()]


def test_calls_go_out_in_strict_json_schema_mode_with_their_output_budget(
    db: Database,
    publisher: CeleryPublisher,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    start_worker(DOCPIPE_DEFAULT_MAX_TOKENS="700")
    (run_id,) = run_all(db, publisher, [CONTRACTS[0].text])
    assert ended(db, [run_id]) == ["done"]
    modes = set(
        call_rows(
            db,
            "output_mode",
            "max_tokens",
            "temperature::float",
            "seed",
            "provider",
            "finish_reason",
            "usage_estimated",
        )
    )
    assert modes == {("json_schema", 700, 0.0, None, "default", "stop", False)}
    assert set(fake_llm.stats()["by_response_format"]) == {"json_schema"}
    # The strict answers' nulls (fields a section does not state) are gone again.
    fields = scalar(
        db, "SELECT output->'fields' FROM pipeline_step_result WHERE step = 'extract_fields'"
    )
    assert fields and None not in fields.values()
    assert fields["governing_law"] == CONTRACTS[0].expected["governing_law"]


def test_an_invalid_answer_falls_back_to_a_model_on_another_provider(
    db: Database,
    publisher: CeleryPublisher,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    providers = [
        {
            "name": "main",
            "base_url": fake_llm.url + "/v1",
            "output_mode": "json_object",
            "models": {"gpt-4o-mini": {**PRICE, "fallback": "gpt-4o"}},
        },
        {"name": "backup", "base_url": "", "models": {"gpt-4o": PRICE}},
    ]
    with start_fake_llm(api_key="sk-backup") as backup:
        providers[1]["base_url"] = backup.url + "/v1"
        fake_llm.add_fault("invalid", count=1, step="extract_sections", model="gpt-4o-mini")
        start_worker(
            DOCPIPE_PROVIDERS=json.dumps(providers), DOCPIPE_PROVIDER_BACKUP_API_KEY="sk-backup"
        )
        (run_id,) = run_all(db, publisher, [CONTRACTS[1].text])
        assert ended(db, [run_id]) == ["done"]
        assert backup.stats()["by_step"] == {"extract_sections": 1}
    sections = [
        r
        for r in call_rows(db, "step", "model", "provider", "status", "route_reason", "output_mode")
        if r[0] == "extract_sections"
    ]
    assert sections == [
        ("extract_sections", "gpt-4o-mini", "main", "invalid_output", "preferred", "json_object"),
        ("extract_sections", "gpt-4o", "backup", "ok", "fallback", "json_schema"),
    ]


def test_token_limits_the_provider_states_in_its_headers_pace_every_worker(
    db: Database,
    publisher: CeleryPublisher,
    broker: redis.Redis,
    start_worker: Callable[..., ManagedProcess],
) -> None:
    """docpipe is told no limit; the provider allows 24,000 tokens a minute and says so in
    x-ratelimit-* headers. Three contracts need about twice that: the workers wait for the
    provider's bucket instead of running into 429s."""
    with start_fake_llm(tpm=24_000) as provider:
        start_worker(
            concurrency=3,
            DOCPIPE_LLM_BASE_URL=provider.url + "/v1",
            DOCPIPE_DEFAULT_MAX_TOKENS="300",
        )
        run_ids = run_all(db, publisher, [c.text for c in CONTRACTS])
        assert ended(db, run_ids, timeout_s=240) == ["done"] * 3
        stats = provider.stats()
    used = int(
        scalar(db, "SELECT sum(input_tokens + output_tokens) FROM llm_call_log WHERE status = 'ok'")
    )
    assert used > 24_000, "the runs needed more than the provider's minute allowed"
    stated = broker.hget("docpipe:limiter:{default}:model:gpt-4o-mini:tokens", "stated")
    assert stated is not None and float(stated) == 24_000
    assert stats["by_status"].get("429", 0) <= 2, stats["by_status"]


def test_the_same_document_goes_to_three_models_by_priority_and_budget(
    db: Database,
    publisher: CeleryPublisher,
    broker: redis.Redis,
    fake_llm: FakeLLM,
    start_process: ProcessFactory,
) -> None:
    models = {
        "balanced": {"input_per_mtok": 10, "output_per_mtok": 40},
        "fast": {"input_per_mtok": 100, "output_per_mtok": 400, "speed": "fast"},
        "cheap": {"input_per_mtok": 1, "output_per_mtok": 4, "speed": "slow"},
        # The built-in pipelines' models: a worker refuses a catalog asking a model it lacks.
        "gpt-4o-mini": PRICE,
        "gpt-4o": PRICE,
    }
    providers = [{"name": "fake", "base_url": fake_llm.url + "/v1", "models": models}]
    start_process(
        "worker-interactive",
        worker_argv("interactive", concurrency=2),
        r"\bready\.",
        DOCPIPE_PROVIDERS=json.dumps(providers),
        DOCPIPE_PIPELINE_MODULES="tests.support.routing_pipeline",
    )
    text = "Server room flooded on Monday; the backup generator fails at 4 pm. Call Dana."
    cases = [  # (priority, budget): fast costs ~$0.09 a call, balanced ~$0.009, cheap ~$0.0009
        ("urgent", None),
        ("normal", None),
        ("low", None),
        ("urgent", Decimal("0.05")),
    ]
    loaded = with_text_extraction(CLASSIFY)  # as the worker's catalog loads it
    run_ids: list[str] = []
    outbox: tuple[int, ...] = ()
    with db.transaction() as tx:
        put_document(tx, TENANT, "memo", text)
        for i, (priority, budget) in enumerate(cases):
            created = runs.create_run(
                tx,
                tenant_id=TENANT,
                document_id="memo",
                pipeline=loaded,
                lane="interactive",
                idempotency_key=f"route-{i}",
                request={"case": i},
                priority=priority,
                budget_usd=budget,
            )
            run_ids.append(created.run_id)
            outbox += created.outbox_ids
    publish_outbox(db, publisher, outbox)
    assert ended(db, run_ids) == ["done"] * 4
    choices = [runs.run_progress(db, TENANT, run_id).steps[1].model_choices for run_id in run_ids]
    assert choices == [
        [{"model": "fast", "reason": "fastest", "calls": 1}],
        [{"model": "balanced", "reason": "preferred", "calls": 1}],
        [{"model": "cheap", "reason": "cheapest", "calls": 1}],
        [{"model": "balanced", "reason": "within_budget", "calls": 1}],
    ]
    assert fake_llm.stats()["by_step"] == {"json_schema": 4}
