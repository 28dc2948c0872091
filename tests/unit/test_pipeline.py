import jsonschema
import pytest

from docpipe.errors import InvalidRequestError
from docpipe.extraction.pages import WARNING_KINDS, PageWarning
from docpipe.pipelines import Pipeline, PipelineError, Step
from docpipe.pipelines.catalog import get_pipeline, pipelines
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT, MAX_SECTIONS, locate_sections
from docpipe.pipelines.poor_extraction import POOR_PAGE_KINDS

DOC = "SUPPLY AGREEMENT\nParties here.\n1. DEFINITIONS\nWords.\n2. PRICE\nMoney.\n"


def test_document_extract_v1_is_registered_with_text_extraction_and_three_model_steps() -> None:
    assert "document_extract:v1" in pipelines()
    p = get_pipeline("document_extract:v1")
    assert p is DOCUMENT_EXTRACT
    assert p.step_names == ["extract_text", "extract_sections", "extract_fields", "summarize"]
    assert p.next_step("extract_text") == "extract_sections"
    assert p.next_step("extract_sections") == "extract_fields"
    assert p.next_step("summarize") is None
    assert p.steps[0].models == ()
    for step in p.steps[1:]:
        assert step.prompt_version.startswith(step.name + "@v")
        assert step.models == ("gpt-4o-mini", "gpt-4o")
        assert step.system_prompt.startswith(f"docpipe-step: {step.name}\n")


def test_unknown_pipeline_and_step_are_clear_errors() -> None:
    with pytest.raises(InvalidRequestError, match="unknown pipeline 'nope:v1'"):
        get_pipeline("nope:v1")
    with pytest.raises(InvalidRequestError, match="has no step 'translate'"):
        DOCUMENT_EXTRACT.step("translate")


def test_sections_are_cut_at_the_named_heading_lines() -> None:
    sections = locate_sections(
        DOC,
        [
            {"number": "1", "title": "Definitions", "heading": "1. DEFINITIONS"},
            {"number": "2", "title": "Price", "heading": "2. PRICE"},
        ],
    )
    texts = [DOC[s["start"] : s["end"]] for s in sections]
    assert [s["number"] for s in sections] == ["0", "1", "2"]
    assert texts == [
        "SUPPLY AGREEMENT\nParties here.\n",
        "1. DEFINITIONS\nWords.\n",
        "2. PRICE\nMoney.\n",
    ]


def test_headings_the_text_does_not_contain_are_dropped() -> None:
    sections = locate_sections(DOC, [{"number": "9", "title": "Ghost", "heading": "9. GHOST"}])
    assert sections == [{"number": "0", "title": "Preamble", "start": 0, "end": len(DOC)}]


def test_a_heading_mentioned_inside_a_sentence_is_not_a_section_start() -> None:
    doc = "Intro refers to 2. PRICE below.\n1. A\nx\n2. PRICE\ny\n"
    sections = locate_sections(doc, [{"number": "2", "title": "Price", "heading": "2. PRICE"}])
    assert doc[sections[1]["start"] :].startswith("2. PRICE\ny")


def test_the_authoring_api_is_one_small_module() -> None:
    import docpipe.pipelines as authoring

    assert sorted(authoring.__all__) == [
        "JSONSchema",
        "Pipeline",
        "PipelineError",
        "Step",
        "StepInput",
    ]


def test_a_step_sees_the_document_earlier_outputs_and_ask_and_nothing_else() -> None:
    from docpipe.providers.calls import StepCalls
    from docpipe.settings import Settings

    calls = StepCalls(
        db=None,  # type: ignore[arg-type]  (never reached: nothing is asked here)
        llm=None,  # type: ignore[arg-type]
        settings=Settings(),
        step=DOCUMENT_EXTRACT.steps[2],
        run_id="r",
        tenant_id="t",
        lane="interactive",
        attempt=1,
        generation=0,
    )
    seen = calls.input("the text\n\npage two", {"extract_sections": {"sections": []}}, (0, 10))
    assert {name for name in dir(seen) if not name.startswith("_")} == {
        "ask",
        "ask_all",
        "document",
        "outputs",
        "page_starts",
    }
    assert (seen.document, seen.page_starts) == ("the text\n\npage two", (0, 10))
    with pytest.raises(TypeError):  # earlier outputs are read-only
        seen.outputs["extract_sections"] = {}  # type: ignore[index]


