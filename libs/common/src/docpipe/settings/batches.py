"""Batches: how big one may be, and how their runs are admitted fairly."""

from __future__ import annotations

from pydantic import BaseModel, Field

from docpipe.settings.time_limits import Seconds

__all__ = ["BatchSettings"]


class BatchSettings(BaseModel):
    """Batches"""

    # The batch lane: how many batch runs may be in flight (admitted, not ended) at once;
    # the rest wait in PostgreSQL. Set it to the batch workers' total concurrency: more only
    # queues runs in Redis, where fair admission can no longer reorder them.
    batch_admission_window: int = Field(
        default=8,
        ge=1,
        description=(
            "batch runs in flight at once: set it to the batch workers' total concurrency (more "
            "only queues runs in Redis, where fairness cannot reorder them); the rest wait in "
            "PostgreSQL"
        ),
    )
    admission_interval_s: Seconds = Field(
        default=1.0,
        description=(
            "beat tops the window up this often and finishes batches (the API also admits when it "
            "stores new batch runs, workers when a batch run ends)"
        ),
    )
    batch_fairness_memory_s: Seconds = Field(
        default=600.0, description="admission favours the tenant served least over this period"
    )
    # A batch body is read as it arrives and refused (413) once it passes max_batch_bytes;
    # an API process holds at most max_batch_bodies_in_flight bodies at once (more: 503 with
    # Retry-After). A body costs at most ~3.5 times its size while it is read, parsed and
    # stored (bench/api_memory.py), so the API needs ~95 MiB + bytes x bodies x 3.5 (with
    # the defaults ~310 MiB) + ~6 MiB per file upload in flight, whatever the file's size:
    # under the chart's 512Mi (values.yaml, api.resources).
    max_batch_documents: int = Field(
        default=10_000,
        ge=1,
        le=100_000,
        description=(
            "documents per `POST /batches` (more: 422, counted before the body is parsed)"
        ),
    )
    max_batch_bytes: int = Field(
        default=32_000_000,
        ge=1,
        description=(
            "body of `POST /batches`, counted as it arrives (more: 413); each text in it is held to"
            " `DOCPIPE_MAX_DOCUMENT_BYTES` too"
        ),
    )
    max_batch_bodies_in_flight: int = Field(
        default=2,
        ge=1,
        le=64,
        description=(
            "batch bodies one API process holds at once (more: 503 with `Retry-After`); with "
            "`DOCPIPE_MAX_BATCH_BYTES` it bounds the API's memory "
            "([Security](../operations/security.md#bounds))"
        ),
    )
