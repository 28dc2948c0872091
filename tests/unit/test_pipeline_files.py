"""Pipeline files: what loads, and every kind of broken file refused with file:line and what
is wrong (nothing of a refused file is registered)."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from docpipe.errors import InvalidOutputError
from docpipe.pipelines import PipelineError
from docpipe.pipelines.catalog import load_catalog
from docpipe.pipelines.files import file_schema, load_pipeline_file
from docpipe.settings import Settings

GOOD = dedent(
    """\
    name: invoice_check
    version: 2
    defaults: {model: gpt-4o-mini, fallback_model: gpt-4o}
    steps:
      - name: lines
        kind: ask
        instructions: List the line items.
        prompt: "Invoice:\\n{{ document }}"
        output_schema:
          type: object
          required: [items]
          properties:
            items:
              type: array
              maxItems: 3
              items:
                type: object
                properties: {text: {type: string}, amount: {type: number}}
      - name: checks
        kind: map
        over: outputs.lines.items
        concurrency: 2
        max_items: 3
        prompt: "{{ index }}: {{ item.text }} costs {{ item.amount }}"
        output_schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}
      - name: total
        kind: reduce
        budget_usd: 0.5
        prompt: "{{ outputs.checks.items }}"
        output_schema: {type: object, required: [total], properties: {total: {type: number}}}
    """
)


def load(text: str) -> object:
    return load_pipeline_file(dedent(text), "pipelines/invoice.yaml")


def test_a_good_file_becomes_a_pipeline_with_its_steps_and_defaults() -> None:
    pipeline = load_pipeline_file(GOOD, "pipelines/invoice.yaml")
    assert pipeline.key == "invoice_check:v2"
    assert pipeline.step_names == ["lines", "checks", "total"]
    lines, checks, total = pipeline.steps
    assert lines.models == ("gpt-4o-mini", "gpt-4o")
    assert lines.prompt_version == "lines@v2"
    assert total.budget_usd is not None and str(total.budget_usd) == "0.5"
    # A map step's output is its answers, gathered in order.
    assert checks.output_schema["properties"]["items"]["items"]["required"] == ["ok"]
    assert pipeline.source == "pipelines/invoice.yaml"


def test_the_published_schema_describes_the_file_format() -> None:
    schema = file_schema()
    assert schema["required"] == ["name", "version", "steps"]
    assert set(schema["$defs"]["step"]["properties"]["kind"]["enum"]) == {"ask", "map", "reduce"}


class FakeInput:
    """A StepInput that answers from a table, to run a file's steps without a worker."""

    def __init__(self, document: str, outputs: dict[str, object]) -> None:
        self.document = document
        self.outputs = outputs
        self.asked: list[tuple[str, str]] = []
        self.concurrency: int | None = None

    def ask(self, call_key: str, user: str, schema: object) -> dict[str, object]:
        self.asked.append((call_key, user))
        return {"answer": call_key}

    def ask_all(self, requests: list[tuple[str, str, object]], *, concurrency: int | None = None):  # type: ignore[no-untyped-def]
        self.concurrency = concurrency
        return [self.ask(key, user, schema) for key, user, schema in requests]


def test_steps_render_their_prompts_and_map_asks_once_per_item_in_order() -> None:
    pipeline = load_pipeline_file(GOOD, "pipelines/invoice.yaml")
    lines, checks, total = pipeline.steps
    first = FakeInput("INV-1 total 30", {})
    assert lines.execute(first) == {"answer": "prompt"}
    assert first.asked == [("prompt", "Invoice:\nINV-1 total 30")]
    items = [{"text": "desk", "amount": 20}, {"text": "lamp", "amount": 10.5}]
    fan = FakeInput("doc", {"lines": {"items": items}})
    assert checks.execute(fan) == {"items": [{"answer": "item:0"}, {"answer": "item:1"}]}
    assert fan.asked == [("item:0", "0: desk costs 20"), ("item:1", "1: lamp costs 10.5")]
    assert fan.concurrency == 2
    reduce = FakeInput("doc", {"checks": {"items": [{"ok": True}]}})
    total.execute(reduce)
    assert reduce.asked == [("prompt", '[{"ok":true}]')]


