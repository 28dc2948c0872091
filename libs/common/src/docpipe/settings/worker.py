"""Workers: a step's attempts and the waits between them, and the worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, Field, model_validator

from docpipe.settings.time_limits import Seconds

__all__ = ["WorkerSettings"]


class WorkerSettings(BaseModel):
    """Retries and worker processes"""

    max_step_attempts: int = Field(
        default=5, ge=1, le=50, description="then the run goes to `needs_review`"
    )
    retry_backoff_base_s: Seconds = Field(
        default=1.0, description="full-jitter window of attempt n: `min(cap, base * 2^(n-1))`"
    )
    retry_backoff_cap_s: Seconds = Field(
        default=60.0, description="the longest full-jitter window between a step's attempts"
    )
    park_delays_over_s: Seconds = Field(
        default=60.0, description="longer retry delays wait in PostgreSQL, not as Redis countdowns"
    )
    # Worker processes: recycled to bound leaks; a liveness file touched while alive.
    worker_pool: Literal["prefork", "threads"] = Field(
        default="prefork",
        description=(
            "how a worker runs its `--concurrency` steps at once: `prefork`, a process each; "
            "`threads`, a thread each in one process, for steps that mostly wait on a "
            "provider (time limits, memory bound and restarts kept; see "
            "[Worker pools](../concepts/worker-pools.md))"
        ),
    )
    worker_page_reads: int = Field(
        default=2,
        ge=1,
        le=64,
        description=(
            "pages a worker process reads at once (Tesseract's OCR and PDFium each run in a "
            "process of their own, and use a core each): in a threads pool, the other steps "
            "reading documents wait their turn, and hand their step back (no attempt used) "
            "when none comes within its time"
        ),
    )
    worker_max_tasks_per_child: int = Field(
        default=1000, ge=1, description="prefork pool children are recycled after this many tasks"
    )
    worker_max_memory_per_child_mb: int = Field(
        default=512,
        ge=32,
        description=(
            "a prefork pool child past this resident memory is recycled after its task; a "
            "threads worker past it restarts itself, its steps finished or handed back first"
        ),
    )
    worker_soft_shutdown_s: Seconds = Field(
        default=10.0, description="cold shutdown grace before running steps are requeued"
    )
    liveness_file: Path | None = Field(
        default=None,
        description="touched by the worker's/beat's main loop; probes compare its mtime",
    )

    @model_validator(mode="after")
    def _backoff_base_within_its_cap(self) -> Self:
        if self.retry_backoff_base_s > self.retry_backoff_cap_s:
            raise ValueError(
                "DOCPIPE_RETRY_BACKOFF_BASE_S must not exceed DOCPIPE_RETRY_BACKOFF_CAP_S"
            )
        return self
