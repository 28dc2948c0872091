"""What a busy deployment's rows hold: step outputs, call answers and documents shaped like
``document_extract:v1``'s (structure and sizes as the sample contracts give them through the
fake provider: a sections output of about 1.2 kB, a fields output of about 2 kB with its
evidence, a summary of about 0.8 kB; a fields call's answer of about 0.2 kB).

Each kind comes in a few variants built from a seeded vocabulary, so that rows are not
byte-identical (which would compress better than real data) and stay reproducible.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["VARIANTS", "templates"]

VARIANTS = 16

_WORDS = [
    "agreement",
    "party",
    "licensor",
    "licensee",
    "lessor",
    "lessee",
    "supplier",
    "customer",
    "services",
    "term",
    "fees",
    "payment",
    "invoice",
    "days",
    "notice",
    "termination",
    "renewal",
    "liability",
    "cap",
    "confidentiality",
    "years",
    "governing",
    "law",
    "delaware",
    "england",
    "germany",
    "california",
    "indemnification",
    "warranty",
    "data",
    "protection",
    "audit",
    "records",
    "force",
    "majeure",
    "insurance",
    "delivery",
    "equipment",
    "software",
    "licence",
    "consulting",
    "effective",
    "date",
    "initial",
    "period",
    "written",
    "consent",
    "breach",
    "remedy",
    "assignment",
]
_SECTIONS = (
    "Preamble",
    "Definitions",
    "Licence Grant",
    "Fees and Expenses",
    "Term and Termination",
    "Force Majeure",
    "Warranties",
    "Data Protection",
    "Audit and Records",
    "Indemnification",
    "Confidentiality",
    "Limitation of Liability",
    "Governing Law",
    "General Provisions",
)
_FIELDS = (
    "parties",
    "contract_type",
    "effective_date",
    "term_months",
    "total_value",
    "payment_terms_days",
    "termination_notice_days",
    "liability_cap",
    "confidentiality_years",
    "governing_law",
    "auto_renewal",
)


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize()


def _sections(rng: random.Random) -> list[dict[str, Any]]:
    count, start, found = rng.randint(11, 14), 0, []
    for number, title in enumerate(_SECTIONS[:count]):
        end = start + rng.randint(300, 1500)
        found.append({"end": end, "start": start, "title": title, "number": str(number)})
        start = end
    return found


def _value(rng: random.Random, field: str) -> Any:
    if field == "parties":
        return [
            {"name": f"{_sentence(rng, 2)} GmbH", "role": "Licensor"},
            {"name": f"{_sentence(rng, 2)} Inc.", "role": "Licensee"},
        ]
    if field in ("total_value", "liability_cap"):
        return {"amount": rng.randrange(10_000, 2_000_000, 1000), "currency": "USD"}
    if field in ("contract_type", "governing_law"):
        return _sentence(rng, 3).lower()
    if field == "effective_date":
        return f"20{rng.randint(19, 26)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
    if field == "auto_renewal":
        return rng.random() < 0.5
    return rng.randint(1, 90)


def _variant(rng: random.Random) -> dict[str, Any]:
    sections = _sections(rng)
    values = {f: _value(rng, f) for f in _FIELDS}
    evidence = [
        {
            "end": s["start"] + 120,
            "page": 1,
            "path": f"/fields/{field}",
            "field": field,
            "quote": _sentence(rng, rng.randint(8, 20)),
            "start": s["start"],
            "value": values[field],
            "section": s["number"],
            "supported": True,
            "section_title": s["title"],
        }
        for field, s in zip(_FIELDS, sections, strict=False)
    ]
    summary = {
        "summary": " ".join(_sentence(rng, 12) + "." for _ in range(4)),
        "key_points": [_sentence(rng, 6) for _ in range(8)],
        "risk_flags": [],
    }
    answer_fields = {
        f: {"quote": _sentence(rng, 10), "value": values[f]}
        for f in rng.sample(_FIELDS, rng.randint(0, 3))
    }
    return {
        "extract_text": {
            "pages": 1,
            "format": "text",
            "warnings": [],
            "ocr_pages": 0,
            "characters": sections[-1]["end"],
            "rotated_pages": [],
            "ocr_confidence": None,
        },
        "extract_sections": {"sections": sections},
        "extract_fields": {"fields": values, "evidence": evidence},
        "summarize": summary,
        # What each step's calls answered: the sections call names headings, a fields call
        # (one per section) the few values its section holds, the summary call the summary.
        "answer:extract_sections": {
            "sections": [
                {"title": s["title"], "number": s["number"], "heading": s["title"].upper()}
                for s in sections
            ]
        },
        "answer:extract_fields": {"fields": answer_fields},
        "answer:summarize": summary,
        "document": "\n\n".join(
            f"{s['number']}. {s['title'].upper()}\n{_sentence(rng, 60)}" for s in sections
        ),
    }


def templates(seed: int) -> list[dict[str, str]]:
    """``VARIANTS`` variants, each kind as JSON text (the document as plain text)."""
    rng = random.Random(seed)
    out = []
    for _ in range(VARIANTS):
        variant = _variant(rng)
        out.append(
            {
                k: v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))
                for k, v in variant.items()
            }
        )
    return out