def test_a_map_over_more_items_than_its_bound_fails_into_review_before_any_call() -> None:
    checks = load_pipeline_file(GOOD, "pipelines/invoice.yaml").steps[1]
    many = FakeInput("doc", {"lines": {"items": [{"text": "x", "amount": 1}] * 4}})
    with pytest.raises(InvalidOutputError, match="lists 4 items; this step's max_items is 3"):
        checks.execute(many)
    assert many.asked == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nversion: 1\nsteps: [\n", r"invoice\.yaml:4: not valid YAML"),
        ("", r"invoice\.yaml:1: the file is empty"),
        (
            "name: x\nversion: 1\nname: y\nsteps: []\n",
            r"invoice\.yaml:3: duplicate key 'name' \(first on line 1\)",
        ),
        (
            "name: x\nversion: 1\ncolour: blue\nsteps: []\n",
            r"invoice\.yaml:1: the file: Additional properties are not allowed \('colour'",
        ),
        (
            "name: Bad-Name\nversion: 1\n"
            "steps: [{name: a, kind: ask, prompt: x, output_schema: {}}]\n",
            r"invoice\.yaml:1: name: 'Bad-Name' does not match",
        ),
        (
            """\
            name: x
            version: 1
            steps:
              - name: a
                kind: ask
                model: gpt-4o-mini
                prompt: "{{ document }}"
                output_schema: {type: object, properties: {n: {type: integr}}}
            """,
            r"invoice\.yaml:8: step 'a': step 'a': output_schema: not a valid JSON Schema",
        ),
        (
            """\
            name: x
            version: 1
            steps:
              - name: a
                kind: ask
                model: gpt-4o-mini
                prompt: "{{ documnet }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:7: step 'a': documnet: unknown variable 'documnet'",
        ),
        (
            """\
            name: x
            version: 1
            defaults: {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object, properties: {items: {type: array}}}
              - name: b
                kind: map
                over: outputs.z.items
                prompt: "{{ item }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:11: step 'b': outputs\.z\.items: no property 'z' \(declared: a\)",
        ),
        (
            """\
            name: x
            version: 1
            defaults: {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object, properties: {items: {type: array}}}
              - name: b
                kind: map
                over: outputs.a.items
                prompt: "{{ item }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:11: step 'b': outputs\.a\.items has no maxItems in its schema",
        ),
        (
            """\
            name: x
            version: 1
            defaults: {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object, properties: {items: {type: array, maxItems: 500}}}
              - name: b
                kind: map
                over: outputs.a.items
                prompt: "{{ item }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:11: step 'b': outputs\.a\.items may hold 500 items \(maxItems\), "
            r"more than this step maps \(max_items 100\)",
        ),
        (
            """\
            name: x
            version: 1
            defaults: {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object, properties: {n: {type: number}}}
              - name: b
                kind: reduce
                prompt: "{{ outputs.a.count }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:11: step 'b': outputs\.a\.count: no property 'count' \(declared: n\)",
        ),
        (
            """\
            name: x
            version: 1
            steps:
              - name: a
                kind: map
                over: outputs.a.items
                model: gpt-4o-mini
                prompt: "{{ item }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:4: step 'a': a map step reads earlier outputs: it cannot come first",
        ),
        (
            """\
            name: x
            version: 1
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:4: step 'a': no model: set model, or defaults.model",
        ),
        (
            """\
            name: x
            version: 1
            defaults: {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: {type: object}
              - name: a
                kind: reduce
                prompt: "{{ outputs.a }}"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:1: pipeline x:v1: two steps are named 'a'",
        ),
        (
            """\
            name: x
            version: 1
            defaults: &d {model: gpt-4o-mini}
            steps:
              - name: a
                kind: ask
                prompt: "{{ document }}"
                output_schema: *d
            """,
            r"invoice\.yaml:3: YAML anchors and aliases are not allowed",
        ),
        (
            """\
            name: x
            version: 1
            steps:
              - name: a
                kind: ask
                model: gpt-4o-mini
                prompt: "{{ document }"
                output_schema: {type: object}
            """,
            r"invoice\.yaml:4: step 'a': a '\{\{' or '\}\}' without its other half",
        ),
        (
            """\
            name: x
            version: 1
            review_if: [unsupported_quotes]
            steps:
              - {name: a, kind: ask, model: m, prompt: x, output_schema: {type: object}}
            """,
            r"invoice\.yaml:3: review_if/0: 'unsupported_quotes' is not one of",
        ),
        (
            """\
            name: x
            version: 1
            review_if: [unsupported_evidence]
            steps:
              - {name: a, kind: ask, model: m, prompt: x, output_schema: {type: object}}
            """,
            r"invoice\.yaml:1: pipeline x:v1: review_if unsupported_evidence needs a step that "
            r"records evidence",
        ),
    ],
    ids=[
        "malformed-yaml",
        "empty",
        "duplicate-key",
        "unknown-key",
        "bad-name",
        "invalid-output-schema",
        "unknown-variable",
        "unknown-step-reference",
        "unbounded-fan-out",
        "fan-out-beyond-max-items",
        "undeclared-field",
        "map-first",
        "no-model",
        "duplicate-step",
        "yaml-anchor",
        "broken-placeholder",
        "unknown-review-rule",
        "review-rule-without-evidence",
    ],
)
def test_a_broken_file_is_refused_with_its_file_line_and_what_is_wrong(
    text: str, message: str
) -> None:
    with pytest.raises(PipelineError, match=message):
        load(text)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(dedent(text), encoding="utf-8")
    return path


