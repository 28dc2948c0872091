"""``document_extract:v1``: contract -> text (docpipe's ``extract_text``) -> sections ->
fields (one call per section) -> summary.

Every field comes with the quote it was read from, located in the document by docpipe
(docpipe.pipelines.evidence); a run with a value whose quote is not in the document, or
does not hold the value, ends in review (``unsupported_evidence``), and so does one whose
document could mostly not be read or whose fields step found nothing (``poor_extraction``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from docpipe.errors import PermanentLLMError
from docpipe.pipelines.evidence import EVIDENCE_SCHEMA, MAX_QUOTE_CHARS, evidence_for
from docpipe.pipelines.model import Pipeline, Step, StepInput
from docpipe.pipelines.text_extraction import with_text_extraction

__all__ = ["DOCUMENT_EXTRACT", "FIELDS_SCHEMA"]

PRIMARY_MODEL = "gpt-4o-mini"
FALLBACK_MODEL = "gpt-4o"

_MONEY = {
    "type": "object",
    "required": ["amount", "currency"],
    "properties": {
        "amount": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "additionalProperties": False,
}
_COUNT = {"type": "integer", "minimum": 0}

FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "parties": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "role"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "role": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "contract_type": {"type": "string", "minLength": 1},
        "effective_date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "term_months": _COUNT,
        "total_value": _MONEY,
        "payment_terms_days": _COUNT,
        "termination_notice_days": _COUNT,
        "liability_cap": _MONEY,
        "confidentiality_years": _COUNT,
        "governing_law": {"type": "string", "minLength": 1},
        "auto_renewal": {"type": "boolean"},
    },
    "additionalProperties": False,
}

# --- extract_sections ---------------------------------------------------------------------

# Each section is a paid call of extract_fields: the model may name at most this many
# headings (strict output mode tells it so), and a longer answer fails its schema.
MAX_SECTIONS = 60

_SECTIONS_ANSWER = {
    "type": "object",
    "required": ["sections"],
    "properties": {
        "sections": {
            "type": "array",
            "maxItems": MAX_SECTIONS,
            "items": {
                "type": "object",
                "required": ["number", "title", "heading"],
                "properties": {
                    "number": {"type": "string"},
                    "title": {"type": "string"},
                    "heading": {"type": "string", "minLength": 1},
                },
            },
        }
    },
}

_SECTION = {
    "type": "object",
    "required": ["number", "title", "start", "end"],
    "properties": {
        "number": {"type": "string"},
        "title": {"type": "string"},
        "start": {"type": "integer", "minimum": 0},
        "end": {"type": "integer", "minimum": 0},
    },
}
SECTIONS_SCHEMA = {
    "type": "object",
    "required": ["sections"],
    # The headings the model named, and the preamble before them.
    "properties": {
        "sections": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SECTIONS + 1,
            "items": _SECTION,
        }
    },
}


def extract_sections(ctx: StepInput) -> dict[str, Any]:
    """Where each section of the document starts and ends (the preamble is section "0")."""
    if not ctx.document.strip():
        raise PermanentLLMError("the document is empty", kind="empty_input")
    answer = ctx.ask("document", ctx.document, _SECTIONS_ANSWER)
    return {"sections": locate_sections(ctx.document, answer["sections"])}


def locate_sections(document: str, headings: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Cut ``document`` at the heading lines the model named.

    Offsets, not copied text, are stored: the model is never trusted to reproduce the
    document. Headings that do not occur as a line are dropped; what precedes the first
    heading is the preamble (the whole document when no heading is found).
    """
    starts: list[tuple[int, str, str]] = []
    search_from = 0
    for h in headings:
        match = re.compile(rf"^[ \t]*{re.escape(h['heading'].strip())}[ \t]*$", re.MULTILINE)
        found = match.search(document, search_from)
        if found:
            starts.append((found.start(), h["number"], h["title"]))
            search_from = found.end()
    bounds = [0, *(s for s, _, _ in starts), len(document)]
    spans = [("0", "Preamble", 0, bounds[1])]
    spans += [
        (number, title, start, bounds[i + 2]) for i, (start, number, title) in enumerate(starts)
    ]
    return [
        {"number": number, "title": title, "start": start, "end": end}
        for number, title, start, end in spans
        if document[start:end].strip()
    ]


# --- extract_fields -----------------------------------------------------------------------

# The model answers each field with the passage it read it from, copied from the text.
_QUOTE = {"type": "string", "minLength": 1, "maxLength": MAX_QUOTE_CHARS}
_FIELDS_ANSWER = {
    "type": "object",
    "required": ["fields"],
    "properties": {
        "fields": {
            "type": "object",
            "properties": {
                name: {
                    "type": "object",
                    "required": ["value", "quote"],
                    "properties": {"value": schema, "quote": _QUOTE},
                    "additionalProperties": False,
                }
                for name, schema in FIELDS_SCHEMA["properties"].items()
            },
            "additionalProperties": False,
        }
    },
}
EXTRACTED_SCHEMA = {
    "type": "object",
    "required": ["fields", "found_in", "evidence"],
    "properties": {
        "fields": FIELDS_SCHEMA,
        "found_in": {"type": "object", "additionalProperties": {"type": "string"}},
        # One entry per value as read (the parties a later section adds are one more).
        "evidence": {"type": "array", "items": EVIDENCE_SCHEMA},
    },
}


