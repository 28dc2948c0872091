"""Hostile request bodies, made a chunk at a time (the sender never holds them whole): a
batch of millions of tiny documents within the byte cap (parsing builds every item before
anything counts them), and a review decision as large as the cap allows."""

from __future__ import annotations

import json
from collections.abc import Iterator

__all__ = ["big_decision", "many_tiny_documents", "many_tiny_documents_length"]

_ITEM = b'{"id":"x"}'
_CHUNK_ITEMS = 6_000


def many_tiny_documents(items: int = 2_900_000) -> Iterator[bytes]:
    """A POST /batches body of ``items`` documents of 10 bytes each (32 MB at the default:
    just under DOCPIPE_MAX_BATCH_BYTES)."""
    yield b'{"documents": ['
    left = items
    first = True
    while left > 0:
        count = min(left, _CHUNK_ITEMS)
        chunk = b",".join([_ITEM] * count)
        yield chunk if first else b"," + chunk
        first, left = False, left - count
    yield b"]}"


def many_tiny_documents_length(items: int = 2_900_000) -> int:
    """The length of what :func:`many_tiny_documents` yields."""
    return len(b'{"documents": [') + len(_ITEM) * items + max(items - 1, 0) + len(b"]}")


def big_decision(total_bytes: int = 1_000_000) -> bytes:
    """A review decision approving an output of ``total_bytes`` or so: an object of many
    small fields (each costs the parser far more than its bytes)."""
    fields = {f"f{i}": "v" for i in range(total_bytes // 16)}
    return json.dumps({"revision": 0, "action": "approve", "output": fields}).encode()
