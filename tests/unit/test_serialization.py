"""JSON only, never pickle: no code of docpipe's imports a pickle-like serializer or names
one, and the Celery app accepts nothing else (test_untrusted_messages.py shows a real
worker refusing a pickled message)."""

from __future__ import annotations

import ast
from pathlib import Path

from docpipe.worker.app import app

ROOT = Path(__file__).resolve().parents[2]
# Modules whose loads() runs code chosen by whoever wrote the bytes.
UNSAFE_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "cloudpickle",
    "jsonpickle",
    "shelve",
    "marshal",
}
UNSAFE_NAMES = {"pickle", "application/x-python-serialize", "yaml", "msgpack"}


def source_files() -> list[Path]:
    files = [p for top in ("libs", "services") for p in (ROOT / top).rglob("*.py")]
    assert len(files) > 30, "the scan found docpipe's sources"
    return files


def test_no_module_imports_a_pickle_like_serializer() -> None:
    offenders = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] in UNSAFE_MODULES
            ]
    assert offenders == []


def test_no_code_names_an_unsafe_serializer() -> None:
    """Strings such as serializer="pickle" or accept_content=[..., "yaml"]."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in source_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in UNSAFE_NAMES
    ]
    assert offenders == []


def test_the_celery_app_speaks_json_only() -> None:
    conf = app.conf
    assert conf.accept_content == ["json"]
    assert conf.result_accept_content == ["json"]
    assert (conf.task_serializer, conf.result_serializer, conf.event_serializer) == ("json",) * 3
    # Celery's default beat schedule is a shelve (pickle) file; ours lives in memory.
    assert conf.beat_scheduler == "docpipe.worker.liveness:LivenessScheduler"
