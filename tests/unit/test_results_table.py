"""The results tables of `docpipe watch`, `docpipe results` and the demo: evidence counted
per run, and outputs of any shape shown as lines a person reads, never as cut-off JSON."""

from typing import Any

from rich.console import Console

from docpipe.cli.results import evidence_count, readable, results_table, run_results, values_table


def status(
    pipeline: str, values: list[dict[str, Any]] | None, result: dict[str, Any] | None = None
) -> dict[str, Any]:
    step = {"input_tokens": 10, "output_tokens": 5, "attempt": 1}
    return {
        "run_id": "r1",
        "document_id": "doc",
        "pipeline": pipeline,
        "status": "needs_review" if values else "done",
        "steps": [step],
        "cost_so_far_usd": 0.001,
        "error": None,
        "result": result,
        "values": values,
    }


def rendered(renderable: Any, width: int = 100) -> list[str]:
    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text().splitlines()


VERDICT = {
    "verdict": "negotiate",
    "summary": "The agreement binds the receiving party for ten years after disclosure, "
    "longer than usual, and names no exceptions for information that is already public.",
    "risk_flags": ["Term: ten years is long", "Exceptions: none for public information"],
    "clauses": [{"clause": "Confidentiality", "risk": "low", "reason": "standard wording"}],
}


def test_the_evidence_column_counts_supported_values_of_all_values() -> None:
    values = [{"supported": True}] * 9 + [{"supported": False}] * 2
    assert evidence_count(values) == "9/11"
    assert evidence_count(None) == "" and evidence_count([]) == ""
    corrected = {"supported": False, "support": "corrected", "corrected_by": "Ada"}
    assert evidence_count([*values, corrected]) == "9/12, 1 corrected", "a person stands behind it"
    lines = rendered(
        results_table(
            [
                ("contract", status("document_extract:v1", values)),
                ("nda", status("nda_review:v1", None)),
            ]
        ),
        width=200,
    )
    header = next(line for line in lines if "evidence" in line)
    contract = next(line for line in lines if "contract" in line)
    column = header.index("evidence")
    assert contract[column : column + 8].strip() == "9/11"
    nda = next(line for line in lines if line.lstrip("│ ").startswith("nda"))
    assert nda[column : column + 8].strip() == ""


def test_a_nested_output_reads_as_lines_lists_one_item_a_line() -> None:
    assert readable(VERDICT).splitlines() == [
        "verdict: negotiate",
        f"summary: {VERDICT['summary']}",
        "risk_flags:",
        "  • Term: ten years is long",
        "  • Exceptions: none for public information",
        "clauses:",
        "  • clause: Confidentiality",
        "    risk: low",
        "    reason: standard wording",
    ]
    assert readable([]) == "(none)" and readable(None) == "—" and readable(True) == "yes"


def test_the_results_table_shows_short_values_and_counts_lists_never_cut_json() -> None:
    run = status("nda_review:v1", None, {"verdict": VERDICT})
    text = "\n".join(rendered(results_table([("nda", run)]), width=160))
    assert "verdict: negotiate" in text and "risk_flags: 2" in text
    assert "{" not in text and "…" not in text  # no JSON, nothing cut off
    assert "ten years" not in text, "long text is left to docpipe results"


def test_a_runs_results_wrap_long_text_at_word_boundaries() -> None:
    run = status("nda_review:v1", None, {"verdict": VERDICT})
    lines = rendered(run_results(run), width=60)
    values = [line.split("│")[2].strip() for line in lines if line.count("│") == 3]
    summary = values[values.index("negotiate") + 1 : values.index("• Term: ten years is long")]
    assert len(summary) >= 3, "wrapped onto several lines"
    # Every word whole, in order: lines end at word boundaries.
    assert " ".join(summary) == VERDICT["summary"]
    assert "…" not in "\n".join(lines) and "[{" not in "\n".join(lines)


def test_values_and_their_quotes_fit_the_terminal_and_wrap_at_words() -> None:
    quote = (
        "Client may terminate this Agreement without cause on 45 days' written notice "
        "to Consultant."
    )
    values = [
        {
            "field": "termination_notice_days",
            "value": 45,
            "quote": quote,
            "page": 2,
            "section": "4",
            "section_title": "Term and Termination",
            "supported": True,
        },
        {
            "field": "liability_cap",
            "value": {"amount": 1000000, "currency": "USD"},
            "quote": "not in any clause",
            "page": None,
            "section": None,
            "supported": False,
        },
    ]
    for width in (90, 100, 160):
        lines = rendered(values_table(values, width), width=width)
        assert max(len(line) for line in lines) <= width
        cells = [line.split("│")[5].strip() for line in lines if line.count("│") == 6]
        text = " ".join(c for c in cells if c)
        assert quote in text, width  # whole words, in order, across its lines
        assert "not in the document: not in any clause" in text


def test_the_values_table_says_what_each_quote_does_for_its_value() -> None:
    """`docpipe results`: a quote found that does not hold its value says so, and a value a
    reviewer corrected names the reviewer instead of showing the model's quote."""
    base = {"page": 1, "section": "4", "section_title": "Term", "quote": "7."}
    values = [
        {**base, "field": "term_months", "value": 24, "supported": True, "support": "supported"},
        {**base, "field": "parties", "value": "Acme", "supported": False},
        {
            **base,
            "field": "governing_law",
            "value": "Delaware",
            "supported": False,
            "support": "corrected",
            "corrected": True,
            "corrected_by": "Ada Reviewer",
            "quote": "",
            "model_quote": "7.",
        },
    ]
    values[1]["support"] = "value_not_in_quote"
    text = "\n".join(rendered(values_table(values, width=140), width=140))
    assert "quote found, value not in it: 7." in text
    assert "corrected by Ada Reviewer" in text
    law = next(line for line in text.splitlines() if "governing_law" in line)
    assert "7." not in law  # the model's quote is not shown as its evidence


def test_the_results_table_keeps_names_whole_and_a_failures_reason_within_the_terminal() -> None:
    done = status("document_extract:v1", None, {"extract_fields": {"fields": {"a": 1}}})
    empty = {**status("document_extract:v1", None), "status": "failed"}
    empty["error"] = "the document is empty"
    nda = status("nda_review:v1", None, {"verdict": VERDICT})
    rows = [
        ("02-professional-services-granite-robotics-corp.txt", done),
        ("00-dummy-empty.txt", empty),
        ("nda-01-dunmore.txt", nda),
    ]
    for width in (160, 200):
        lines = rendered(results_table(rows), width=width)
        assert max(len(line) for line in lines) <= width
        assert lines[-1].endswith("┘"), f"cut on the right at {width} columns"
        text = "\n".join(lines)
        assert "02-professional-services-granite-robotics-corp.txt" in text, width
        note = [line.rsplit("│", 2)[1].strip() for line in lines if line.count("│") > 2]
        assert "the document is empty" in " ".join(filter(None, note)), width
