"""Counters the tests and benchmarks read back from ``GET /control/stats``, and the request
log that outlives the process."""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

__all__ = ["RequestLog", "Stats"]

_WINDOW_SECONDS = 3600


class Stats:
    """Counts completion requests by step and status, and 200 answers per wall-clock second."""

    def __init__(self) -> None:
        self.requests_total = 0
        # Completion requests being answered now, and the most there were at once: how many
        # calls the clients really hold in flight together.
        self.in_flight = 0
        self.max_in_flight = 0
        self.by_step: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.by_response_format: Counter[str] = Counter()
        self._per_second: deque[list[int]] = deque()  # [unix second, answers], oldest first
        # [unix second, model, answers, tokens], oldest first
        self._by_model: deque[list[Any]] = deque()

    def record_request(self) -> None:
        self.requests_total += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def record_answered(self) -> None:
        """A request counted by record_request has its answer (or error)."""
        self.in_flight = max(0, self.in_flight - 1)  # (a reset may come in between)

    def record_step(self, step: str) -> None:
        self.by_step[step] += 1

    def record_response_format(self, kind: str) -> None:
        self.by_response_format[kind] += 1

    def record_tokens(self, model: str, tokens: int) -> None:
        """An answered request of ``model`` that used ``tokens`` (prompt and completion)."""
        second = int(time.time())
        for entry in reversed(self._by_model):
            if entry[0] != second:
                break
            if entry[1] == model:
                entry[2] += 1
                entry[3] += tokens
                return
        self._by_model.append([second, model, 1, tokens])
        while self._by_model[0][0] <= second - _WINDOW_SECONDS:
            self._by_model.popleft()

    def record_status(self, status: int) -> None:
        self.by_status[str(status)] += 1
        if status == 200:
            self._record_accepted(int(time.time()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests_total": self.requests_total,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "by_step": dict(self.by_step),
            "by_status": dict(self.by_status),
            "by_response_format": dict(self.by_response_format),
            "answered_per_second_by_model": [list(entry) for entry in self._by_model],
            "accepted_per_second": [list(entry) for entry in self._per_second],
        }

    def _record_accepted(self, second: int) -> None:
        if self._per_second and self._per_second[-1][0] == second:
            self._per_second[-1][1] += 1
        else:
            self._per_second.append([second, 1])
        while self._per_second[0][0] <= second - _WINDOW_SECONDS:
            self._per_second.popleft()


class RequestLog:
    """One line per completion request received, appended as it arrives: the client's
    ``X-Client-Request-Id`` (docpipe sends its call log row's id), or ``-`` without one.

    Each line is one write(2) to a file opened for appending, so it is on record even if
    the provider is SIGKILLed right after, and a restarted provider appends to the same
    file: the chaos suite counts what the provider was asked for across crashes.
    """

    def __init__(self, path: Path | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    def record(self, request_id: str | None) -> None:
        if self._fd is not None:
            line = (request_id or "-").replace("\n", " ")[:200]
            os.write(self._fd, f"{line}\n".encode())
