"""The results table of `docpipe runs watch` and the demo: evidence counted per run."""

from typing import Any

from rich.console import Console

from docpipe.cli.runs import evidence_count, results_table


def status(pipeline: str, values: list[dict[str, Any]] | None) -> dict[str, Any]:
    step = {"input_tokens": 10, "output_tokens": 5, "attempt": 1}
    return {"pipeline": pipeline, "status": "needs_review" if values else "done",
            "steps": [step], "cost_so_far_usd": 0.001, "error": None, "result": None,
            "values": values}  # fmt: skip


def test_the_evidence_column_counts_supported_values_of_all_values() -> None:
    values = [{"supported": True}] * 9 + [{"supported": False}] * 2
    assert evidence_count(values) == "9/11"
    assert evidence_count(None) == "" and evidence_count([]) == ""
    console = Console(width=200, record=True)
    console.print(results_table([("contract", status("document_extract:v1", values)),
                                 ("nda", status("nda_review:v1", None))]))  # fmt: skip
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "evidence" in line)
    contract = next(line for line in lines if "contract" in line)
    column = header.index("evidence")
    assert contract[column : column + 8].strip() == "9/11"
    nda = next(line for line in lines if line.lstrip("│ ").startswith("nda"))
    assert nda[column : column + 8].strip() == ""
