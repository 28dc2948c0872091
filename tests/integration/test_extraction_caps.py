"""A document that hands its extract_text step back (its attempt refunded, as a long scan
does between deliveries) has a cap on deliveries and on workers' time: no free loops. A page
that cannot be read within one step's time fails too_slow instead of being retried."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.text_extraction import EXTRACT_TEXT
from docpipe.providers.client import LLMClient
from docpipe.settings import Settings
from docpipe.state.db import Database
from docpipe.state.documents import put_file
from docpipe.state.runs import create_run
from docpipe.statuses import ACTIVE_RUN_STATUSES
from docpipe.worker.executor import StepExecutor
from docpipe_dev.hostile import pdf as hostile_pdf
from docpipe_dev.processes import ManagedProcess
from tests.support.document_files import pdf_of_pages
from tests.support.factories import TENANT, scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

# Every page's reading uses up the step's time: each delivery reads one page, hands back.
ONE_PAGE_PER_DELIVERY = {"task_soft_time_limit_s": 10.0, "ocr_page_timeout_s": 8.0}


def run_of_pages(db: Database, pages: int) -> str:
    data = pdf_of_pages([f"{n}. CLAUSE\nThe parties agree to clause {n}." for n in range(pages)])
    with db.transaction() as tx:
        put_file(tx, TENANT, "long", io.BytesIO(data), "pdf")
        created = create_run(
            tx,
            tenant_id=TENANT,
            document_id="long",
            pipeline=DOCUMENT_EXTRACT,
            lane="interactive",
            idempotency_key="long",
            request={"document_id": "long"},
        )
    return created.run_id


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        ({"max_extraction_deliveries": 2}, "took 2 deliveries of its step without ending"),
        ({"max_extraction_s": 0.001}, "of workers' time without ending"),
    ],
    ids=["deliveries", "time"],
)
def test_a_document_read_over_deliveries_fails_too_slow_at_its_cap(
    db: Database, settings: Settings, cap: dict[str, float], message: str
) -> None:
    capped = settings.model_copy(update={**ONE_PAGE_PER_DELIVERY, **cap})
    no_provider = LLMClient(base_url="http://127.0.0.1:9", api_key="k", timeout_s=1.0)
    executor = StepExecutor(db, no_provider, capped)
    run_id = run_of_pages(db, 4)
    outcomes = []
    for _ in range(4):
        outcome = executor.run_step(run_id, EXTRACT_TEXT)
        outcomes.append(outcome.kind)
        if outcome.kind != "retry":
            break
        assert outcome.error is not None and "pages read; the rest continue" in outcome.error
    assert outcomes[-1] == "failed"
    assert outcome.run_status == "failed"
    assert outcome.error is not None and outcome.error.startswith("too_slow: "), outcome.error
    assert message in outcome.error
    pages_read = scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NOT NULL")
    assert pages_read == len(outcomes) - 1 < 4, "each delivery read a page, none after the cap"
    deliveries, attempt = scalar(
        db,
        "SELECT array[deliveries, attempt] FROM pipeline_step_result WHERE step = %s",
        EXTRACT_TEXT,
    )
    assert deliveries == len(outcomes), "every claim counts, refunded or not"
    assert attempt == 1, "each delivery that made progress was refunded"


# A step of 8 s whose PDF page limit (7.5 s) nearly fills it: a page's stages, each within
# its own limit, add up past the soft limit. Every client gives up before that soft limit.
SHORT_STEP = {
    "DOCPIPE_LLM_TIMEOUT_S": "2",
    "DOCPIPE_TASK_SOFT_TIME_LIMIT_S": "8",
    "DOCPIPE_TASK_TIME_LIMIT_S": "11",
    "DOCPIPE_PDF_PAGE_TIMEOUT_S": "7.5",
    "DOCPIPE_WEBHOOK_TIMEOUT_S": "6",
    "DOCPIPE_LIMITER_MAX_WAIT_S": "4",
    "DOCPIPE_DATABASE_STATEMENT_TIMEOUT_S": "5",
    "DOCPIPE_DATABASE_LOCK_TIMEOUT_S": "5",
    "DOCPIPE_DATABASE_SOCKET_TIMEOUT_S": "5",
    "DOCPIPE_DATABASE_POOL_TIMEOUT_S": "5",
}


def test_a_page_that_outlasts_its_step_fails_too_slow_in_a_real_worker_at_no_cost(
    db: Database,
    fake_llm: FakeLLM,
    start_api: Callable[..., str],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
) -> None:
    """Page 1 reads; page 2's text layer is read and judged, then its drawing for OCR runs
    into the step's deadline: the delivery hands the step back with page 1 on record, and
    the next, which starts with page 2 and has the whole step's time for it, fails
    too_slow. The soft limit never interrupts it (before, it did, and each of its retries
    read the page again until the run went to review)."""
    api = start_api(**SHORT_STEP)
    start_beat(**SHORT_STEP)
    worker = start_worker("interactive", concurrency=1, **SHORT_STEP)
    data = hostile_pdf.slow_at_every_stage(pages_before=1)
    stored = httpx.put(f"{api}/documents/slow", content=data, timeout=30)
    assert stored.status_code == 201, stored.text
    started = httpx.post(
        f"{api}/documents/slow/extract", headers={"Idempotency-Key": "slow"}, timeout=10
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(f"{api}/runs/{run_id}", timeout=10).json()
        return body if body["status"] not in ACTIVE_RUN_STATUSES else None

    status = wait_until(ended, timeout_s=120, every_s=0.3)
    deliveries, attempt = scalar(
        db,
        "SELECT array[deliveries, attempt] FROM pipeline_step_result WHERE run_id = %s "
        "AND step = %s",
        run_id,
        EXTRACT_TEXT,
    )
    ending = (status["status"], status["current_step"], deliveries, attempt, status["error"])
    # One hand-back, then the page fails: no retries.
    assert ending[:4] == ("failed", None, 2, 1), ending
    assert status["error"].startswith("too_slow: page 2 could not be read within one step's"), (
        ending
    )
    assert scalar(db, "SELECT count(*) FROM document_page WHERE finished_at IS NOT NULL") == 1
    assert scalar(db, "SELECT count(*) FROM llm_call_log") == 0, "no call was paid"
    assert worker.alive()
