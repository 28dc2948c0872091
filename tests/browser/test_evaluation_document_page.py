"""An evaluation's document in the browser (issue 34, item 7): what its run got wrong, with
the quote it gave, next to the page image of the scanned contract it was read from."""

from __future__ import annotations

import json
import uuid

from playwright.sync_api import Page, expect

from docpipe_dev.sample_files import contract_scan
from tests.browser.conftest import UiStack, axe_violations
from tests.browser.test_pages import evaluated
from tests.browser.test_review_page import SCANNED
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until


def test_a_documents_diff_stands_next_to_its_page_image_with_its_evidence(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    fake_llm_server.reset()
    document_id = f"scan-{uuid.uuid4().hex[:8]}"
    stored = ui_stack.api(
        "PUT",
        f"/documents/{document_id}",
        content=contract_scan(SCANNED),
        headers={"Content-Type": "application/pdf"},
    )
    assert stored.status_code in (200, 201), stored.text
    # What the pipeline reads from the scan, except that the set expects another term.
    run_id = ui_stack.api("POST", f"/documents/{document_id}/extract").json()["run_id"]
    done = wait_until(
        lambda: (r := ui_stack.api("GET", f"/runs/{run_id}").json())["status"] == "done" and r,
        timeout_s=120,
        every_s=0.5,
    )
    fields = done["result"]["extract_fields"]["fields"]
    assert fields["term_months"] == 12
    set_name = f"scans-{document_id}"
    made = ui_stack.api(
        "POST",
        "/evaluation-sets",
        json={"name": set_name, "pipeline": "document_extract", "step": "extract_fields"},
    )
    assert made.status_code == 201, made.text
    item = {"document": document_id, "expected": {"fields": {**fields, "term_months": 24}}}
    added = ui_stack.api(
        "POST",
        f"/evaluation-sets/{set_name}/items",
        content=json.dumps(item).encode() + b"\n",
        headers={"Content-Type": "application/jsonl"},
    )
    assert added.status_code == 200, added.text
    evaluation_id = evaluated(ui_stack, {"set": set_name, "pipeline": "document_extract:v1"})

    page.goto(f"{ui_stack.url}/ui/evaluations/{evaluation_id}")
    page.locator(f'tr[data-document="{document_id}"] a').first.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(document_id)
    term = page.locator('tr[data-pointer="/fields/term_months"]')
    expect(term.locator(".outcome-wrong")).to_have_text("wrong")
    cells = term.locator("td")
    expect(cells.nth(1)).to_have_text("24")  # expected
    expect(cells.nth(2)).to_have_text("12")  # got
    quote = term.locator(".quote")
    expect(quote).to_contain_text("twelve (12) months")
    expect(quote).to_contain_text("page 1")
    expect(quote.locator(".mark.supported")).to_have_text("in the document")
    assert page.locator("table.diff tbody tr").count() == 1, "the other values were right"
    # The page the quote names, as an image, beside the diff.
    image = page.get_by_role("img", name=f"Page 1 of {document_id}")
    assert image.get_attribute("src") == f"/ui/documents/{document_id}/pages/1"
    expect(image).to_have_js_property("complete", True)
    assert image.evaluate("i => i.naturalWidth") > 0, "the page image was served"
    diff, shown = page.locator("table.diff").bounding_box(), image.bounding_box()
    assert diff is not None and shown is not None
    assert diff["x"] + diff["width"] <= shown["x"], "side by side, the diff first"
    assert shown["y"] < diff["y"] + diff["height"], "at the same height"
    assert axe_violations(page) == []
