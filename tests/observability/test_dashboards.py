"""The dashboards in the chart are exactly what docpipe_dev.dashboards generates (run `make
dashboards` after changing it), and each is well-formed for Grafana."""

from __future__ import annotations

import json
import re
from pathlib import Path

from docpipe.observability import metrics as m
from docpipe_dev import dashboards

CHART_DASHBOARDS = Path(__file__).resolve().parents[2] / "charts/docpipe/dashboards"
METRIC_NAMES = {v for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}


def test_the_committed_dashboards_are_the_generated_ones() -> None:
    committed = {p.name for p in CHART_DASHBOARDS.glob("*.json")}
    assert committed == set(dashboards.DASHBOARDS), "run `make dashboards`"
    for name in dashboards.DASHBOARDS:
        on_disk = (CHART_DASHBOARDS / name).read_text(encoding="utf-8")
        assert on_disk == dashboards.render(name), f"{name} is stale: run `make dashboards`"


def test_the_four_dashboards_the_users_watch_exist() -> None:
    titles = {model["title"] for model in dashboards.build().values()}
    assert titles == {
        "docpipe / Queue lag",
        "docpipe / Provider",
        "docpipe / Cost",
        "docpipe / Health",
    }


def test_every_panel_has_an_id_and_every_query_a_ref_id_and_a_known_metric() -> None:
    for name, model in dashboards.build().items():
        uids = {model["uid"]}
        assert len(uids) == 1
        panel_ids = [p["id"] for p in model["panels"]]
        assert len(set(panel_ids)) == len(panel_ids), name
        for panel in model["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert ref_ids and all(ref_ids) and len(set(ref_ids)) == len(ref_ids), panel
            for target in panel["targets"]:
                used = set(re.findall(r"\b(?:celery|docpipe)_[a-z_]+", target["expr"]))
                used = {re.sub(r"_(bucket|count|sum)$", "", u) for u in used}
                assert used and used <= METRIC_NAMES, (panel["title"], used - METRIC_NAMES)


def test_the_dashboards_are_valid_json_for_the_configmaps() -> None:
    for path in CHART_DASHBOARDS.glob("*.json"):
        assert json.loads(path.read_text())["schemaVersion"] >= 39
