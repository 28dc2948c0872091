"""``python -m docpipe_dev.dashboard_screenshot [OUT.png]`` (``make screenshots``): the web
pages' home as the docs show it (docs/dashboard.png), made from a real local stack.

A batch of sample contracts and a few documents one at a time go through
``document_extract:v1`` with the fake provider (one told to invent a section's quotes, so
it waits for a person; the empty dummy fails on purpose); Debian's Chromium (through
Playwright) signs in and takes the home page once every run has ended.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from docpipe_dev.samples import dummy_document, sample_contracts
from docpipe_dev.screenshots import CHROMIUM_ARGS, screenshot_stack
from docpipe_dev.stack import LocalStack

__all__ = ["dashboard_screenshot"]

_ENDED = {"done", "failed", "needs_review", "cancelled", "expired", "budget_exceeded"}


def dashboard_screenshot(out: Path) -> None:
    """Write a screenshot of the home page of a tenant with a day's work behind it."""
    with screenshot_stack(batch_concurrency=2) as stack:
        _a_days_work(stack)
        _shoot(stack, out)


def _a_days_work(stack: LocalStack) -> None:
    """Two batches of sample contracts, three contracts one at a time (one waits for a
    person), the empty dummy; back once every run has ended."""
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    fake = stack.env["DOCPIPE_LLM_BASE_URL"].removesuffix("/v1")
    contracts = sample_contracts(12)
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as api:
        for batch in (contracts[:4], contracts[4:9]):
            documents = [{"id": f"{c.slug}.txt", "text": c.text} for c in batch]
            api.post("/batches", json={"documents": documents}).raise_for_status()
        singles = [*contracts[9:], dummy_document()]
        for n, contract in enumerate(singles):
            if n == 0:
                httpx.post(
                    f"{fake}/control/faults",
                    json={"kind": "invented_quote", "count": 1, "step": "extract_fields"},
                    timeout=10,
                ).raise_for_status()
            name = f"{contract.slug}.txt"
            api.put(
                f"/documents/{name}",
                content=contract.text.encode(),
                headers={"Content-Type": "text/plain"},
            )
            api.post(f"/documents/{name}/extract").raise_for_status()
        deadline = time.monotonic() + 600
        while any(r["status"] not in _ENDED for r in api.get("/runs").json()["runs"]):
            if time.monotonic() > deadline:
                raise RuntimeError("runs still going after 600 s")
            time.sleep(1)


def _shoot(stack: LocalStack, out: Path) -> None:
    executable = shutil.which("chromium")
    if executable is None:
        raise RuntimeError("Debian's chromium is not installed (scripts/ensure-system-deps)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1100})
        page.goto(f"{stack.api_url}/ui/sign-in")
        page.get_by_label("API key").fill(stack.api_key or "")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{stack.api_url}/ui/")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(out))
        browser.close()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png")
    dashboard_screenshot(target)
    print(f"wrote {target}")
