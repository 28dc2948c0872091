"""The README is the operator's manual: it must name every setting and start with the two
set-up commands."""

from pathlib import Path

from docpipe.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "run"], ["make", "test"]]


def test_every_setting_is_documented() -> None:
    missing = [
        f"DOCPIPE_{name.upper()}"
        for name in Settings.model_fields
        if f"`DOCPIPE_{name.upper()}`" not in README
    ]
    assert missing == []


def test_the_time_limit_rule_is_stated() -> None:
    assert "llm_timeout_s < task_soft_time_limit_s < task_time_limit_s" in README
