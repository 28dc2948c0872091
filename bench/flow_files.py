"""Which of docpipe's files one document's flow touches, from `POST /documents/{id}/extract`
to its last step: the files in which a function runs, in the API and in a worker, import-time
code aside. The upload before it and the client's status reads are not the flow: the document
is stored before counting starts, and the run's state is read from PostgreSQL directly. It
prints the count and the files, grouped by folder.

    python -m bench.flow_files

It drives what every layout has: the API through its ASGI app, and each step through the
Celery task the worker runs (in this process, eagerly); PostgreSQL (a throwaway database),
Redis and the fake provider are real, from the local binaries. To count another checkout's
files, put its sources first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psycopg

ROOTS = ("docpipe", "docpipe_api")


class Touched:
    """Files (of ROOTS) in which any function was called, import-time code aside."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self._dirs = tuple(str(Path(importlib.import_module(r).__file__).parent) for r in ROOTS)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name != "<module>":
            name = frame.f_code.co_filename
            if name.startswith(self._dirs):
                self.files.add(name)

    def __enter__(self) -> Touched:
        sys.setprofile(self)
        threading.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def run_step_task() -> Callable[[str, str], None]:
    """The worker's step task of whichever layout is importable."""
    for module in ("docpipe.worker.app", "docpipe.celery_app"):
        try:
            app = importlib.import_module(module).app
        except ImportError:
            continue
        importlib.import_module("docpipe.worker.tasks" if "worker" in module else "docpipe.tasks")
        task = app.tasks["docpipe.run_step"]
        return lambda run_id, step: task.apply(args=(run_id, step)).get()
    raise RuntimeError("no docpipe worker app to import")


def store_document(api: Any, text: str) -> None:
    stored = api.put(
        "/documents/flow-1", content=text.encode(), headers={"Content-Type": "text/plain"}
    )
    assert stored.status_code in (200, 201), stored.text


def follow_one_document(api: Any, run_step: Callable[[str, str], None], database_url: str) -> str:
    """The run of the stored document, from the extract request to its last step, each step
    run as the worker runs it."""
    started = api.post("/documents/flow-1/extract", headers={"Idempotency-Key": "flow-1"})
    assert started.status_code == 202, started.text
    run_id = str(started.json()["run_id"])
    deadline = time.monotonic() + 120
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT status, current_step FROM pipeline_run WHERE id = %s", (run_id,)
            ).fetchone()
            assert row is not None
            status, step = row
            if status == "done":
                return run_id
            assert status in ("queued", "running"), row
            assert time.monotonic() < deadline, "the run did not finish in 2 minutes"
            run_step(run_id, step)


def _first(*modules: str) -> Any:
    """The first of ``modules`` that imports (the same piece in either layout)."""
    for module in modules:
        with contextlib.suppress(ImportError):
            return importlib.import_module(module)
    raise RuntimeError(f"none of {modules} imports")


@contextlib.contextmanager
def local_services() -> Iterator[dict[str, str]]:
    """PostgreSQL, Redis and the fake provider, started here, as DOCPIPE_* settings."""
    localstack = _first("docpipe_dev.localstack", "docpipe.localstack")
    migrate = _first("docpipe.state.migrate", "docpipe.migrate")
    state = Path(tempfile.mkdtemp(prefix="docpipe-flow-"))
    state.chmod(0o711)
    with localstack.LocalPostgres(state / "pg") as pg, localstack.LocalRedis(state / "redis") as rd:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE flow")
        database_url = psycopg.conninfo.make_conninfo(pg.url, dbname="flow")
        migrate.apply_migrations(database_url)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        fake = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "docpipe_fake_llm",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--latency-ms",
                "0:0",
                "--rpm",
                "0",
            ]
        )
        try:
            for _ in range(100):
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(f"http://127.0.0.1:{port}/healthz").raise_for_status()
                    break
                time.sleep(0.1)
            yield {
                "DOCPIPE_DATABASE_URL": database_url,
                "DOCPIPE_REDIS_URL": rd.url,
                "DOCPIPE_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
                "DOCPIPE_AUTH": "none",
                "DOCPIPE_METRICS_PORT": "0",
            }
        finally:
            fake.terminate()
            fake.wait(10)


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    with local_services() as env:
        os.environ.update(env)  # before docpipe reads its settings
        from fastapi.testclient import TestClient

        from docpipe_api.main import create_app

        text = _first("docpipe_dev.samples", "docpipe.samples").sample_contracts(1)[0].text
        run_step = run_step_task()
        app = create_app()
        with TestClient(app) as uploader:
            store_document(uploader, text)
        # A new client, so that the API's request threads start inside the count.
        with TestClient(app) as api, Touched() as touched:
            follow_one_document(api, run_step, env["DOCPIPE_DATABASE_URL"])
    by_folder: dict[str, list[str]] = defaultdict(list)
    for name in sorted(touched.files):
        path = Path(name)
        root = next(p for p in path.parents if p.name in ROOTS)
        by_folder[str(path.parent.relative_to(root.parent))].append(path.name)
    print(f"{len(touched.files)} files touched by one document's flow")
    for folder, names in sorted(by_folder.items()):
        print(f"  {folder}/: {', '.join(names)}")


if __name__ == "__main__":
    main()
