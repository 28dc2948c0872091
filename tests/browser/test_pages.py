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

from playwright.sync_api import Browser, Page, expect

from docpipe.state.tenants import create_api_key, revoke_api_key
from tests.browser.conftest import TENANT, UiStack, axe_violations, sign_in
from tests.processes import wait_until

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
    stored = stack.api("PUT", f"/documents/{document_id}", content=text.encode(),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
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


def test_a_run_is_followed_live_until_it_is_done(page: Page, ui_stack: UiStack) -> None:
    run_id = start_run(ui_stack)
    page.goto(f"{ui_stack.url}/ui/")
    page.get_by_label("Run id").fill(run_id)
    page.get_by_role("button", name="Open run").click()
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
    expect(page.get_by_role("cell", name="Acme <script>window.__xss = 1</script> GmbH",
                            exact=False).first).to_be_visible()  # fmt: skip
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("main script").count() == 0


def test_a_batch_shows_its_counts_and_runs_and_can_be_cancelled(
    page: Page, ui_stack: UiStack
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

    second = ui_stack.api("POST", "/batches", json={"documents": documents[:1] * 1})
    page.goto(f"{ui_stack.url}/ui/batches/{second.json()['batch_id']}")
    page.get_by_role("button", name="Cancel batch").click()
    expect(page.locator('[data-batch="status"]')).to_have_text("cancelled")


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
    assert sorted(r["document_id"] for r in rows) == ["csv-0", "csv-1", "csv-2"]
    assert {(r["result"], r["status"]) for r in rows} == {("succeeded", "done")}
    assert {r["extract_fields.fields.term_months"] for r in rows} == {"12"}
    assert {r["extract_fields.fields.total_value.amount"] for r in rows} == {"12000"}
    with page.expect_download() as lines_download:
        page.get_by_role("link", name="JSON lines").click()
    lines = Path(lines_download.value.path()).read_text(encoding="utf-8").splitlines()
    parties = [json.loads(line)["result"]["outputs"]["extract_fields"]["fields"]["parties"]
               for line in lines]  # fmt: skip
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
    stored = ui_stack.api("PUT", "/documents/theirs", content=b"TERM\nTwelve months.\n",
                          headers={"Content-Type": "text/plain",
                                   "Authorization": f"Bearer {ui_stack.other_key}"})  # fmt: skip
    assert stored.status_code in (200, 201)
    started = ui_stack.api("POST", "/documents/theirs/extract", json={"lane": "batch"},
                           headers={"Authorization": f"Bearer {ui_stack.other_key}"})  # fmt: skip
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
