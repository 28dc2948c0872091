"""ct.yaml, the chart-testing configuration the kind workflow runs, checked offline: it tests
the docpipe chart, its CI values are values-kind.yaml itself (a link, so they cannot drift from
what the k8s-tests install), and what it sets on top renders a chart `helm install --wait`
can finish: no post-install hook that the pods wait for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.chart.helm import CHART_DIR, of_kind, render, values_file

REPO = Path(__file__).resolve().parents[2]
CT = yaml.safe_load((REPO / "ct.yaml").read_text(encoding="utf-8"))


def set_values(args: str) -> dict[str, Any]:
    """The values of Helm's `--set=a.b=c` arguments (booleans and strings, as ct.yaml uses)."""
    values: dict[str, Any] = {}
    for arg in args.split():
        match = re.fullmatch(r"--set=([\w.]+)=(\S+)", arg)
        assert match, f"not a --set argument this test understands: {arg}"
        path, raw = match.groups()
        *parents, leaf = path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = {"true": True, "false": False}.get(raw, raw)
    return values


def test_ct_tests_the_docpipe_chart() -> None:
    assert CT["charts"] == ["charts/docpipe"]
    assert all((REPO / chart).parent.name in CT["chart-dirs"] for chart in CT["charts"])
    assert (REPO / CT["charts"][0]) == CHART_DIR


def test_the_ci_values_are_values_kind_itself() -> None:
    ci_values = sorted((CHART_DIR / "ci").glob("*-values.yaml"))
    assert ci_values
    for path in ci_values:
        assert path.is_symlink(), f"{path.name}: a copy would drift from values-kind.yaml"
        assert path.resolve() == CHART_DIR / "values-kind.yaml"


def test_ct_installs_a_chart_whose_pods_wait_for_no_hook() -> None:
    values = values_file("values-kind.yaml") | set_values(CT["helm-extra-set-args"])
    (migrations,) = of_kind(render(values), "Job")
    assert "helm.sh/hook" not in migrations["metadata"].get("annotations", {})


def test_set_values_nests_keys_and_reads_booleans() -> None:
    assert set_values("--set=a.b=false --set=a.c=x") == {"a": {"b": False, "c": "x"}}
