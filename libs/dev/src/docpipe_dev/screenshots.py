"""``python -m docpipe_dev.screenshots [OUT.png]`` (``make screenshots``): the review page
as the README shows it (docs/review-page.png), made from a real local stack.

A scanned sample contract goes through ``document_extract:v1`` with the fake provider told
to invent one section's quotes, so the run pauses for review; Debian's Chromium (through
Playwright) signs in, opens the review, shows a supported value's quote on the page and
takes the screenshot from the top of the page (the header, the document, the first values).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from docpipe_dev.localstack import free_port
from docpipe_dev.sample_files import contract_scan
from docpipe_dev.samples import sample_contracts
from docpipe_dev.stack import LocalStack, StackOptions

__all__ = ["CHROMIUM_ARGS", "review_page_screenshot", "screenshot_stack"]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def review_page_screenshot(out: Path) -> None:
    """Write a screenshot of the review page of a paused run of a scanned contract."""
    with screenshot_stack(batch_concurrency=1) as stack:
        run_id = _run_in_review(stack)
        _shoot(stack, run_id, out)


@contextmanager
def screenshot_stack(*, batch_concurrency: int) -> Iterator[LocalStack]:
    """A local stack of its own (a temporary folder, a free port, an instant fake
    provider, API keys on), up for the block and gone after it."""
    os.environ.setdefault("DOCPIPE_AUTH", "keys")
    state = Path(tempfile.mkdtemp(prefix="docpipe-screenshot-"))
    state.chmod(0o711)
    stack = LocalStack(
        StackOptions(
            state_dir=state,
            api_port=free_port(),
            fake_latency_ms="0:0",
            interactive_concurrency=2,
            batch_concurrency=batch_concurrency,
            metrics_port=0,
        )
    )
    try:
        stack.up()
        assert stack.api_key is not None
        yield stack
    finally:
        stack.down()
        shutil.rmtree(state, ignore_errors=True)


def _run_in_review(stack: LocalStack) -> str:
    """A run of the scan paused for review. The invented quotes go to whichever section asks
    first; a section that states no field leaves nothing unsupported, so try again."""
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    fake = stack.env["DOCPIPE_LLM_BASE_URL"].removesuffix("/v1")
    scan = contract_scan(sample_contracts(1)[0].text)
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=30) as api:
        for attempt in range(8):
            httpx.post(f"{fake}/control/reset", timeout=10).raise_for_status()
            httpx.post(
                f"{fake}/control/faults",
                json={"kind": "invented_quote", "count": 1, "step": "extract_fields"},
                timeout=10,
            ).raise_for_status()
            document = f"review-sample-{attempt}"
            api.put(
                f"/documents/{document}", content=scan, headers={"Content-Type": "application/pdf"}
            ).raise_for_status()
            run_id = str(api.post(f"/documents/{document}/extract").json()["run_id"])
            deadline = time.monotonic() + 300
            while (status := api.get(f"/runs/{run_id}").json()["status"]) in ("queued", "running"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run_id} is still {status} after 300 s")
                time.sleep(0.5)
            if status == "needs_review":
                return run_id
    raise RuntimeError("no run paused for review in 8 attempts")


def _shoot(stack: LocalStack, run_id: str, out: Path) -> None:
    executable = shutil.which("chromium")
    if executable is None:
        raise RuntimeError("Debian's chromium is not installed (scripts/ensure-system-deps)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1240})
        page.goto(f"{stack.api_url}/ui/sign-in")
        page.get_by_label("API key").fill(stack.api_key or "")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{stack.api_url}/ui/")
        page.goto(f"{stack.api_url}/ui/reviews/{run_id}")
        page.wait_for_load_state("networkidle")
        quotes = page.locator(".evidence li").filter(has=page.locator(".mark.supported"))
        button = quotes.first.get_by_role("button")
        button.click()
        page.wait_for_timeout(800)  # the smooth scroll to the highlighted quote
        # The page from its top: the header, the whole page with the quote's box, the first
        # values (the window is as tall as the page image).
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(300)
        page.screenshot(path=str(out))
        browser.close()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/review-page.png")
    review_page_screenshot(target)
    print(f"wrote {target}")
