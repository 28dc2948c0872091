"""Evaluations with real workers, beat, PostgreSQL, Redis and the fake provider told to be
wrong on purpose: the accuracy measured is the one the provider was given, a worse prompt is
stopped by the gate, reviews become expected outputs, re-evaluating a change pays only for
the change, and the review rules are measured."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docpipe.state.db import Database
from docpipe_dev.processes import ManagedProcess
from docpipe_dev.samples import SampleContract, sample_contracts
from tests.support.evaluation_pipelines import WORSE_FIELDS
from tests.support.factories import scalar
from tests.support.fakellm import FakeLLM
from tests.support.processes import wait_until

CONTRACTS = sample_contracts(30)
MODULES = "tests.support.evaluation_pipelines"
# The scalar fields: each is one value the fake provider gets right or wrong as a whole.
SCALARS = (
    "contract_type",
    "effective_date",
    "term_months",
    "payment_terms_days",
    "termination_notice_days",
    "confidentiality_years",
    "governing_law",
    "auto_renewal",
)


@pytest.fixture
def stack(
    make_api_client: Callable[..., TestClient],
    start_worker: Callable[..., ManagedProcess],
    start_beat: Callable[..., ManagedProcess],
    fake_llm: FakeLLM,
) -> TestClient:
    """The API in-process, a batch worker and beat, all with the test's pipeline versions."""
    env = {"DOCPIPE_PIPELINE_MODULES": MODULES, "DOCPIPE_BATCH_ADMISSION_WINDOW": "8"}
    start_worker("batch", concurrency=4, **env)
    start_beat(**env)
    return make_api_client(pipeline_modules=MODULES, batch_admission_window=8)


def docpipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The docpipe command as a subprocess."""
    argv = [sys.executable, "-m", "docpipe.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def jsonl(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(i).encode() + b"\n" for i in items)


def generated_set(client: TestClient, name: str, contracts: list[SampleContract]) -> None:
    """A set of generated contracts, each with the fields the generator knows it states."""
    made = client.post(
        "/evaluation-sets",
        json={"name": name, "pipeline": "document_extract", "step": "extract_fields"},
    )
    assert made.status_code == 201, made.text
    items = [
        {"document": {"id": c.slug, "text": c.text}, "expected": {"fields": c.expected}}
        for c in contracts
    ]
    added = client.post(
        f"/evaluation-sets/{name}/items?source=samples",
        content=jsonl(items),
        headers={"Content-Type": "application/jsonl"},
    )
    assert added.status_code == 200, added.text
    assert (added.json()["version"], added.json()["items"]) == (1, len(contracts))


def evaluate(client: TestClient, set_name: str, pipeline: str, **options: Any) -> dict[str, Any]:
    started = client.post("/evaluations", json={"set": set_name, "pipeline": pipeline, **options})
    assert started.status_code == 202, started.text
    evaluation_id = started.json()["id"]

    def reported() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/evaluations/{evaluation_id}").json()
        return body if body["status"] == "reported" else None

    found: dict[str, Any] = wait_until(reported, timeout_s=180, every_s=0.5)
    return found


def scalar_recall(report: dict[str, Any]) -> tuple[float, int]:
    """The share of the scalar fields' stated values read right, and how many were stated."""
    fields = {f["path"]: f for f in report["fields"]}
    scored = [fields[f"fields.{name}"] for name in SCALARS]
    correct = sum(f["correct"] for f in scored)
    stated = sum(f["correct"] + f["wrong"] + f["missing"] for f in scored)
    return correct / stated, int(stated)