def extract_fields(ctx: StepInput) -> dict[str, Any]:
    """The contract's fields, read section by section (the first section to state one wins),
    each with the evidence of the quote it was read from."""
    fields: dict[str, Any] = {}
    found_in: dict[str, str] = {}
    evidence: list[dict[str, Any]] = []
    sections: list[dict[str, Any]] = ctx.outputs["extract_sections"]["sections"]
    answers = ctx.ask_all(
        [
            (
                f"section:{i}",
                f"Section {s['number']}. {s['title']}\n\n"
                + ctx.document[int(s["start"]) : int(s["end"])],
                _FIELDS_ANSWER,
            )
            for i, s in enumerate(sections)
        ]
    )
    for section, answer in zip(sections, (a["fields"] for a in answers), strict=True):
        for name, quoted in answer.items():
            value = quoted["value"]
            if name == "parties" and "parties" in fields:
                known = {p["name"] for p in fields["parties"]}
                value = [p for p in value if p["name"] not in known]
                if not value:
                    continue
                fields["parties"] = [*fields["parties"], *value]
            elif name in fields:
                continue
            else:
                fields[name] = value
                found_in[name] = section["number"]
            where = evidence_for(
                ctx.document,
                quoted["quote"],
                value=value,
                page_starts=ctx.page_starts,
                sections=sections,
                near=(section["start"], section["end"]),
            )
            evidence.append({"field": name, "path": f"/fields/{name}", "value": value, **where})
    return {"fields": fields, "found_in": found_in, "evidence": evidence}


# --- summarize ----------------------------------------------------------------------------

SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["summary", "key_points", "risk_flags"],
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 4000},
        "key_points": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": 8,
        },
        "risk_flags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
}


def summarize(ctx: StepInput) -> dict[str, Any]:
    """A short summary, key points and risk flags, written from the extracted fields."""
    brief = {
        "fields": ctx.outputs["extract_fields"]["fields"],
        "section_titles": [s["title"] for s in ctx.outputs["extract_sections"]["sections"]],
    }
    return ctx.ask("summary", json.dumps(brief, ensure_ascii=False), SUMMARY_SCHEMA)


# Defined with its first step, as the catalog would add it: code that names this object
# (tests, tools) sees the same steps and definition hash as the workers.
DOCUMENT_EXTRACT = with_text_extraction(
    Pipeline(
        name="document_extract",
        version=1,
        source="builtin (docpipe.pipelines.document_extract)",
        review_if=("unsupported_evidence", "poor_extraction"),
        steps=(
            Step(
                name="extract_sections",
                prompt_version="extract_sections@v1",
                model=PRIMARY_MODEL,
                fallback_model=FALLBACK_MODEL,
                instructions=(
                    "You split a commercial contract into its numbered sections. Answer with a "
                    'JSON object {"sections": [{"number", "title", "heading"}]} where heading '
                    "is the section's heading line exactly as written in the text."
                ),
                output_schema=SECTIONS_SCHEMA,
                execute=extract_sections,
                candidates=(PRIMARY_MODEL, FALLBACK_MODEL),
                answer_schemas=(_SECTIONS_ANSWER,),
            ),
            Step(
                name="extract_fields",
                prompt_version="extract_fields@v2",
                model=PRIMARY_MODEL,
                fallback_model=FALLBACK_MODEL,
                instructions=(
                    "You read one section of a commercial contract and extract the fields it "
                    'states. Answer with a JSON object {"fields": {"<field>": {"value": ..., '
                    '"quote": "..."}}} holding only the fields this section states: parties '
                    "[{name, role}], contract_type, effective_date (YYYY-MM-DD), term_months, "
                    "total_value {amount, currency}, payment_terms_days, "
                    "termination_notice_days, liability_cap {amount, currency}, "
                    "confidentiality_years, governing_law, auto_renewal. The quote is the "
                    "sentence or phrase the value is read from, copied word for word from the "
                    "section (at most 1000 characters)."
                ),
                output_schema=EXTRACTED_SCHEMA,
                execute=extract_fields,
                evidence_at="/fields/*",  # each field; found_in is quoted by nothing
                # Which section stated a field is bookkeeping, not a value to be right about;
                # parties are paired by name, so a reordered list is not wrong.
                compare={"found_in": "none", "fields.parties": {"key": "name"}},
                candidates=(PRIMARY_MODEL, FALLBACK_MODEL),
                answer_schemas=(_FIELDS_ANSWER,),
            ),
            Step(
                name="summarize",
                prompt_version="summarize@v1",
                model=PRIMARY_MODEL,
                fallback_model=FALLBACK_MODEL,
                instructions=(
                    "You summarise a commercial contract for a busy account manager from its "
                    'extracted fields. Answer with a JSON object {"summary": "2-4 sentences", '
                    '"key_points": [...], "risk_flags": [...]}.'
                ),
                output_schema=SUMMARY_SCHEMA,
                execute=summarize,
                # Prose: similar enough is right.
                compare={
                    "summary": {"compare": "fuzzy", "threshold": 0.6},
                    "key_points[]": {"compare": "fuzzy", "threshold": 0.6},
                    "risk_flags[]": {"compare": "fuzzy", "threshold": 0.6},
                },
                candidates=(PRIMARY_MODEL, FALLBACK_MODEL),
                answer_schemas=(SUMMARY_SCHEMA,),
            ),
        ),
    )
)