def test_a_folder_of_files_joins_the_built_in_pipelines(tmp_path: Path) -> None:
    write(tmp_path / "p", "invoice.yaml", GOOD)
    catalog = load_catalog(Settings(pipelines_dir=tmp_path / "p"))
    assert {p.key for p in catalog} == {"document_extract:v1", "nda_review:v1", "invoice_check:v2"}


def test_a_key_defined_twice_is_refused_naming_both_files(tmp_path: Path) -> None:
    write(tmp_path / "p", "a.yaml", GOOD)
    write(tmp_path / "p", "b.yaml", GOOD)
    with pytest.raises(
        PipelineError, match=r"invoice_check:v2 is defined twice: by .*a\.yaml and by .*b\.yaml"
    ):
        load_catalog(Settings(pipelines_dir=tmp_path / "p"))


def test_a_built_in_key_cannot_be_taken_over_by_a_file(tmp_path: Path) -> None:
    write(
        tmp_path / "p",
        "nda.yaml",
        GOOD.replace("invoice_check", "nda_review").replace("version: 2", "version: 1"),
    )
    with pytest.raises(
        PipelineError, match=r"nda_review:v1 is defined twice: by builtin/nda_review\.yaml"
    ):
        load_catalog(Settings(pipelines_dir=tmp_path / "p"))


def test_a_model_without_a_price_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path / "p",
        "invoice.yaml",
        GOOD.replace("fallback_model: gpt-4o}", "fallback_model: gpt-9}"),
    )
    with pytest.raises(
        PipelineError,
        match=r"step 'lines' of invoice_check:v2 asks model 'gpt-9', which is on no provider",
    ):
        load_catalog(Settings(pipelines_dir=tmp_path / "p"))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="is not a directory"):
        load_catalog(Settings(pipelines_dir=tmp_path / "nowhere"))


def test_the_definition_hash_changes_with_the_definition_only() -> None:
    one = load_pipeline_file(GOOD, "a.yaml")
    same = load_pipeline_file(GOOD, "elsewhere/b.yaml")
    changed = load_pipeline_file(GOOD.replace("List the line items.", "List items."), "a.yaml")
    assert one.definition_hash == same.definition_hash
    assert one.definition_hash != changed.definition_hash


def test_a_file_may_send_runs_with_unsupported_evidence_to_review() -> None:
    text = GOOD.replace("steps:\n", "review_if: [unsupported_evidence]\nsteps:\n", 1).replace(
        "properties: {total: {type: number}}",
        "properties: {total: {type: number}, evidence: {type: array}}",
    )
    pipeline = load_pipeline_file(text, "a.yaml")
    assert pipeline.review_if == ("unsupported_evidence",)
    assert pipeline.definition_hash != load_pipeline_file(GOOD, "a.yaml").definition_hash