def test_a_model_wrong_one_time_in_five_measures_so_and_a_right_one_scores_one(
    stack: TestClient, fake_llm: FakeLLM, db: Database
) -> None:
    fake_llm.control("POST", "/control/mistakes", json={"error_rates": {"gpt-4o": 0.2}, "seed": 3})
    generated_set(stack, "contracts", CONTRACTS)
    right = evaluate(stack, "contracts", "document_extract:v1")["report"]
    assert right["documents"] == 30 and right["runs_by_status"] == {"done": 30}
    assert right["overall"]["accuracy"] == 1.0
    assert right["overall"]["f1"] == 1.0 and right["overall"]["evidence"] == 1.0
    assert right["review"]["paused"] == 0
    # Its cost, tokens and calls are the call log's (the only calls so far), its latencies
    # percentiles of them.
    with db.session() as s:
        logged = s.conn.execute(
            b"SELECT sum(cost_usd) AS cost, sum(input_tokens) AS input,"
            b" sum(output_tokens) AS output, count(*) AS calls,"
            b" percentile_disc(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50 FROM llm_call_log"
        ).fetchone()
    assert logged is not None and logged["cost"] > 0 and logged["output"] > 0
    assert Decimal(right["cost_usd"]) == logged["cost"]
    assert (right["input_tokens"], right["output_tokens"]) == (logged["input"], logged["output"])
    assert right["calls"] == logged["calls"] and right["calls_reused"] == 0
    latency = right["call_latency_ms"]
    assert latency["p50"] == logged["p50"] and latency["p50"] <= latency["p95"]
    assert 0 < right["run_seconds"]["p50"] <= right["run_seconds"]["p95"]

    wrong = evaluate(stack, "contracts", "document_extract:v1", models={"extract_fields": "gpt-4o"})
    report = wrong["report"]
    assert wrong["models"] == {"extract_fields": "gpt-4o"}
    recall, stated = scalar_recall(report)
    # 240 values each right with probability 0.8: 99 % of such runs fall within +-0.066.
    assert stated == 240
    assert 0.8 - 0.066 <= recall <= 0.8 + 0.066, recall
    assert 0.75 < report["overall"]["accuracy"] < 0.95
    print(  # the figures docs/guides/measuring-quality.md quotes
        "\nscalar recall",
        round(recall, 3),
        "overall",
        report["overall"],
        "\nfields",
        [(f["path"], f["accuracy"]) for f in report["fields"]],
    )
    assert report["overall"]["wrong"] > 0 and report["overall"]["missing"] > 0
    assert report["calls_reused"] > 0, "extract_sections' answers came from the first evaluation"
    page = stack.get(f"/evaluations/{wrong['id']}/documents?limit=100").json()["documents"]
    assert len(page) == 30
    diffs = [c for d in page for c in d["wrong"]]
    assert {c["outcome"] for c in diffs} <= {"wrong", "missing", "extra"}
    a_wrong = next(
        c
        for c in diffs
        if c["outcome"] == "wrong" and c["path"] in {f"fields.{n}" for n in SCALARS}
    )
    assert a_wrong["expected"] != a_wrong["got"] and a_wrong["evidence"], "with its quote"


def test_the_gate_stops_a_worse_prompt_and_passes_an_unchanged_one(
    stack: TestClient, fake_llm: FakeLLM, start_api: Callable[..., str]
) -> None:
    fake_llm.control("POST", "/control/mistakes", json={"error_rates": {WORSE_FIELDS: 0.3}})
    generated_set(stack, "gate", CONTRACTS[:20])
    baseline = evaluate(stack, "gate", "document_extract:v1")
    unchanged = evaluate(stack, "gate", "document_extract:v1")
    worse = evaluate(stack, "gate", "document_extract:v2")
    same = stack.get(
        "/evaluations/compare",
        params={"baseline": baseline["id"], "candidate": unchanged["id"], "max_drop": 0.02},
    ).json()
    assert same["gate"]["regression"] is False
    assert same["accuracy"]["difference"]["mean"] == 0.0
    assert same["flipped_to_wrong"] == [] and same["flipped_to_right"] == []
    assert float(same["cost_usd"]["candidate"]) == 0.0, "every answer of the rerun was reused"
    dropped = stack.get(
        "/evaluations/compare",
        params={"baseline": baseline["id"], "candidate": worse["id"], "max_drop": 0.02},
    ).json()
    difference = dropped["accuracy"]["difference"]
    assert dropped["gate"]["regression"] is True
    assert difference["high"] < 0 and difference["low"] <= difference["mean"] <= difference["high"]
    assert dropped["flipped_to_wrong"] and not dropped["flipped_to_right"]
    assert any(f["delta"] < 0 for f in dropped["fields"] if f["delta"] is not None)

    # The same from a team's CI: docpipe eval gate against the API, by exit code.
    api = start_api(DOCPIPE_PIPELINE_MODULES=MODULES)

    def gate(candidate: str) -> subprocess.CompletedProcess[str]:
        argv = ["eval", "gate", "--api", api, "--baseline", baseline["id"]]
        return docpipe(*argv, "--candidate", candidate, "--max-drop", "0.02")

    passed, failed = gate(unchanged["id"]), gate(worse["id"])
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "gate: passed" in passed.stdout
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "gate: FAILED: accuracy dropped by" in failed.stdout
    shown = docpipe("eval", "show", worse["id"], "--api", api)
    assert shown.returncode == 0 and "fields.term_months" in shown.stdout, shown.stderr