def test_a_step_name_and_bounds_are_checked_when_it_is_defined() -> None:
    from docpipe.pipelines import PipelineError, Step

    def nothing(step: object) -> dict[str, object]:
        return {}

    with pytest.raises(PipelineError, match="a step name is 1-63 characters"):
        Step("Bad Name", nothing, {"type": "object"})
    with pytest.raises(PipelineError, match="max_attempts must be 1-50"):
        Step("a", nothing, {"type": "object"}, max_attempts=0)
    with pytest.raises(PipelineError, match="must describe a JSON object"):
        Step("a", nothing, {"type": "array"})
    with pytest.raises(PipelineError, match="a fallback_model needs a model"):
        Step("a", nothing, {"type": "object"}, fallback_model="gpt-4o")


def test_every_pipeline_the_catalog_loads_starts_with_extract_text() -> None:
    from docpipe.pipelines.text_extraction import EXTRACT_TEXT_STEP

    for pipeline in pipelines().values():
        assert pipeline.steps[0] is EXTRACT_TEXT_STEP, pipeline.key


def test_a_pipeline_may_not_name_a_step_extract_text() -> None:
    from docpipe.pipelines import Pipeline, PipelineError, Step
    from docpipe.pipelines.text_extraction import with_text_extraction

    def nothing(step: object) -> dict[str, object]:
        return {}

    mine = Pipeline("mine", 1, (Step("extract_text", nothing, {"type": "object"}),))
    with pytest.raises(PipelineError, match="docpipe's own first step of every pipeline"):
        with_text_extraction(mine)


def test_the_sections_a_model_may_name_are_bounded_for_they_are_paid_calls() -> None:
    answer_schema = DOCUMENT_EXTRACT.step("extract_sections").answer_schemas[0]
    headings = [{"number": str(i), "title": "T", "heading": f"H{i}"} for i in range(61)]
    jsonschema.validate({"sections": headings[:MAX_SECTIONS]}, answer_schema)
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        jsonschema.validate({"sections": headings}, answer_schema)
    output = DOCUMENT_EXTRACT.step("extract_sections").output_schema
    assert output["properties"]["sections"]["maxItems"] == MAX_SECTIONS + 1  # + the preamble


def _evidence_step(name: str = "read") -> Step:
    schema = {"type": "object", "properties": {"evidence": {"type": "array"}}}
    return Step(name=name, execute=lambda ctx: {"evidence": []}, output_schema=schema)


def test_document_extract_pauses_after_the_step_whose_evidence_is_unsupported() -> None:
    def record(field: str, supported: bool) -> dict[str, object]:
        return {
            "field": field,
            "value": 1,
            "quote": "q",
            "start": None,
            "end": None,
            "page": None,
            "section": None,
            "supported": supported,
        }

    assert DOCUMENT_EXTRACT.review_if == ("unsupported_evidence", "poor_extraction")
    supported = {"evidence": [record("term_months", True)]}
    assert DOCUMENT_EXTRACT.review_reasons("extract_fields", supported, sample_at=0.5) == []
    invented = {"evidence": [record("term_months", True), record("liability_cap", False)]}
    [reason] = DOCUMENT_EXTRACT.review_reasons("extract_fields", invented, sample_at=0.5)
    assert reason.kind == "unsupported_evidence"
    assert reason.message == (
        "1 value(s) their quote does not support: liability_cap (quote not in the document)"
    )
    not_in_quote = {**record("governing_law", True), "support": "value_not_in_quote"}
    not_in_quote["supported"] = False
    both = {"evidence": [*invented["evidence"], not_in_quote]}
    [reason] = DOCUMENT_EXTRACT.review_reasons("extract_fields", both, sample_at=0.5)
    assert reason.message.endswith("governing_law (quote found, value not in it)")
    narrow = Pipeline("p", 1, (_evidence_step(),), review_if=("value_not_in_quote",))
    [reason] = narrow.review_reasons(narrow.steps[0].name, both, sample_at=0.5)
    assert reason.kind == "value_not_in_quote"
    assert reason.message == (
        "1 value(s) their quote does not support: governing_law (quote found, value not in it)"
    )
    assert narrow.review_reasons(narrow.steps[0].name, invented, sample_at=0.5) == []


