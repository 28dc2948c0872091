"""What the fake provider bills, as a provider's invoice would list it: each answered request's
tokens at its model's price, batch requests at the batch discount, rounded per request to
the micro-dollar (as docpipe records each call's cost)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = ["DEFAULT_PRICES", "Billing", "parse_price"]

_MICRO = Decimal("0.000001")
# USD per million tokens (input, output): what docpipe's defaults say (DOCPIPE_MODEL_PRICES).
DEFAULT_PRICES: Mapping[str, tuple[Decimal, Decimal]] = {
    "gpt-4o-mini": (Decimal("0.15"), Decimal("0.60")),
    "gpt-4o": (Decimal("2.50"), Decimal("10.00")),
}


def parse_price(text: str) -> tuple[str, tuple[Decimal, Decimal]]:
    """Return ``"gpt-4o=2.5:10"`` as ``("gpt-4o", (2.5, 10))`` (USD per million tokens)."""
    model, _, prices = text.partition("=")
    given, _, taken = prices.partition(":")
    try:
        pair = (Decimal(given), Decimal(taken))
    except ArithmeticError:
        pair = (Decimal(-1), Decimal(-1))
    if not model or min(pair) < 0:
        raise ValueError(f"a price looks like MODEL=INPUT:OUTPUT (USD per Mtok), got {text!r}")
    return model, pair


@dataclass
class _Line:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: Decimal = Decimal(0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": str(self.usd),
        }


@dataclass
class Billing:
    """The bill so far: real-time and batch requests apart. A model without a price is billed
    its tokens at 0 USD."""

    prices: Mapping[str, tuple[Decimal, Decimal]] = field(default_factory=lambda: DEFAULT_PRICES)
    batch_discount: Decimal = Decimal("0.5")
    realtime: _Line = field(default_factory=_Line)
    batch: _Line = field(default_factory=_Line)

    def bill(self, model: str, input_tokens: int, output_tokens: int, *, batch: bool) -> Decimal:
        """Add one answered request to the bill; returns what it cost."""
        given, taken = self.prices.get(model, (Decimal(0), Decimal(0)))
        usd = (input_tokens * given + output_tokens * taken) / 1_000_000
        if batch:
            usd *= 1 - self.batch_discount
        usd = usd.quantize(_MICRO)
        line = self.batch if batch else self.realtime
        line.requests += 1
        line.input_tokens += input_tokens
        line.output_tokens += output_tokens
        line.usd += usd
        return usd

    def as_dict(self) -> dict[str, Any]:
        return {
            "realtime": self.realtime.as_dict(),
            "batch": self.batch.as_dict(),
            "batch_discount": str(self.batch_discount),
        }