def test_one_flip_in_twenty_documents_is_not_a_regression(stack: TestClient) -> None:
    generated_set(stack, "flip", CONTRACTS[:20])
    baseline = evaluate(stack, "flip", "document_extract:v1")
    # The set's next version expects another term of one document: one value flips.
    one = CONTRACTS[0]
    changed = {"fields": {**one.expected, "term_months": one.expected["term_months"] + 1}}
    stack.post(
        "/evaluation-sets/flip/items",
        content=jsonl([{"document": one.slug, "expected": changed}]),
        headers={"Content-Type": "application/jsonl"},
    ).raise_for_status()
    flipped = evaluate(stack, "flip", "document_extract:v1")
    assert flipped["set_version"] == 2
    compared = stack.get(
        "/evaluations/compare",
        params={"baseline": baseline["id"], "candidate": flipped["id"], "max_drop": 0.0},
    ).json()
    assert compared["flipped_to_wrong"] == [
        {"document_id": one.slug, "pointer": "/fields/term_months"}
    ]
    assert compared["accuracy"]["difference"]["mean"] < 0
    assert compared["gate"]["regression"] is False, "one flip among twenty is noise"
    # Every answer of the second was reused: it cost nothing, and the delta says so.
    cost = compared["cost_usd"]
    assert float(cost["baseline"]) > 0 and float(cost["candidate"]) == 0
    assert Decimal(cost["delta"]) == -Decimal(cost["baseline"])
    # The other way round, the value flipped from wrong to right.
    reversed_ = stack.get(
        "/evaluations/compare", params={"baseline": flipped["id"], "candidate": baseline["id"]}
    ).json()
    assert reversed_["flipped_to_right"] == compared["flipped_to_wrong"]
    assert reversed_["flipped_to_wrong"] == [] and reversed_["gate"] is None, "no max_drop"
    term = next(f for f in reversed_["fields"] if f["path"] == "fields.term_months")
    assert term["delta"] == pytest.approx(0.05) and term["baseline"] == pytest.approx(0.95)


def test_re_evaluating_a_change_to_summarize_sends_only_summarize_calls(
    stack: TestClient, fake_llm: FakeLLM, db: Database
) -> None:
    generated_set(stack, "twenty", CONTRACTS[:20])
    first = evaluate(stack, "twenty", "document_extract:v1")
    assert first["report"]["calls_reused"] == 0
    fake_llm.reset()  # zeroes its counters
    changed = evaluate(stack, "twenty", "document_extract:v3")
    sent = fake_llm.stats()["by_step"]
    assert sent == {"summarize": 20}, sent
    report = changed["report"]
    assert report["calls"] == 20 and report["calls_reused"] == first["report"]["calls"] - 20
    reused = scalar(
        db,
        "SELECT count(*) FROM reused_answer u JOIN llm_call_log c ON c.id = u.call_id"
        " JOIN llm_call_log p ON p.id = u.reused_from"
        " WHERE c.cost_usd = 0 AND c.status = 'ok' AND p.status = 'ok'"
        " AND p.step = c.step AND c.step <> 'summarize'",
    )
    assert reused == report["calls_reused"], "every reuse names the call it came from"

    # A document's run shows which of its calls were reused: all but summarize's, paid.
    def runs(evaluation: dict[str, Any]) -> set[str]:
        url = f"/evaluations/{evaluation['id']}/documents?limit=100"
        return {d["run_id"] for d in stack.get(url).json()["documents"]}

    run = stack.get(f"/runs/{min(runs(changed))}").json()
    shown = {step["step"]: step["reused_calls"] for step in run["steps"]}
    calls = scalar(
        db,
        "SELECT jsonb_object_agg(step, n) FROM"
        " (SELECT step, count(*) AS n FROM llm_call_log WHERE run_id = %s GROUP BY step) c",
        run["run_id"],
    )
    assert calls["summarize"] > 0 and calls["extract_sections"] > 0, calls
    assert {step: len(reused) for step, reused in shown.items()} == {
        step: 0 if step == "summarize" else calls.get(step, 0) for step in shown
    }, shown
    sources = {c["reused_from_run"] for reused in shown.values() for c in reused}
    assert len(sources) == 1 and sources <= runs(first), "the same document's first run"


