"""A reviewer's working day in a real headless Chromium against a real stack: the queue with
its counts, sorted by pipeline or reason; "approve and next" through the queue in its
order; the keyboard shortcuts listed on the page; a confirmation before a list item leaves
the form (removed, or left empty); a passage selected on the page attached as a value's new
quote; a header that leaves the window to the work, and inputs that show their values
whole. axe-core checks the new controls: the counts and sorting, the shortcut list, the
confirmation dialog and the quote picker."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Page, expect

from tests.browser.conftest import UiStack, axe_violations
from tests.browser.test_pages import CONTRACT
from tests.browser.test_review_page import run_in_review
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

SELECT_TEXT = """(needle) => {
  const pre = document.querySelector(".page-text:not([hidden])");
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(needle);
    if (at === -1) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + needle.length);
    const selection = document.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    return true;
  }
  return false;
}"""


def status_of(stack: UiStack, run_id: str) -> str:
    return str(stack.api("GET", f"/runs/{run_id}").json()["status"])


def reject_run(stack: UiStack, run_id: str) -> None:
    """Take a run out of the review queue: rejected, through the API."""
    revision = stack.api("GET", f"/reviews/{run_id}").json()["review"]["revision"]
    decided = stack.api(
        "POST",
        f"/runs/{run_id}/review",
        json={"action": "reject", "reason": "checked for layout only", "revision": revision},
    )
    assert decided.status_code == 200, decided.text


# Each one-line input whose value it cannot show whole (the value scrolls inside it).
CUT_INPUTS = """() => [...document.querySelectorAll(
    "form input[type=text], form input[type=number]")]
  .filter((input) => input.value && input.scrollWidth > input.clientWidth)
  .map((input) => `${input.name}: ${input.value}`)"""


def test_the_header_is_compact_and_each_value_is_shown_whole(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    """The window the issue measured (1000 pixels high): the review's header took its top
    45 %, and inputs 200 pixels wide cut their values off."""
    run_id = run_in_review(ui_stack, fake_llm_server)
    try:
        page.set_viewport_size({"width": 1440, "height": 1000})
        page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
        head = page.locator(".review-head").bounding_box()
        values = page.get_by_role("heading", name="Values").bounding_box()
        assert head is not None and values is not None
        assert head["height"] <= 150, head  # title, one line of facts, the shortcuts' summary
        assert values["y"] <= 300, values  # the form starts in the window's top third
        assert page.locator("form input[type=text]").count() > 3
        assert page.evaluate(CUT_INPUTS) == []
    finally:
        # The module's tests share one stack and its review queue: the queue is left as it
        # was found, so that "approve and next" meets only the runs its own test paused.
        reject_run(ui_stack, run_id)


def test_approve_and_next_goes_through_the_queue_in_its_order(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    first = run_in_review(ui_stack, fake_llm_server)
    second = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews")
    expect(page.locator(".queue-counts")).to_contain_text(re.compile(r"\d+ waiting, the oldest"))
    counts = page.get_by_role("list", name="Waiting by reason")
    expect(counts).to_contain_text("rule")
    # Sorted by reason; the review opened from it carries the queue along.
    page.get_by_label("Sort by").select_option("reason")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("table caption")).to_have_text("By reason, oldest first in each")
    assert axe_violations(page) == []
    page.get_by_role("link", name=f"Review {first[:8]}").click()
    assert parse_qs(urlsplit(page.url).query)["queue"] == ["order=reason"]
    expect(page.locator(".review-head .meta")).to_contain_text("waiting")

    page.get_by_role("button", name="Approve and next").click()
    page.wait_for_url(f"{ui_stack.url}/ui/reviews/{second}?queue=order%3Dreason")
    wait_until(lambda: status_of(ui_stack, first) == "done", timeout_s=60, every_s=0.3)
    # The last decision of the queue lands on the queue, which says so.
    page.get_by_role("button", name="Approve and next").click()
    page.wait_for_url(re.compile(r"/ui/reviews\?order=reason&decided="))
    expect(page.get_by_role("status")).to_contain_text("is decided, and no other run is waiting")
    wait_until(lambda: status_of(ui_stack, second) == "done", timeout_s=60, every_s=0.3)


def test_the_keyboard_shortcuts_are_listed_and_work(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    shortcuts = page.locator("#shortcuts")
    expect(shortcuts).not_to_have_attribute("open", "")
    page.locator("body").press("?")
    expect(shortcuts).to_have_attribute("open", "")
    expect(shortcuts).to_contain_text("approve and go to the next review")
    assert axe_violations(page) == []
    # j and k move through the values, each one's quote shown on the page.
    page.keyboard.press("j")
    current = page.locator(".value-row.current")
    expect(current).to_have_count(1)
    first = current.get_attribute("data-pointer")
    page.keyboard.press("j")
    expect(current).not_to_have_attribute("data-pointer", first or "")
    page.keyboard.press("k")
    expect(current).to_have_attribute("data-pointer", first or "")
    # In a field, letters are typed; Escape leaves it.
    term = page.get_by_label("Term months", exact=True)
    term.fill("2")
    term.press("j")
    expect(term).to_have_value("2")
    term.press("Escape")
    assert page.evaluate("document.activeElement === document.body")
    # Ctrl+Enter approves (with what was typed) and goes on.
    page.keyboard.press("Control+Enter")
    page.wait_for_url(re.compile(r"/ui/reviews(/|\?)"))
    wait_until(lambda: status_of(ui_stack, run_id) == "done", timeout_s=60, every_s=0.3)
    fields = ui_stack.api("GET", f"/runs/{run_id}").json()["result"]["extract_fields"]["fields"]
    assert fields["term_months"] == 2


def test_a_list_item_leaves_the_form_only_once_confirmed(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    parties = page.locator("fieldset[data-array]").filter(has_text="Parties").first
    items = parties.locator(":scope > [data-items] > [data-item]")
    count = items.count()
    assert count >= 2
    dialog = page.get_by_role("dialog", name="Remove from the list?")
    remove = parties.get_by_role("button", name="Remove item 1")
    remove.click()
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Parties: item 1 and what it holds will not be approved.")
    assert axe_violations(page) == []
    dialog.get_by_role("button", name="Keep it").click()
    expect(dialog).to_be_hidden()
    expect(items).to_have_count(count)
    expect(remove).to_be_focused()
    remove.click()
    dialog.get_by_role("button", name="Remove", exact=True).click()
    expect(items).to_have_count(count - 1)

    # An item left empty would be dropped on approval: the same question first.
    for field in items.first.locator("input:not([type=hidden])").all():
        field.fill("")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(dialog).to_contain_text("These items are empty and will be left out: Parties: item 1.")
    dialog.get_by_role("button", name="Keep it").click()
    assert "/ui/reviews/" in page.url and status_of(ui_stack, run_id) == "needs_review"
    page.get_by_role("button", name="Approve", exact=True).click()
    dialog.get_by_role("button", name="Remove them").click()
    page.wait_for_url(f"{ui_stack.url}/ui/runs/{run_id}")
    wait_until(lambda: status_of(ui_stack, run_id) == "done", timeout_s=60, every_s=0.3)
    after = ui_stack.api("GET", f"/runs/{run_id}").json()["result"]["extract_fields"]["fields"]
    assert len(after["parties"]) == count - 2, after["parties"]


def test_a_passage_selected_on_the_page_becomes_a_values_quote(
    page: Page, ui_stack: UiStack, fake_llm_server: FakeLLM
) -> None:
    run_id = run_in_review(ui_stack, fake_llm_server)
    page.goto(f"{ui_stack.url}/ui/reviews/{run_id}")
    law = page.locator('[data-pointer="/fields/governing_law"]')
    law.get_by_label(re.compile("^Governing law")).click()
    picker = page.get_by_role("button", name="Use the selected text as the quote of Governing law")
    expect(picker).to_be_hidden()
    assert page.evaluate(SELECT_TEXT, "the laws of Germany")
    expect(picker).to_be_visible()
    assert axe_violations(page) == []
    picker.click()
    expect(law.locator("[data-new-quote]")).to_contain_text(
        "Your quote, saved when you approve: “the laws of Germany”"
    )
    # The term's own passage, by the shortcut: select, then q (outside any field).
    term = page.locator('[data-pointer="/fields/term_months"]')
    term.get_by_label("Term months", exact=True).click()
    page.keyboard.press("Escape")
    assert page.evaluate(SELECT_TEXT, "an initial term of twelve (12) months")
    page.keyboard.press("q")
    expect(term.locator("[data-new-quote]")).to_contain_text(
        "an initial term of twelve (12) months"
    )
    page.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_url(f"{ui_stack.url}/ui/runs/{run_id}")
    run = ui_stack.api("GET", f"/runs/{run_id}").json()
    values = {v["field"]: v for v in run["values"]}
    for field, passage in (
        ("governing_law", "the laws of Germany"),
        ("term_months", "an initial term of twelve (12) months"),
    ):
        record = values[field]
        assert (record["quote"], record["quoted_by"], record["supported"]) == (
            passage,
            "Ada Reviewer",
            True,
        ), record
        assert record["end"] - record["start"] == len(passage)
        assert CONTRACT.find(passage) == record["start"], record
