"""The in-process client for the API's tests.

Starlette 1.x prefers the ``httpx2`` package for its TestClient and warns (an error under
``-W error``) when it falls back to ``httpx``, which is what the venv pins. The fallback
works the same, so the warning is silenced for this one import only.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient`")
    from fastapi.testclient import TestClient

__all__ = ["TestClient"]
