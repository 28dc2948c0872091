"""The web pages in a real headless Chromium against a real stack (API process, workers,
beat, PostgreSQL, Redis, the fake provider): signing in and out, a run followed live until
it is done, a batch, the refusals (CSRF, another tenant, a revoked key), escaping, and
axe-core on every page."""

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import openpyxl
from playwright.sync_api import Browser, Page, expect

from docpipe.state.tenants import create_api_key, revoke_api_key
from docpipe_dev.samples import sample_contracts
from tests.browser.conftest import TENANT, UiStack, axe_violations, sign_in
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACT = """SUPPLY AGREEMENT

This Supply Agreement (the "Agreement") is made between Acme <script>window.__xss = 1</script> GmbH ("Supplier") and Beta Retail Ltd ("Buyer").

1. TERM
This Agreement shall remain in force for an initial term of twelve (12) months.

2. PRICE
The total contract value is EUR 12,000.

3. LAW
This Agreement is governed by the laws of Germany.
"""  # noqa: E501


def start_run(stack: UiStack, text: str = CONTRACT, *, waiting: bool = False) -> str:
    """A run of the contract; ``waiting``: one that starts in an hour (to cancel it)."""
    document_id = f"doc-{uuid.uuid4().hex[:8]}"
    stored = stack.api(
        "PUT",
        f"/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert stored.status_code in (200, 201), stored.text
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    options = {"start_at": later} if waiting else {}
    started = stack.api("POST", f"/documents/{document_id}/extract", json=options)
    assert started.status_code == 202, started.text
    return str(started.json()["run_id"])


def test_signing_in_and_out(chromium: Browser, ui_stack: UiStack) -> None:
    context = chromium.new_context()
    page = context.new_page()
    page.goto(f"{ui_stack.url}/ui/")
    expect(page.get_by_role("status")).to_have_text("Sign in with an API key to see this page.")
    assert axe_violations(page) == []
    page.get_by_label("API key").fill("dp_000000000000_" + "x" * 43)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    sign_in(page, ui_stack)
    expect(page.get_by_text(f"Tenant {TENANT}")).to_be_visible()
    assert axe_violations(page) == []
    cookie = next(c for c in context.cookies() if c["name"] == "docpipe_ui")
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/ui")
    assert ui_stack.api_key not in cookie["value"]
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status")).to_have_text("You are signed out.")
    page.goto(f"{ui_stack.url}/ui/")
    assert "/ui/sign-in" in page.url
    context.close()


def test_a_run_is_found_by_its_documents_name_and_followed_live_until_it_is_done(
    page: Page, ui_stack: UiStack
) -> None:
    run_id = start_run(ui_stack)
    document = ui_stack.api("GET", f"/runs/{run_id}").json()["document_id"]
    page.goto(f"{ui_stack.url}/ui/")
    page.get_by_label("Find runs by document name").fill(document[:8])
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs")
    page.get_by_role("link", name=document).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(run_id)
    expect(page.locator('[data-run="status"]')).to_have_text("done", timeout=60_000)
    expect(page.locator('tr[data-step="summarize"] [data-step-field="status"]')).to_have_text(
        "done"
    )
    expect(page.get_by_role("heading", name="Values")).to_be_visible()
    assert axe_violations(page) == []


def test_html_in_a_document_is_shown_as_text_and_never_runs(page: Page, ui_stack: UiStack) -> None:
    run_id = start_run(ui_stack)
    page.goto(f"{ui_stack.url}/ui/runs/{run_id}")
    expect(page.locator('[data-run="status"]')).to_have_text("done", timeout=60_000)
    # The party's name as the document has it, script tag and all, as text on the page.
    expect(
        page.get_by_role(
            "cell", name="Acme <script>window.__xss = 1</script> GmbH", exact=False
        ).first
    ).to_be_visible()
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("main script").count() == 0


def test_a_batch_shows_its_counts_and_runs_and_can_be_cancelled(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    documents = [{"id": f"b-{i}", "text": CONTRACT} for i in range(3)]
    submitted = ui_stack.api("POST", "/batches", json={"documents": documents})
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["batch_id"]
    page.goto(f"{ui_stack.url}/ui/batches/{batch_id}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(batch_id)
    rows = page.locator('[data-batch="runs"] tr')
    expect(rows).to_have_count(3)
    assert axe_violations(page) == []
    expect(page.locator('[data-batch="status"]')).to_have_text("done", timeout=90_000)
    expect(page.locator('[data-batch="counts"]')).to_contain_text("done 3")
    expect(rows.locator(".badge")).to_have_text(["done"] * 3)

    # A batch still running when the button is pressed: a text of its own (the first batch's
    # answers would be reused at once) whose calls hang until the call timeout, three times.
    fake_llm_server.add_fault("hang", count=3, hang_s=60)
    try:
        held = {"id": "b-held", "text": f"{CONTRACT}\nReference: {uuid.uuid4().hex}"}
        second = ui_stack.api("POST", "/batches", json={"documents": [held]})
        page.goto(f"{ui_stack.url}/ui/batches/{second.json()['batch_id']}")
        page.get_by_role("button", name="Cancel batch").click()
        expect(page.locator('[data-batch="status"]')).to_have_text("cancelled")
    finally:
        fake_llm_server.reset()


def test_a_finished_batchs_csv_is_downloaded_with_a_row_per_document(
    page: Page, ui_stack: UiStack
) -> None:
    documents = [{"id": f"csv-{i}", "text": f"{CONTRACT}\nReference csv-{i}.\n"} for i in range(3)]
    submitted = ui_stack.api("POST", "/batches", json={"documents": documents})
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["batch_id"]
    page.goto(f"{ui_stack.url}/ui/batches/{batch_id}")
    expect(page.locator('[data-batch="status"]')).to_have_text("done", timeout=90_000)
    with page.expect_download() as csv_download:
        page.get_by_role("link", name="CSV").click()
    assert csv_download.value.suggested_filename == f"batch-{batch_id}.csv"
    text = Path(csv_download.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["Document"] for r in rows] == ["csv-0", "csv-1", "csv-2"], "in the order sent"
    assert {(r["Result"], r["Status"]) for r in rows} == {("succeeded", "done")}
    assert {r["Term months"] for r in rows} == {"12"}
    assert {r["Total value: amount"] for r in rows} == {"12000"}
    with page.expect_download() as book_download:
        page.get_by_role("link", name="Excel (values and evidence)").click()
    assert book_download.value.suggested_filename == f"batch-{batch_id}.xlsx"
    book = openpyxl.load_workbook(io.BytesIO(Path(book_download.value.path()).read_bytes()))
    assert book.sheetnames == ["Values", "Evidence"]
    assert [row[0] for row in book["Values"].iter_rows(min_row=3, values_only=True)] == [
        "csv-0",
        "csv-1",
        "csv-2",
    ]
    assert {row[7] for row in book["Evidence"].iter_rows(min_row=2, values_only=True)} == {
        "supported"
    }
    with page.expect_download() as lines_download:
        page.get_by_role("link", name="JSON lines").click()
    lines = Path(lines_download.value.path()).read_text(encoding="utf-8").splitlines()
    parties = [
        json.loads(line)["result"]["outputs"]["extract_fields"]["fields"]["parties"]
        for line in lines
    ]
    assert [p[0]["name"] for p in parties] == ["Acme <script>window.__xss = 1</script> GmbH"] * 3


def test_a_form_with_a_forged_csrf_token_is_refused_and_changes_nothing(
    page: Page, ui_stack: UiStack
) -> None:
    run_id = start_run(ui_stack, waiting=True)
    page.goto(f"{ui_stack.url}/ui/runs/{run_id}")
    token = page.locator('form[action$="/cancel"] input[name="csrf_token"]')
    token.evaluate("input => { input.value = 'forged' + input.value.slice(6) }")
    with page.expect_response(re.compile(r"/cancel$")) as answer:
        page.get_by_role("button", name="Cancel run").click()
    assert answer.value.status == 403
    expect(page.get_by_role("alert")).to_contain_text("missing or forged CSRF token")
    expect(page.get_by_role("alert")).to_contain_text("Nothing was changed")
    assert ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "queued"


def test_a_form_posted_from_another_site_carries_no_session(
    chromium: Browser, ui_stack: UiStack
) -> None:
    context = chromium.new_context()
    page = context.new_page()
    sign_in(page, ui_stack)
    run_id = start_run(ui_stack, waiting=True)
    # A page of another site (no origin of ours, none of our CSP) posts a form to the
    # run's cancel, as a forged link would.
    page.goto("about:blank")
    page.set_content(f'''<form method="post" action="{ui_stack.url}/ui/runs/{run_id}/cancel">
        <input name="csrf_token" value="guessed"><button>Win a prize</button></form>''')
    with page.expect_navigation():
        page.get_by_role("button", name="Win a prize").click()
    # SameSite=Strict: the session cookie stayed home, so the request is nobody's.
    assert "/ui/sign-in?why=required" in page.url
    assert ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "queued"
    context.close()


def test_another_tenants_run_is_not_found(page: Page, ui_stack: UiStack) -> None:
    stored = ui_stack.api(
        "PUT",
        "/documents/theirs",
        content=b"TERM\nTwelve months.\n",
        headers={"Content-Type": "text/plain", "Authorization": f"Bearer {ui_stack.other_key}"},
    )
    assert stored.status_code in (200, 201)
    started = ui_stack.api(
        "POST",
        "/documents/theirs/extract",
        json={"lane": "batch"},
        headers={"Authorization": f"Bearer {ui_stack.other_key}"},
    )
    theirs = started.json()["run_id"]
    answer = page.goto(f"{ui_stack.url}/ui/runs/{theirs}")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    assert theirs in page.get_by_role("alert").inner_text()
    assert axe_violations(page) == []


def test_a_revoked_keys_session_is_sent_to_sign_in(chromium: Browser, ui_stack: UiStack) -> None:
    created = create_api_key(ui_stack.db, TENANT, "short-lived")
    context = chromium.new_context()
    page = context.new_page()
    sign_in(page, ui_stack, created.plaintext)
    revoke_api_key(ui_stack.db, created.key.id)
    page.goto(f"{ui_stack.url}/ui/")
    expect(page.get_by_role("status")).to_contain_text("was revoked")
    context.close()


def test_the_run_page_ends_when_the_run_ends_and_cancel_is_offered_only_while_active(
    page: Page, ui_stack: UiStack
) -> None:
    run_id = start_run(ui_stack, waiting=True)
    page.goto(f"{ui_stack.url}/ui/runs/{run_id}")
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator('[data-run="status"]')).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    page.get_by_label("Retry from").select_option("extract_text")
    page.get_by_role("button", name="Retry run").click()
    wait_until(lambda: ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "done", 90)
    # The step chosen ran again, in a worker (create_run had done a known text's, attempt 0).
    first = ui_stack.api("GET", f"/runs/{run_id}").json()["steps"][0]
    assert (first["step"], first["attempt"]) == ("extract_text", 1)


def test_the_home_page_shows_the_tenants_work_and_leads_to_every_list(
    page: Page, ui_stack: UiStack
) -> None:
    """The dashboard: a batch with its progress and cost, recent runs, the runs by status and
    the review backlog, each leading to its list; the lists page by page; axe on each."""
    documents = [{"id": f"home-{uuid.uuid4().hex[:6]}-{i}", "text": CONTRACT} for i in range(2)]
    submitted = ui_stack.api("POST", "/batches", json={"documents": documents})
    assert submitted.status_code == 202, submitted.text
    batch_id = submitted.json()["batch_id"]
    wait_until(
        lambda: ui_stack.api("GET", f"/batches/{batch_id}").json()["status"] == "done",
        timeout_s=90,
    )
    page.goto(f"{ui_stack.url}/ui/")
    expect(page.get_by_role("heading", name="Recent batches")).to_be_visible()
    batch_row = page.get_by_role("row").filter(has=page.locator(f'th a[href$="{batch_id}"]'))
    expect(batch_row.get_by_role("progressbar")).to_have_attribute("value", "2")
    expect(batch_row).to_contain_text("2 of 2")
    expect(batch_row.locator(".badge")).to_have_text("done")
    expect(page.get_by_role("link", name=documents[1]["id"])).to_be_visible()
    done = page.locator('[data-count="done"]')
    assert int(done.inner_text().rstrip("+").replace(",", "")) >= 2
    expect(page.get_by_role("heading", name="Waiting for a person")).to_be_visible()
    assert axe_violations(page) == []

    page.get_by_role("link", name="All batches").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Batches")
    expect(page.locator(f'a[href$="/ui/batches/{batch_id}"]')).to_be_visible()
    assert axe_violations(page) == []
    page.get_by_label("Status").select_option("running")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(f'a[href$="/ui/batches/{batch_id}"]')).to_have_count(0)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Home").click()
    page.locator('a:has([data-count="done"])').click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Runs")
    expect(page.get_by_label("Status")).to_have_value("done")
    expect(page.get_by_role("link", name=documents[0]["id"])).to_be_visible()
    assert axe_violations(page) == []


def test_an_evaluations_report_and_two_versions_compared_field_by_field(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    contracts = sample_contracts(4)
    made = ui_stack.api(
        "POST",
        "/evaluation-sets",
        json={"name": "ui-contracts", "pipeline": "document_extract", "step": "extract_fields"},
    )
    assert made.status_code == 201, made.text
    lines = b"".join(
        json.dumps(
            {"document": {"id": c.slug, "text": c.text}, "expected": {"fields": c.expected}}
        ).encode()
        + b"\n"
        for c in contracts
    )
    added = ui_stack.api(
        "POST",
        "/evaluation-sets/ui-contracts/items?source=samples",
        content=lines,
        headers={"Content-Type": "application/jsonl"},
    )
    assert added.status_code == 200, added.text
    # gpt-4o gets half of its values wrong (by seed: the same ones every time).
    fake_llm_server.control(
        "POST", "/control/mistakes", json={"error_rates": {"gpt-4o": 0.5}, "seed": 5}
    )
    try:
        right, wrong = (
            evaluated(ui_stack, {"set": "ui-contracts", "pipeline": "document_extract:v1", **o})
            for o in ({}, {"models": {"extract_fields": "gpt-4o"}})
        )
    finally:
        fake_llm_server.control("POST", "/control/mistakes", json={})

    page.goto(f"{ui_stack.url}/ui/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Evaluations").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Evaluations")
    expect(page.locator('tr[data-set="ui-contracts"]')).to_contain_text("document_extract")
    expect(page.locator(f'tr[data-evaluation="{wrong}"]')).to_contain_text("reported")
    assert axe_violations(page) == []

    page.get_by_label("Baseline").select_option(right)
    page.get_by_label("Candidate").select_option(wrong)
    page.get_by_role("button", name="Compare").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Candidate against baseline")
    expect(page.locator('[data-compare="accuracy"]')).to_contain_text("100.0 % →")
    term = page.locator('tr[data-field="fields.term_months"]')
    expect(term.get_by_role("meter")).to_have_count(2)  # the two versions side by side
    expect(term.get_by_role("meter").first).to_have_attribute("value", "1.0")
    worse = page.locator('[data-compare="flipped_to_wrong"] a')
    assert worse.count() > 0, "gpt-4o got some values wrong that the default model got right"
    expect(page.locator('[data-compare="flipped_to_right"]')).to_have_text("None.")
    assert axe_violations(page) == []

    flipped = worse.first.text_content()
    worse.first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(flipped or "")
    diff = page.locator("table.diff tbody tr")
    assert diff.count() > 0
    expect(diff.first.locator(".quote, .muted").first).to_be_visible()  # its evidence
    assert axe_violations(page) == []

    page.get_by_role("link", name=f"Evaluation {wrong[:8]}").click()
    expect(page.locator('[data-evaluation="status"]')).to_have_text("reported")
    fields = page.locator("table.chart tbody tr")
    assert fields.count() >= 8
    expect(page.locator(f'tr[data-document="{flipped}"]')).to_be_visible()
    assert axe_violations(page) == []


def evaluated(stack: UiStack, wanted: dict[str, object]) -> str:
    """An evaluation started through the API, once it is reported."""
    started = stack.api("POST", "/evaluations", json=wanted)
    assert started.status_code == 202, started.text
    evaluation_id: str = started.json()["id"]
    wait_until(
        lambda: stack.api("GET", f"/evaluations/{evaluation_id}").json()["status"] == "reported",
        timeout_s=180,
        every_s=0.5,
    )
    return evaluation_id
