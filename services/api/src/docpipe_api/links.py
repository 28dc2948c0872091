"""OpenAPI links: which operations an answer's id leads to (a run's, a batch's, a document's).

Clients and tools that follow them (schemathesis' stateful tests) go from creating a thing
to reading, cancelling or retrying it without guessing ids. Operation ids are the route
functions' names (see docpipe_api.main).
"""

from __future__ import annotations

from typing import Any

__all__ = ["follow"]


def follow(parameter: str, field: str, *operations: str) -> dict[str, Any]:
    """A response's ``links``: each operation gets ``parameter`` from the body's ``field``
    (no parameter at all when ``field`` is empty)."""
    return {
        "links": {
            operation: {"operationId": operation}
            | ({"parameters": {parameter: f"$response.body#/{field}"}} if field else {})
            for operation in operations
        }
    }
