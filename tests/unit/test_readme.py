"""The README starts with the two set-up commands and stays an introduction; the manual is
the docs site (tests/docs: every setting, metric, alert, chart value and CLI option is
documented there)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "run"], ["make", "test"]]


def test_the_time_limit_rule_is_stated_in_the_settings_reference() -> None:
    settings_page = (ROOT / "docs/reference/settings.md").read_text(encoding="utf-8")
    assert "llm_timeout_s < task_soft_time_limit_s < task_time_limit_s" in settings_page


def test_the_readme_names_every_package_make_run_may_install() -> None:
    script = (ROOT / "scripts/ensure-system-deps").read_text(encoding="utf-8")
    packages = {p for group in re.findall(r"missing\+=\(([^)]*)\)", script) for p in group.split()}
    assert {"postgresql", "redis-server", "chromium", "zsh"} <= packages
    setup = README.split("## ", 1)[0]
    assert not [p for p in packages if f"`{p}`" not in setup]
    assert "as root or with sudo" in setup and "Debian 12 or Ubuntu" in setup
