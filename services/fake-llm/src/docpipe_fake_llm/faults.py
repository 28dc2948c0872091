"""Injected failures: queued per step and model, consumed one request at a time in FIFO order."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "ANSWER_FAULTS",
    "DEFAULT_HANG_S",
    "DEFAULT_RETRY_AFTER_S",
    "Fault",
    "FaultKind",
    "FaultQueue",
    "broken_content",
    "invent_quotes",
]

# "length": the answer is cut off after one token, as if max_tokens had been reached.
# "invented_quote": a valid answer whose every quote (extract_fields) is not in the text.
FaultKind = Literal[
    "429", "400", "500", "503", "hang", "malformed", "invalid", "length", "invented_quote"
]
# Faults that shape a completion instead of answering with an error status.
ANSWER_FAULTS = frozenset({"hang", "malformed", "invalid", "length", "invented_quote"})

DEFAULT_RETRY_AFTER_S = 1.0
DEFAULT_HANG_S = 600.0

# What a chatty model says when it starts an answer and stops half-way, per step.
_MALFORMED = {
    "extract_sections": 'Sure! Here is the JSON: {"sections": [',
    "extract_fields": 'Sure! Here are the fields: {"fields": {"parties": [',
    "summarize": 'Sure! Here is the summary: {"summary": "This agreement',
}
# Valid JSON that no step's schema accepts.
_INVALID = '{"result": "ok"}'


@dataclass
class Fault:
    """``remaining`` more matching requests fail as ``kind``; ``None`` step or model match any."""

    id: int
    kind: FaultKind
    remaining: int
    step: str | None = None
    model: str | None = None
    retry_after: float | None = None
    hang_s: float | None = None

    def matches(self, step: str, model: str) -> bool:
        return self.step in (None, step) and self.model in (None, model)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class FaultQueue:
    """Pending faults in the order they were added."""

    def __init__(self) -> None:
        self._faults: deque[Fault] = deque()
        self._next_id = 1

    def add(
        self,
        kind: FaultKind,
        count: int = 1,
        *,
        step: str | None = None,
        model: str | None = None,
        retry_after: float | None = None,
        hang_s: float | None = None,
    ) -> Fault:
        fault = Fault(self._next_id, kind, count, step, model, retry_after, hang_s)
        self._next_id += 1
        self._faults.append(fault)
        return fault

    def take(self, step: str, model: str) -> Fault | None:
        """Consume one use of the oldest fault that matches, if any."""
        for fault in self._faults:
            if fault.matches(step, model):
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.remove(fault)
                return fault
        return None

    def clear(self) -> int:
        cleared = len(self._faults)
        self._faults.clear()
        return cleared

    def pending(self) -> list[dict[str, Any]]:
        return [fault.as_dict() for fault in self._faults]


def broken_content(kind: Literal["malformed", "invalid"], step: str) -> str:
    """Return the content of a ``malformed`` (not JSON) or ``invalid`` (wrong schema) answer."""
    return _MALFORMED.get(step, "Sure! Here is the JSON: {") if kind == "malformed" else _INVALID


def invent_quotes(answer: Any) -> Any:
    """``answer`` with the quote of every field replaced by a sentence the text never says,
    as a model that makes its evidence up writes it; other answers stay as they are."""
    if not isinstance(answer, dict) or not isinstance(fields := answer.get("fields"), dict):
        return answer
    invented = {
        name: {
            **read,
            "quote": f"The parties agree that the {name.replace('_', ' ')} is "
            "set out in Schedule Z.",
        }
        if isinstance(read, dict) and "quote" in read
        else read
        for name, read in fields.items()
    }
    return {**answer, "fields": invented}
