"""The chart's tests render it with Helm's engine and validate every object, hundreds of
renders in all: they are marked `slow`, so make test runs them (and make chart-test alone)
and make test-fast leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(HERE):
            item.add_marker(pytest.mark.slow)
