"""Faults of the batch interfaces, queued like the completions' (faults.py):

- at a point of a batch's life (``upload``, ``create``, ``retrieve``, ``list``, ``download``,
  ``cancel``): the request fails (``500``, ``429``) or hangs (``hang``), either before the
  provider acts or, with ``after``, once it has acted (the client never hears that its file
  is stored or its batch created: what a crash between two steps looks like from outside);
- fates of the next batches created: ``fail`` (validation fails), ``expire`` (processing
  stalls until the completion window ends, after a ``share`` of the requests), ``errors``
  (``requests`` of its requests answer ``status``), ``malformed`` (``requests`` answers are
  not JSON), ``slow`` (its requests take ``delay_s`` to process).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "BatchFate",
    "BatchPoint",
    "FateKind",
    "FateQueue",
    "PointFault",
    "PointFaultKind",
    "PointFaults",
]

BatchPoint = Literal["upload", "create", "retrieve", "list", "download", "cancel"]
PointFaultKind = Literal["500", "429", "hang"]
FateKind = Literal["fail", "expire", "errors", "malformed", "slow"]


@dataclass
class PointFault:
    id: int
    point: BatchPoint
    kind: PointFaultKind
    remaining: int
    after: bool = False
    hang_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PointFaults:
    """Faults at the points of a batch's life, each used ``remaining`` times, oldest first."""

    def __init__(self) -> None:
        self._faults: deque[PointFault] = deque()
        self._next_id = 1

    def add(
        self,
        point: BatchPoint,
        kind: PointFaultKind,
        count: int = 1,
        *,
        after: bool = False,
        hang_s: float | None = None,
    ) -> PointFault:
        fault = PointFault(self._next_id, point, kind, count, after, hang_s)
        self._next_id += 1
        self._faults.append(fault)
        return fault

    def take(self, point: BatchPoint) -> PointFault | None:
        for fault in self._faults:
            if fault.point == point:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def pending(self) -> list[dict[str, Any]]:
        return [fault.as_dict() for fault in self._faults]


@dataclass
class BatchFate:
    """What happens to ``remaining`` more batches once created."""

    id: int
    kind: FateKind
    remaining: int
    requests: int = 1  # errors, malformed: how many of a batch's requests
    status: int = 500  # errors: the status they answer
    share: float = 0.0  # expire: the share of requests processed before the window ends
    delay_s: float = 0.0  # slow

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FateQueue:
    def __init__(self) -> None:
        self._fates: deque[BatchFate] = deque()
        self._next_id = 1

    def add(self, kind: FateKind, count: int = 1, **details: Any) -> BatchFate:
        fate = BatchFate(self._next_id, kind, count, **details)
        self._next_id += 1
        self._fates.append(fate)
        return fate

    def take(self) -> BatchFate | None:
        """The fate of the batch being created now, if one is queued."""
        if not self._fates:
            return None
        fate = self._fates[0]
        fate.remaining -= 1
        if fate.remaining == 0:
            self._fates.popleft()
        return fate

    def pending(self) -> list[dict[str, Any]]:
        return [fate.as_dict() for fate in self._fates]
