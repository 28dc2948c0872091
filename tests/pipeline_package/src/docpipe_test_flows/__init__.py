"""claims:v1 — read a claim form, check each of its lines, route the claim. Written against
docpipe's public authoring API only (docpipe.pipelines)."""

from __future__ import annotations

from typing import Any

from docpipe.pipelines import Pipeline, Step, StepInput

__all__ = ["CLAIMS"]

CLAIM = {
    "type": "object",
    "required": ["claimant", "lines"],
    "additionalProperties": False,
    "properties": {
        "claimant": {"type": "string"},
        "lines": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "type": "object",
                "required": ["what", "amount"],
                "additionalProperties": False,
                "properties": {"what": {"type": "string"}, "amount": {"type": "number"}},
            },
        },
    },
}
LINE_CHECK = {
    "type": "object",
    "required": ["covered"],
    "additionalProperties": False,
    "properties": {"covered": {"type": "boolean"}},
}


def read_claim(step: StepInput) -> dict[str, Any]:
    return step.ask("claim", step.document, CLAIM)


def check_lines(step: StepInput) -> dict[str, Any]:
    lines = step.outputs["read_claim"]["lines"]
    answers = step.ask_all(
        [
            (f"line:{i}", f"{line['what']}: {line['amount']}", LINE_CHECK)
            for i, line in enumerate(lines)
        ]
    )
    return {"checks": answers}


def route(step: StepInput) -> dict[str, Any]:
    """Code only: no model is asked."""
    claim = step.outputs["read_claim"]
    total = sum(float(line["amount"]) for line in claim["lines"])
    return {"queue": "fast" if total < 1000 else "review", "lines": len(claim["lines"])}


CLAIMS = Pipeline(
    "claims",
    1,
    (
        Step(
            "read_claim",
            read_claim,
            CLAIM,
            instructions="Read the claim form.",
            model="gpt-4o-mini",
            fallback_model="gpt-4o",
        ),
        Step(
            "check_lines",
            check_lines,
            {"type": "object", "required": ["checks"], "properties": {"checks": {"type": "array"}}},
            instructions="Say whether the policy covers this line.",
            model="gpt-4o-mini",
        ),
        Step("route", route, {"type": "object", "required": ["queue", "lines"]}),
    ),
)
