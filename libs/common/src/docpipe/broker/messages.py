"""The messages docpipe's processes send each other, and what a broker must do with them.

A message names work by ids only: "run this step of this run", "deliver this webhook". It
is written to the outbox with the state change that wants it (docpipe.state.outbox) and
handed to a :class:`Broker` after that commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["DELIVER_WEBHOOK", "RUN_STEP", "Broker", "Message"]

# Celery task names; the worker binds the work behind them (docpipe.worker.tasks).
RUN_STEP = "docpipe.run_step"
DELIVER_WEBHOOK = "docpipe.deliver_webhook"


@dataclass(frozen=True)
class Message:
    """An outbox row on its way out."""

    id: int
    topic: str  # 'step' | 'webhook'
    queue: str
    run_id: str | None = None
    step: str | None = None
    traceparent: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


class Broker(Protocol):
    def publish(self, message: Message) -> None: ...