def test_review_rules_are_checked_when_the_pipeline_is_defined() -> None:
    with pytest.raises(PipelineError, match="unknown review_if rule 'typo' \\(known: "):
        Pipeline("p", 1, (_evidence_step(),), review_if=("typo",))
    plain = Step(name="plain", execute=lambda ctx: {}, output_schema={"type": "object"})
    with pytest.raises(PipelineError, match="needs a step that records evidence"):
        Pipeline("p", 1, (plain,), review_if=("unsupported_evidence",))
    ruled = Pipeline("p", 1, (_evidence_step(),), review_if=("unsupported_evidence",))
    unruled = Pipeline("p", 1, (_evidence_step(),))
    assert ruled.definition_hash != unruled.definition_hash
    unsupported = {
        "evidence": [
            {
                "field": "x",
                "value": 1,
                "quote": "q",
                "start": None,
                "end": None,
                "page": None,
                "section": None,
                "supported": False,
            }
        ]
    }
    assert unruled.review_reasons("read", unsupported, sample_at=0.5) == []
    assert [r.kind for r in ruled.review_reasons("read", unsupported, sample_at=0.5)] == [
        "unsupported_evidence"
    ]


def extraction(pages: int, *warnings: tuple[str, int, float | None]) -> dict[str, object]:
    """An extract_text output with these (kind, page, value) warnings."""
    return {
        "format": "pdf",
        "pages": pages,
        "ocr_pages": pages,
        "characters": 100,
        "warnings": [
            {"kind": k, "page": p, "value": v, "message": f"page {p}: {k}"} for k, p, v in warnings
        ],
        "rotated_pages": [],
    }


def poor(output: dict[str, object], step: str = "extract_text", share: float = 0.5) -> list[str]:
    """The messages of document_extract's poor_extraction rule after ``step``."""
    reasons = DOCUMENT_EXTRACT.review_reasons(
        step, output, sample_at=0.5, poor_extraction_share=share
    )
    return [r.message for r in reasons if r.kind == "poor_extraction"]


def test_poor_extraction_pauses_after_extract_text_when_most_pages_could_not_be_read() -> None:
    mostly_unread = extraction(
        4,
        ("low_ocr_confidence", 1, 31.5),
        ("no_text", 3, None),
        ("reduced_resolution", 2, 150),
        ("ocr_timeout", 4, 60),
    )
    assert poor(mostly_unread) == [
        "3 of 4 pages could not be read well: page 1 (low OCR confidence 31.5), page 3 (no "
        "text), page 4 (OCR out of time)"
    ]
    # Half the pages is not most; the share is the setting's.
    half = extraction(4, ("no_text", 1, None), ("no_text", 2, None))
    assert poor(half) == []
    assert poor(half, share=0.25) == [
        "2 of 4 pages could not be read well: page 1 (no text), page 2 (no text)"
    ]
    # Warnings that are not about reading poorly, and sentences of runs from before warnings
    # had a kind, count for nothing.
    fine = {
        **extraction(2, ("garbage_text_layer", 1, 0.2)),
        "warnings": ["page 2: low OCR confidence (12)"],
    }
    assert poor(fine, share=0.0) == []


def test_poor_extraction_pauses_after_a_fields_step_that_found_nothing_at_all() -> None:
    nothing = {"fields": {}, "found_in": {}, "evidence": []}
    assert poor(nothing, "extract_fields") == ["the step found no value at all"]
    found = {"fields": {"term_months": 12}, "found_in": {}, "evidence": [{"field": "x"}]}
    assert poor(found, "extract_fields") == []
    # A pipeline that does not opt in goes on all the same; one that does, on any step.
    quiet = Pipeline("p", 1, (_evidence_step(),))
    assert quiet.review_reasons("read", {"evidence": []}, sample_at=0.5) == []
    ruled = Pipeline("p", 1, (_evidence_step(),), review_if=("poor_extraction",))
    assert [r.kind for r in ruled.review_reasons("read", {"evidence": []}, sample_at=0.5)] == [
        "poor_extraction"
    ]


def test_the_pages_poor_extraction_counts_are_warnings_extraction_gives() -> None:
    assert set(POOR_PAGE_KINDS) <= set(WARNING_KINDS)
    with pytest.raises(ValueError, match="unknown page warning kind 'low_confidence'"):
        PageWarning("low_confidence", 1, 40.0, "page 1: low")
