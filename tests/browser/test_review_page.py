"""The review pages in a real headless Chromium against a real stack: a run of
document_extract:v1 whose model invented one section's quotes pauses for review; a person
finds it in the queue, sees a value's quote highlighted in the document, corrects a field,
adds a party, approves, and watches the run reach ``done``. The refusals happen on the
page: an edit that breaks the schema (next to its field), a stale form (409). axe-core
checks the queue and the review page."""

from __future__ import annotations

import re
import uuid

from playwright.sync_api import Page, expect

from docpipe_dev.sample_files import contract_scan
from tests.browser.conftest import UiStack, axe_violations
from tests.browser.test_pages import CONTRACT
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until


def run_in_review(stack: UiStack, fake: FakeLLM, text: str = CONTRACT) -> str:
    """A run whose extract_fields got one answer with quotes the document does not have:
    document_extract's review_if (unsupported evidence) pauses it for a person. Each
    document differs, so that no earlier approval of the same input is reused."""
    fake.reset()
    fake.add_fault("invented_quote", count=1, step="extract_fields")
    document_id = f"doc-{uuid.uuid4().hex[:8]}"
    text += f"\nReference {document_id}.\n"
    stored = stack.api(
        "PUT",
        f"/documents/{document_id}",
        content=text.encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert stored.status_code in (200, 201), stored.text
    run_id = str(stack.api("POST", f"/documents/{document_id}/extract").json()["run_id"])

    def paused() -> bool:
        status = stack.api("GET", f"/runs/{run_id}").json()["status"]
        assert status in ("queued", "running", "needs_review"), status
        return status == "needs_review"

    wait_until(paused, timeout_s=60, every_s=0.2)
    return run_id


def test_a_review_is_found_in_the_queue_and_its_quotes_shown_in_the_text(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reviews").click()
    row = page.get_by_role("row").filter(has_text=run_id[:8])
    expect(row).to_contain_text("extract_fields")
    expect(row).to_contain_text("rule")
    expect(row.get_by_role("cell").first).to_have_text(re.compile(r"^\d+ (s|min)$"))
    assert axe_violations(page) == []
    row.get_by_role("link", name=f"Review {run_id[:8]}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(run_id)
    expect(page.get_by_text("✗ quote not in the document").first).to_be_visible()
    assert axe_violations(page) == []

    # A supported value's quote, by its button and by clicking the value itself.
    supported = page.locator(".value-row, fieldset").filter(
        has=page.locator(":scope > .evidence .mark.supported")
    )
    button = supported.first.locator(":scope > .evidence button").first
    button.click()
    expect(button).to_have_attribute("aria-pressed", "true")
    mark = page.locator(".page-text:not([hidden]) mark")
    expect(mark).to_have_count(1)
    expect(mark).to_be_visible()
    quoted = button.inner_text().split("“", 1)[1].rstrip("”").rstrip("…")
    assert quoted.split()[0].strip('"(') in mark.inner_text()
    # Clicking a value shows its own quote.
    value = page.locator(".value-row").filter(has=page.locator(".mark.supported")).last
    value.locator("input, select, textarea").first.click()
    own = value.locator(".evidence button").first.inner_text().split("“", 1)[1].rstrip("”…")
    expect(mark).to_contain_text(own.split()[0].strip('"('))
    # A value whose quote is not in the document says so, and highlights nothing.
    invented = page.locator(".evidence li").filter(has=page.locator(".mark.unsupported")).first
    invented.get_by_role("button").click()
    expect(mark).to_have_count(0)
    expect(page.locator("#quote-notice")).to_have_text(
        "This value's quote was not found in the document."
    )
    # HTML in the document and in the model's answer is text on the page; nothing ran.
    expect(page.locator(".page-text:not([hidden])")).to_contain_text("<script>window.__xss = 1")
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_a_corrected_field_and_an_added_party_are_approved_and_the_run_ends_done(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    page.get_by_label("Term months", exact=True).fill("24")
    parties = page.locator("fieldset[data-array]").filter(has_text="Parties").first
    parties.get_by_role("button", name="Add to parties").click()
    new_item = parties.locator("[data-item]").last
    new_item.get_by_label(re.compile("^Name")).fill("Gamma Logistics <b>AG</b>")
    new_item.get_by_label(re.compile("^Role")).fill("carrier")
    page.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_url(f"{ui_stack.url}/ui/runs/{run_id}")
    expect(page.locator('[data-run="status"]')).to_have_text("done", timeout=60_000)
    result = ui_stack.api("GET", f"/runs/{run_id}").json()
    fields = result["result"]["extract_fields"]["fields"]
    assert fields["term_months"] == 24
    assert fields["parties"][-1] == {"name": "Gamma Logistics <b>AG</b>", "role": "carrier"}
    (decision,) = result["decisions"]
    assert (decision["action"], decision["reviewer_name"]) == ("approve", "Ada Reviewer")
    expect(
        page.get_by_role("cell", name="Gamma Logistics <b>AG</b>", exact=False).first
    ).to_be_visible()


def test_an_edit_that_breaks_the_schema_is_shown_next_to_the_field(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    currency = page.locator('[data-pointer="/fields/total_value/currency"]')
    currency.get_by_label(re.compile("^Currency")).fill("euros")
    page.get_by_label("Term months", exact=True).fill("36")
    with page.expect_response(f"{ui_stack.url}/ui/reviews/{run_id}") as answer:
        page.get_by_role("button", name="Approve", exact=True).click()
    assert answer.value.status == 422
    expect(page.get_by_role("alert").first).to_contain_text("breaks step extract_fields's schema")
    expect(currency.locator(".field-error")).to_contain_text("does not match")
    expect(currency.get_by_label(re.compile("^Currency"))).to_have_value("euros")
    expect(currency.get_by_label(re.compile("^Currency"))).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Term months", exact=True)).to_have_value(
        "36"
    )  # nothing typed is lost
    assert ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "needs_review"
    assert axe_violations(page) == []


def test_a_stale_form_shows_the_409_on_the_page(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    other = page.context.new_page()
    other.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    other.get_by_label("Why reject it").fill("a duplicate")
    other.get_by_role("button", name="Reject", exact=True).click()
    other.wait_for_url(f"{ui_stack.url}/ui/runs/{run_id}")
    other.close()
    with page.expect_response(f"{ui_stack.url}/ui/reviews/{run_id}") as answer:
        page.get_by_role("button", name="Approve", exact=True).click()
    assert answer.value.status == 409
    expect(page.get_by_role("alert")).to_contain_text("Ada Reviewer decided reject")
    expect(page.get_by_role("alert")).to_contain_text("Nothing was decided")
    assert ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "failed"


SCANNED = """SUPPLY AGREEMENT

This Supply Agreement (the "Agreement") is made between Acme GmbH ("Supplier") and Beta Retail Ltd ("Buyer").

1. TERM
This Agreement shall remain in force for an initial term of twelve (12) months.

2. PRICE
The total contract value is EUR 12,000.

3. LAW
This Agreement is governed by the laws of Germany.
"""  # noqa: E501


def test_a_scanned_contracts_review_shows_a_values_quote_boxed_on_the_page_image(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    fake_llm_server.reset()
    fake_llm_server.add_fault("invented_quote", count=1, step="extract_fields")
    document_id = f"scan-{uuid.uuid4().hex[:8]}"
    stored = ui_stack.api(
        "PUT",
        f"/documents/{document_id}",
        content=contract_scan(SCANNED),
        headers={"Content-Type": "application/pdf"},
    )
    assert stored.status_code in (200, 201), stored.text
    run_id = ui_stack.api("POST", f"/documents/{document_id}/extract").json()["run_id"]
    wait_until(
        lambda: ui_stack.api("GET", f"/runs/{run_id}").json()["status"] == "needs_review",
        timeout_s=120,
        every_s=0.5,
    )
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    expect(page.locator(".review-head .meta")).to_contain_text(f"{document_id} (pdf)")
    # The page as an image is asked for first (GET /documents/{id}/pages/{n}).
    assert page.locator("#page-image").get_attribute("src") == (
        f"/ui/documents/{document_id}/pages/1"
    )
    term = page.locator('[data-pointer="/fields/term_months"]')
    expect(term.get_by_label("Term months", exact=True)).to_have_value("12")
    image = page.locator("#page-image")
    expect(image).to_have_js_property("complete", True)
    assert image.evaluate("i => i.naturalWidth") > 0, "the page image was served"
    supported = page.locator(".value-row").filter(has=page.locator(".mark.supported")).first
    supported.locator("input, select, textarea").first.click()
    # The quote's box over the page image, inside it and not empty.
    box = page.locator("[data-quote-box]").first
    expect(box).to_be_visible()
    shown, over = box.bounding_box(), image.bounding_box()
    assert shown is not None and over is not None
    assert shown["width"] > 5 and shown["height"] > 3
    assert over["x"] <= shown["x"] and shown["x"] + shown["width"] <= over["x"] + over["width"]
    assert over["y"] <= shown["y"] and shown["y"] + shown["height"] <= over["y"] + over["height"]
    assert axe_violations(page) == []
