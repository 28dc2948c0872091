"""The GitHub workflows are checked here, where they cannot run: jactionlint (actionlint's
checks) finds nothing in them, every `make` target and file they name exists, the kind job
runs the node image the deploying guide and the Makefile name, and every action is pinned
to a commit or an exact release."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jactionlint
import pytest
import yaml

from tests.chart.helm import KUBE_VERSION

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
KIND_WORKFLOW = REPO / ".github" / "workflows" / "kind.yml"
# The Makefile's WORKFLOW_LINT flags: no network, no shellcheck or pyflakes (they run only
# where installed, so the findings would depend on the machine).
LINT_FLAGS = ("--no-online", "--shellcheck=", "--pyflakes=")
PINNED = re.compile(r"[\w.-]+/[\w./-]+@(?:[0-9a-f]{40}|v\d+\.\d+\.\d+)")


def workflow_lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    binary = jactionlint.get_binary_path()
    argv = [binary, *LINT_FLAGS, *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def make_targets(script: str) -> list[str]:
    """The targets of every `make` command in a shell script (variables and options aside)."""
    targets = []
    for command in re.split(r"&&|\|\||[;|\n]", script):
        words = shlex.split(command)
        if words[:1] == ["make"]:
            targets += [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return targets


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    rules = re.findall(r"^([\w.-]+(?:[ \t]+[\w.-]+)*)[ \t]*:(?!=)", text, flags=re.MULTILINE)
    return {target for rule in rules for target in rule.split()}


def test_there_is_a_workflow_to_check() -> None:
    assert KIND_WORKFLOW in WORKFLOWS


def test_jactionlint_finds_nothing_in_the_workflows() -> None:
    result = workflow_lint(*WORKFLOWS)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_jactionlint_reports_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = KIND_WORKFLOW.read_text(encoding="utf-8")
    broken.write_text(text.replace("if: failure()", "if: ${{ failure() }} && true", 1))
    result = workflow_lint(broken)
    assert result.returncode == 1 and "is always evaluated to true" in result.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_make_target_a_workflow_calls_exists(path: Path) -> None:
    called = [t for step in steps(load(path)) for t in make_targets(step.get("run", ""))]
    assert called, "no make command found: the parser or the workflow changed"
    assert sorted(set(called) - makefile_targets()) == []


def test_make_targets_skip_options_and_variables() -> None:
    script = "cd x && make -j2 IMAGE_TAG=1 images kind-load; echo make"
    assert make_targets(script) == ["images", "kind-load"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_file_a_workflow_names_exists(path: Path) -> None:
    words = []
    for step in steps(load(path)):
        words += shlex.split(step.get("run", ""))
        words += [w for v in step.get("with", {}).values() for w in str(v).split()]
    files = [w for w in words if re.fullmatch(r"[\w./-]+\.(?:ya?ml|txt)", w)]
    assert files
    assert [f for f in files if not (REPO / f).is_file()] == []


def test_the_kind_node_image_is_the_one_the_docs_and_the_makefile_name() -> None:
    workflow = load(KIND_WORKFLOW)
    image, _, digest = workflow["env"]["KIND_NODE_IMAGE"].partition("@")
    assert digest == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.findall(r"^KIND_NODE_IMAGE \?= (\S+)$", makefile, flags=re.MULTILINE) == [image]
    guide = (REPO / "docs/guides/deploying.md").read_text(encoding="utf-8")
    assert set(re.findall(r"kindest/node:v[\d.]+", guide)) == {image}
    # The chart tests validate against the schemas of the Kubernetes the cluster runs.
    assert image.removeprefix("kindest/node:v").startswith(f"{KUBE_VERSION}.")
    (kind,) = [s for s in steps(workflow) if s.get("uses", "").startswith("helm/kind-action@")]
    assert kind["with"]["node_image"] == "${{ env.KIND_NODE_IMAGE }}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_or_an_exact_version(path: Path) -> None:
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", path.read_text(), flags=re.MULTILINE)
    assert uses
    unpinned = [ref for ref, _ in uses if not PINNED.fullmatch(ref)]
    assert unpinned == []
    # A commit says nothing to a reader (and jactionlint checks inputs by the comment).
    unnamed = [ref for ref, rest in uses if "@v" not in ref and not re.search(r"# v\d", rest)]
    assert unnamed == []


@pytest.mark.parametrize("ref", ["a/b@v4", "a/b@main", "a/b@v4.2", "a/b@1234567", "a/b"])
def test_a_moving_or_short_reference_is_not_pinned(ref: str) -> None:
    assert not PINNED.fullmatch(ref)