def test_reviews_promoted_become_the_expected_outputs(
    stack: TestClient, fake_llm: FakeLLM, start_api: Callable[..., str]
) -> None:
    fake_llm.add_fault("invented_quote", count=200, step="extract_fields")
    documents = [{"id": c.slug, "text": c.text} for c in CONTRACTS[:2]]
    batch = stack.post("/batches", json={"documents": documents}).json()["batch_id"]

    def paused() -> list[str] | None:
        runs = stack.get(f"/batches/{batch}/runs").json()["runs"]
        waiting = [r["run_id"] for r in runs if r["status"] == "needs_review"]
        return waiting if len(waiting) == 2 else None

    first, second = wait_until(paused, timeout_s=120)
    fake_llm.control("DELETE", "/control/faults")
    corrected = {"path": "/fields/term_months", "action": "correct", "value": 99}
    for run_id, edits in ((first, [corrected]), (second, [])):
        revision = stack.get(f"/reviews/{run_id}").json()["review"]["revision"]
        decided = stack.post(
            f"/runs/{run_id}/review",
            json={"revision": revision, "action": "approve", "edits": edits},
        )
        assert decided.status_code == 200, decided.text
    stack.post(
        "/evaluation-sets",
        json={"name": "reviewed", "pipeline": "document_extract", "step": "extract_fields"},
    ).raise_for_status()
    # One run first (the set's version 1), then every reviewed run of the batch (version 2).
    one = stack.post("/evaluation-sets/reviewed/promote", json={"run_id": second})
    assert one.status_code == 200, one.text
    assert (one.json()["version"], one.json()["items"]) == (1, 1)
    # The batch's from the command line (docpipe eval set promote NAME --batch BATCH_ID).
    api = start_api(DOCPIPE_PIPELINE_MODULES=MODULES)
    promoted = docpipe("eval", "set", "promote", "reviewed", "--batch", batch, "--api", api)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "version 2, 2 items" in promoted.stdout
    earlier = stack.get("/evaluation-sets/reviewed/items?version=1").json()
    assert earlier["version"] == 1 and [i["run_id"] for i in earlier["items"]] == [second]
    items = stack.get("/evaluation-sets/reviewed/items").json()["items"]
    assert {i["source"] for i in items} == {"review"}
    assert {i["decided_by"] for i in items} == {"anonymous"}
    by_run = {i["run_id"]: i for i in items}
    assert by_run[first]["expected"]["fields"]["term_months"] == 99

    report = evaluate(stack, "reviewed", "document_extract:v1")["report"]
    fields = {f["path"]: f for f in report["fields"]}
    assert fields["fields.term_months"]["wrong"] == 1, "the reviewer's correction is expected"
    assert report["overall"]["wrong"] == 1 and report["overall"]["missing"] == 0


