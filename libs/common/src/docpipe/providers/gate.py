"""The seam between a provider call and the limit it must respect (docpipe.providers.limiter
plugs in here; tests and tools may call without any)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from docpipe.providers.client import Completion

__all__ = ["CallGate", "CallTicket", "no_gate"]


class CallTicket:
    """Held while a request is in flight; the caller puts the answer on it, so that the gate
    learns the tokens really used and what the provider's headers said."""

    def __init__(self) -> None:
        self.completion: Completion | None = None


# Given the model, the run's lane and the request's estimated tokens, a context manager held
# while the request is in flight.
CallGate = Callable[[str, str, int], AbstractContextManager[CallTicket]]


@contextmanager
def no_gate(model: str, lane: str, tokens: int) -> Iterator[CallTicket]:
    yield CallTicket()
