"""The served OpenAPI document's pattern for amounts below a deployment's limit says exactly
what the API accepts: checked against Decimal over many strings."""

from __future__ import annotations

import random
import re
from decimal import Decimal

import pytest

from docpipe_api.openapi import usd_string_at_most
from docpipe_api.schemas import USD_STRING


def _candidates(rng: random.Random) -> list[str]:
    """Decimal-looking strings around the interesting places: short and long integer parts,
    0 to 6 places, leading zeros, the limits themselves."""
    out = []
    for _ in range(20_000):
        digits = rng.choice([0, 1, 1, 2, 3, 4, 9])
        whole = (
            "0"
            if digits == 0
            else str(rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits))
        )
        if rng.random() < 0.1:
            whole = "0" + whole
        if rng.random() < 0.7:
            whole += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 7)))
        out.append(whole)
    return out


@pytest.mark.parametrize(
    "limit",
    [
        "1",
        "2",
        "5",
        "9",
        "10",
        "100",
        "100.5",
        "37.25",
        "1.000001",
        "1234.000001",
        "99999999.999999",
    ],
)
def test_the_pattern_accepts_exactly_the_amounts_up_to_the_limit(limit: str) -> None:
    pattern = re.compile(usd_string_at_most(Decimal(limit)))
    near = Decimal(limit)
    edges = [
        limit,
        str(near + Decimal("0.000001")),
        str(near - Decimal("0.000001")),
        f"{limit}0",
        "0.000001",
        "0.0000001",
        "0",
        "0.0",
        "1",
        "1.0",
    ]
    for text in [*edges, *_candidates(random.Random(limit))]:
        accepted = bool(USD_STRING.match(text)) and Decimal(text) <= near
        assert bool(pattern.match(text)) == accepted, (limit, text)
