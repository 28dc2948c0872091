"""The alert rules pass `promtool check rules`, and `promtool test rules` shows every alert
firing on the situation it names (and quiet on its look-alike)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/docpipe/rules/docpipe-alerts.yaml"
UNIT_TESTS = Path(__file__).parent / "promtool/docpipe-alerts.test.yaml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: `make deps` installs Debian's prometheus package")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


def alert_names(rules_file: Path) -> set[str]:
    groups: list[dict[str, Any]] = yaml.safe_load(rules_file.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_the_rules_file_passes_promtool_check() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names(RULES))} rules found" in result.stdout


def test_every_alert_fires_in_a_promtool_unit_test() -> None:
    result = promtool("test", "rules", str(UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    quiet = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if not check.get("exp_alerts")
    }
    assert alert_names(RULES) - fired == set(), "alerts without a test that makes them fire"
    assert alert_names(RULES) - quiet == set(), "alerts without a test that keeps them quiet"


def test_the_alerts_the_issue_asks_for_exist() -> None:
    assert {
        "DocpipeQueueLagGrowing",
        "DocpipeNoWorkersForQueue",
        "DocpipeBeatSilent",
        "DocpipeRunFailureSpike",
        "DocpipeProvider429Spike",
        "DocpipeOutboxStuck",
        "DocpipeRunsNeedReview",
        "DocpipeReviewWaitTooLong",
    } <= alert_names(RULES)
