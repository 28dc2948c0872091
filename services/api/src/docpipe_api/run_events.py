"""A run's progress as Server-Sent Events: 'progress' on every change, then 'end' with the
final status; 'reconnect' once the stream lasted DOCPIPE_EVENT_STREAM_MAX_S, 'revoked' once
its API key is revoked. Each open stream holds a slot of its key (docpipe_api.streams)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import anyio
import anyio.to_thread
from fastapi.responses import StreamingResponse

from docpipe import statuses
from docpipe.state import runs
from docpipe.state.db import Database
from docpipe.state.tenants import api_key_is_active
from docpipe_api.schemas import RunStatusOut
from docpipe_api.streams import StreamSlot, StreamSlots

__all__ = [
    "KEEPALIVE_INTERVAL_S",
    "KEY_CHECK_INTERVAL_S",
    "POLL_INTERVAL_S",
    "EventWatch",
    "event_stream",
]

POLL_INTERVAL_S = 0.5
KEEPALIVE_INTERVAL_S = 15.0
# A revoked key's open streams end within this long (one indexed read per stream).
KEY_CHECK_INTERVAL_S = 2.0

FinalStatus = Callable[[], RunStatusOut]


@dataclass(frozen=True)
class EventWatch:
    """What one open stream is bound by: its slot, its key and its end."""

    db: Database
    tenant: str
    key_id: str | None
    slots: StreamSlots
    slot: StreamSlot
    max_s: float

    def key_still_valid(self) -> bool:
        """Whether the stream's key is still valid; renews the stream's slot too."""
        self.slots.renew(self.slot)
        return self.key_id is None or api_key_is_active(self.db, self.key_id)


def event_stream(
    watch: EventWatch,
    first: runs.Progress,
    final: FinalStatus,
    disconnected: Callable[[], Awaitable[bool]],
) -> StreamingResponse:
    """The stream of the run ``first`` describes; ``final``: its status body once ended;
    ``disconnected``: whether the client went away. Its slot is given back when it ends."""
    return StreamingResponse(
        _progress_events(watch, first, final, disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _event(name: str, body: RunStatusOut) -> str:
    return f"event: {name}\ndata: {body.model_dump_json(exclude={'result', 'values'})}\n\n"


def _notice(name: str, detail: str) -> str:
    return f"event: {name}\ndata: {json.dumps({'detail': detail})}\n\n"


async def _progress_events(
    watch: EventWatch,
    progress: runs.Progress,
    final: FinalStatus,
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    read = partial(runs.run_progress, watch.db, watch.tenant, progress.run_id)
    last_seen: tuple[object, ...] | None = None
    started = last_sent = last_checked = time.monotonic()
    try:
        while progress.status not in statuses.ENDED_RUN_STATUSES:
            seen = (
                progress.status,
                progress.current_step,
                progress.steps_done,
                progress.cost_so_far_usd,
            )
            if seen != last_seen:
                yield _event("progress", RunStatusOut.model_validate(progress))
                last_seen, last_sent = seen, time.monotonic()
            elif time.monotonic() - last_sent >= KEEPALIVE_INTERVAL_S:
                yield ": keepalive\n\n"
                last_sent = time.monotonic()
            await anyio.sleep(POLL_INTERVAL_S)
            if await disconnected():
                return
            if time.monotonic() - started >= watch.max_s:
                yield _notice(
                    "reconnect",
                    f"this stream lasted the most a stream may "
                    f"({watch.max_s:g} s); open a new one to go on",
                )
                return
            if time.monotonic() - last_checked >= KEY_CHECK_INTERVAL_S:
                if not await anyio.to_thread.run_sync(watch.key_still_valid):
                    yield _notice("revoked", "the API key of this stream was revoked")
                    return
                last_checked = time.monotonic()
            progress = await anyio.to_thread.run_sync(read)
        ended = await anyio.to_thread.run_sync(final)
        yield f"event: end\ndata: {ended.model_dump_json()}\n\n"
    finally:
        # Also when the client went away and this generator is being cancelled.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(watch.slots.close, watch.slot)
