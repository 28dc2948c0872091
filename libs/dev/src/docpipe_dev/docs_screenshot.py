"""A screenshot of the docs site's front page, taken with headless Chromium: builds the
site, serves it on a free local port and saves ``docs/assets/front-page.png``.

Run by hand after changing the front page, never by the test suite (CI needs no browser
for the docs)::

    apt-get install -y chromium
    .venv/bin/python -m docpipe_dev.docs_screenshot

Playwright drives the system's Chromium (``playwright install`` is never needed).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from docpipe_dev.reference.markdown import REPO

__all__ = ["main", "take_screenshot"]

TARGET = REPO / "docs/assets/front-page.png"


def take_screenshot(site: Path, target: Path, width: int, height: int) -> None:
    """Serve ``site`` on a free port and save Chromium's view of its front page."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("error: no chromium on PATH: apt-get install -y chromium")
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/", wait_until="networkidle")
            target.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(target))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1280, help="viewport width (pixels)")
    parser.add_argument("--height", type=int, default=900, help="viewport height (pixels)")
    parser.add_argument("--output", type=Path, default=TARGET, help="where to save the PNG")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as site:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", site],
            cwd=REPO,
            env=env,
            check=True,
        )
        take_screenshot(Path(site), args.output, args.width, args.height)
    print(f"saved {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
