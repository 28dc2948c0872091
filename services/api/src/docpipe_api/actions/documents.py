"""A document's extraction run, started once per idempotency key, and its page images."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime
from functools import cache, partial

import anyio.to_thread
from fastapi import Response

from docpipe.errors import InvalidRequestError
from docpipe.observability import tracing
from docpipe.state import runs
from docpipe.state.after_commit import AfterCommit, CreatedRuns, dispatch_after_commit
from docpipe.state.documents import get_document
from docpipe.state.pages import render_page_image, stored_page_image
from docpipe.statuses import Lane
from docpipe_api.bounds import accepted_callback_url, checked_deadline, checked_start_at, run_budget
from docpipe_api.resources import Caller, Resources
from docpipe_api.schemas import DocumentOut, ExtractAcceptedOut, ExtractIn

__all__ = ["read_document", "read_page_image", "start_extraction"]

log = logging.getLogger(__name__)


def start_extraction(
    *,
    resources: Resources,
    caller: Caller,
    document_id: str,
    options: ExtractIn,
    idempotency_key: str | None,
) -> ExtractAcceptedOut:
    """A run of ``options.pipeline`` on the document. The same idempotency key returns the
    same run; with other options it is a ConflictError. Every option is checked against its
    setting before anything is stored."""
    settings, db = resources.settings, resources.database
    pipeline = resources.pipelines.get(options.pipeline)
    now = datetime.now(UTC)
    budget = run_budget(options.budget_usd, settings, field="budget_usd")
    if options.start_at is not None:
        if options.lane != Lane.INTERACTIVE:
            raise InvalidRequestError("start_at applies to the interactive lane only")
        checked_start_at(options.start_at, now, settings)
    # A run that is to start later has its time from then on.
    deadline_at = checked_deadline(options.deadline_s, max(now, options.start_at or now), settings)
    callback_url = accepted_callback_url(db, settings, caller.tenant, options.callback_url)
    with db.transaction() as tx:
        get_document(tx, caller.tenant, document_id)  # 404 before the foreign key can object
        created = runs.create_run(
            tx,
            tenant_id=caller.tenant,
            document_id=document_id,
            pipeline=pipeline,
            lane=options.lane,
            priority=options.priority,  # create_run gives the lane's default
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            request={"document_id": document_id, **options.fingerprint()},
            deadline_at=deadline_at,
            budget_usd=budget,
            callback_url=callback_url,
            start_at=options.start_at,
            reuse_answers=options.reuse_answers,
            # The run's steps join this request's trace (see docpipe.observability.tracing).
            traceparent=tracing.current_traceparent(),
        )
    _crash_point("api.after_commit")
    # A future start is not due yet: it stays parked and the sweep publishes it in time.
    inline = pipeline.step_names[: created.steps_done_at_creation]
    after = AfterCommit(
        outbox_ids=created.outbox_ids,
        admit=created.created and options.lane == Lane.BATCH,
        created=CreatedRuns(
            pipeline.key,
            options.lane,
            inline_steps=tuple((created.run_id, step) for step in inline),
        )
        if created.created
        else None,
    )
    dispatch_after_commit(db, resources.broker, settings, after)
    status = runs.run_progress(db, caller.tenant, created.run_id).status
    return ExtractAcceptedOut(run_id=created.run_id, status=status, created=created.created)


def read_document(*, resources: Resources, caller: Caller, document_id: str) -> DocumentOut:
    """The caller's document's metadata (its format, its pages once read); NotFoundError
    for another tenant's."""
    with resources.database.session() as session:
        return DocumentOut.model_validate(get_document(session, caller.tenant, document_id))


async def read_page_image(
    *, resources: Resources, caller: Caller, document_id: str, page: int
) -> Response:
    """Page ``page`` (1-based) of the caller's PDF or image as a PNG, rendered the first time
    it is asked for, then kept. NotFoundError for a text or DOCX document (no page images)
    and for a page past the end; ConflictError until a run has read the pages;
    UnreadableDocumentError for a page that cannot be drawn (too slow, too large, ...),
    remembered: asked again, the same answer at once. A page being rendered is rendered
    once: the requests for it meanwhile wait for that render (Busy when the process works
    on as many heavy requests as it may)."""
    db, settings = resources.database, resources.settings
    image = await anyio.to_thread.run_sync(
        partial(stored_page_image, db, caller.tenant, document_id, page)
    )
    if image is None:
        render = partial(
            render_page_image,
            db,
            caller.tenant,
            document_id,
            page,
            max_pixels=settings.page_image_max_pixels,
            decode_pixels=settings.max_page_pixels,
            timeout_s=settings.pdf_page_timeout,
            max_bytes=settings.pdf_max_memory_bytes,
        )
        image = await resources.page_renders.once(
            (caller.tenant, document_id, page),
            lambda: resources.heavy.run("rendering a page image", render),
        )
    # A document never changes, nor do its pages: the client may keep them.
    headers = {"Cache-Control": "private, max-age=86400, immutable"}
    return Response(image.png, media_type="image/png", headers=headers)


def _crash_point(name: str) -> None:
    """The chaos tests' kill between the commit and the publish: exit at once with status 137
    (no cleanup, no flush, as a SIGKILL would) when DOCPIPE_CRASH_AT is ``name``."""
    if _crash_at() == name:
        log.critical("crash point %r reached (DOCPIPE_CRASH_AT): exiting with status 137", name)
        os._exit(137)


@cache
def _crash_at() -> str | None:
    # Read once: the tests set it before they start the process, and every extract request
    # passes here.
    return os.environ.get("DOCPIPE_CRASH_AT")