def test_each_review_rule_is_measured_on_a_set_whose_answer_is_known(
    stack: TestClient, fake_llm: FakeLLM
) -> None:
    # Values made wrong keep their real quote (the rule cannot see them); values invented
    # come with a quote in no document (the rule sees every one, and each is wrong: every
    # generated contract states every field, so an invented one displaces the real one).
    fake_llm.control(
        "POST",
        "/control/mistakes",
        json={"error_rates": {"gpt-4o": 0.15}, "extra_rate": 0.004, "seed": 11},
    )
    generated_set(stack, "rules", CONTRACTS[:24])
    evaluation = evaluate(stack, "rules", "document_extract:v1", models={"*": "gpt-4o"})
    report = evaluation["report"]
    assert report["runs_by_status"] == {"done": 24}, "an evaluation's runs never pause"
    rules = {r["rule"]: r for r in report["review"]["rules"]}
    assert set(rules) == {"unsupported_evidence", "poor_extraction"}
    page = stack.get(f"/evaluations/{evaluation['id']}/documents?limit=100").json()["documents"]
    unsupported = [d for d in page if "unsupported_evidence" in d["paused_by"]]
    let_through = [d for d in page if "unsupported_evidence" not in d["paused_by"]]
    assert unsupported and let_through
    assert rules["unsupported_evidence"]["paused"] == len(unsupported)
    assert rules["unsupported_evidence"]["precision"] == 1.0
    assert all(d["wrong"] for d in unsupported)
    missed = sum(c["weight"] for d in let_through for c in d["wrong"])
    assert missed > 0 and rules["unsupported_evidence"]["missed_wrong_values"] == missed
    assert rules["poor_extraction"]["paused"] == 0 and rules["poor_extraction"]["precision"] is None
    assert report["review"]["paused_share"] == pytest.approx(len(unsupported) / 24, abs=1e-6)


def test_the_cli_evaluates_generated_contracts_and_compares_two_versions(
    stack: TestClient, fake_llm: FakeLLM, start_api: Callable[..., str], tmp_path: Path
) -> None:
    """The tutorial of docs/guides/measuring-quality.md, as a user types it (its output is
    what this prints): the sample generator writes contracts and their truth, docpipe eval
    makes a set of them, evaluates the pipeline (a progress bar, then a results table), then
    again with a model the fake provider gets wrong one time in five, and compares the two."""
    fake_llm.control("POST", "/control/mistakes", json={"error_rates": {"gpt-4o": 0.2}, "seed": 3})
    api = start_api(DOCPIPE_PIPELINE_MODULES=MODULES)
    written = docpipe(
        "samples",
        str(tmp_path / "contracts"),
        "--count",
        "6",
        "--expected",
        str(tmp_path / "set.jsonl"),
    )
    assert written.returncode == 0, written.stderr
    lines = (tmp_path / "set.jsonl").read_text().splitlines()
    assert [json.loads(line)["expected"] for line in lines] == [
        {"fields": c.expected} for c in sample_contracts(6)
    ]
    made = docpipe("eval", "set", "create", "tutorial", "--api", api)
    assert made.returncode == 0, made.stderr
    uploaded = docpipe(
        "eval",
        "set",
        "upload",
        "tutorial",
        str(tmp_path / "set.jsonl"),
        "--source",
        "samples",
        "--api",
        api,
    )
    assert uploaded.returncode == 0, uploaded.stderr
    assert "set tutorial (document_extract step extract_fields): version 1, 6 items" in (
        uploaded.stdout
    )

    def run(*options: str) -> tuple[str, str]:
        argv = ["eval", "run", "tutorial", "--pipeline", "document_extract:v1", *options]
        ran = docpipe(*argv, "--api", api)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        evaluation_id = ran.stdout.split()[1]
        assert stack.get(f"/evaluations/{evaluation_id}").json()["status"] == "reported"
        return evaluation_id, ran.stdout

    baseline, shown = run()
    assert "document_extract:v1 on tutorial v1" in shown
    # Not a terminal: the table comes as tab-separated lines.
    overall = next(line for line in shown.splitlines() if line.startswith("overall\t"))
    assert overall.split("\t")[1] == "1.000", overall  # accuracy
    bar = next(line for line in shown.splitlines() if line.startswith("steps"))
    assert "24/24" in bar, bar  # its 6 runs' 4 steps, all ended
    assert "6 documents, " in shown and " paid (0 reused)" in shown
    candidate, shown = run("--step-model", "extract_fields=gpt-4o")
    compared = docpipe("eval", "compare", baseline, candidate, "--api", api)
    assert compared.returncode == 0, compared.stderr
    term = next(
        line for line in compared.stdout.splitlines() if line.startswith("fields.term_months\t")
    )
    assert term.split("\t")[1] == "1.000", term  # the baseline's accuracy
    report = stack.get(f"/evaluations/{candidate}").json()["report"]
    assert f"accuracy 1.000 -> {report['overall']['accuracy']:.3f}" in compared.stdout
    print("\n", made.stdout, uploaded.stdout, shown, compared.stdout, sep="\n")
