"""The podman proof is opt-in: it runs under `make podman-e2e` (which builds the images first
and sets DOCPIPE_PODMAN_E2E=1) or when tests/podman is named on the command line. In a plain
`make test` its tests are deselected, never reported as passed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _opted_in(config: pytest.Config) -> bool:
    if os.environ.get("DOCPIPE_PODMAN_E2E") == "1":
        return True
    return any(Path(arg.split("::")[0]).resolve().is_relative_to(HERE) for arg in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _opted_in(config):
        return
    mine = [item for item in items if Path(str(item.path)).is_relative_to(HERE)]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]


@pytest.fixture(scope="session", autouse=True)
def _podman_installed() -> None:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: `make podman-e2e` installs it and runs these")
