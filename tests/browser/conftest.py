"""The browser tests' fixtures: one headless Chromium for this directory (Debian's
``chromium``, driven by Playwright; never ``playwright install``), and one stack per module
(its own database, the API as a process with API keys and the web pages, workers of both
lanes, beat, the session's fake provider and Redis).

axe-core (vendor/axe-core-*/, MPL-2.0, from the npm registry) is evaluated into a page
through the DevTools protocol, which the page's CSP does not govern: the pages themselves
never load it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

from docpipe.state.db import Database
from docpipe.state.migrate import apply_migrations
from docpipe.state.tenants import create_api_key
from docpipe_dev.localstack import LocalRedis
from docpipe_dev.processes import beat_argv
from tests.support.fakellm import FakeLLM
from tests.support.processes import FAST_TIMINGS, ProcessGroup
from tests.support.servers import create_database

AXE = next((Path(__file__).parent / "vendor").glob("axe-core-*/axe.min.js"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TENANT = "acme"
# Closing a page, a context or the browser waits on Chromium without a time limit of its own.
CLOSE_WITHIN_S = 60


def chromium_pids() -> list[int]:
    """Chromium's processes started under this test process (through Playwright's driver)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
            parents[int(entry.name)] = int(rest.split()[1])
            names[int(entry.name)] = name

    def under_us(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid, name in names.items() if "chrom" in name and under_us(pid)]


@contextlib.contextmanager
def chromium_killed_if_stuck() -> Iterator[None]:
    """A wedged Chromium once held a teardown past pytest's 300 s timeout in CI, failing the
    run. Past CLOSE_WITHIN_S its processes are killed, which ends Playwright's wait at once."""

    def kill() -> None:
        for pid in chromium_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    timer = threading.Timer(CLOSE_WITHIN_S, kill)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# Module scope, not session: Playwright's sync API keeps its event loop marked as running in
# the main thread while it is open, and every asyncio.run() in the tests after would fail. Not
# package either: a Chromium that dies (fresh clone #3: gone after a test had passed, every
# later page "closed") then fails the tests of its own module only; a launch costs about 1 s.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed: run scripts/ensure-system-deps")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        with chromium_killed_if_stuck():
            browser.close()


@dataclass(frozen=True)
class UiStack:
    url: str  # the API's; the pages are under /ui
    db: Database
    api_key: str  # of tenant acme, made for the module
    other_key: str  # of tenant globex
    processes: ProcessGroup

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request to the API as tenant acme."""
        headers = {"Authorization": f"Bearer {self.api_key}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)


@pytest.fixture(scope="module")
def ui_stack(
    postgres_admin_url: str,
    redis_server: LocalRedis,
    fake_llm_server: FakeLLM,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[UiStack]:
    database_url = create_database(postgres_admin_url, "docpipe_ui")
    apply_migrations(database_url)
    db = Database(database_url)
    logs = tmp_path_factory.mktemp("ui-stack")
    env = {
        **FAST_TIMINGS,
        "DOCPIPE_DATABASE_URL": database_url,
        "DOCPIPE_REDIS_URL": redis_server.url,
        "DOCPIPE_LLM_BASE_URL": fake_llm_server.url + "/v1",
        "DOCPIPE_LLM_API_KEY": "test-key",
        "DOCPIPE_METRICS_PORT": "0",
        "DOCPIPE_AUTH": "keys",
        "DOCPIPE_SECRETS_KEY": Fernet.generate_key().decode(),
        "DOCPIPE_LIVENESS_FILE": str(logs / "alive"),
        # A browser test makes many requests a minute from one address and key.
        "DOCPIPE_API_KEY_RPM": "0",
        "DOCPIPE_CLIENT_IP_RPM": "0",
    }
    processes = ProcessGroup(logs, env)
    try:
        url = processes.start_api()
        processes.start_worker("interactive", concurrency=2)
        processes.start_worker("batch", concurrency=1)
        processes.start("beat", beat_argv(), r"beat: Starting")
        yield UiStack(
            url,
            db,
            create_api_key(db, TENANT, "Ada Reviewer").plaintext,
            create_api_key(db, "globex", "Grace").plaintext,
            processes,
        )
    finally:
        processes.stop_all()
        db.close()


def sign_in(page: Page, stack: UiStack, key: str | None = None) -> None:
    """Sign in through the sign-in page, as a person does."""
    page.goto(f"{stack.url}/ui/sign-in")
    page.get_by_label("API key").fill(key or stack.api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{stack.url}/ui/")


@pytest.fixture(scope="module")
def signed_in(chromium: Browser, ui_stack: UiStack) -> Iterator[BrowserContext]:
    """A browser context of tenant acme, signed in once for the module."""
    context = chromium.new_context()
    page = context.new_page()
    sign_in(page, ui_stack)
    page.close()
    yield context
    with chromium_killed_if_stuck():
        context.close()


@pytest.fixture
def page(signed_in: BrowserContext) -> Iterator[Page]:
    """A page of the signed-in context that records script errors and CSP refusals."""
    opened = signed_in.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        # A 4xx page is logged as a failed load: the tests expect those and check them.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(f"console {message.type}: {message.text}")

    opened.on("console", on_console)
    yield opened
    with chromium_killed_if_stuck():
        opened.close()
    assert problems == [], problems


def axe_violations(page: Page) -> list[str]:
    """The serious and critical accessibility violations axe-core finds on the page."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    results = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
        for v in results["violations"]
        if v["impact"] in ("serious", "critical")
    ]
