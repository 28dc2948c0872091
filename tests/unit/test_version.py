"""docpipe has one version, libs/common/pyproject.toml's, and everything that names a version
names it: the other packages, `docpipe --version`, the chart's appVersion, the images' OCI
label (as scripts/build-images passes it), and the changelog's newest release."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import docpipe

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "libs/common/pyproject.toml").read_text())["project"]["version"]
PACKAGES = ("libs/dev", "services/api", "services/fake-llm")


def test_the_library_reports_the_version_of_its_pyproject_and_so_do_the_packages() -> None:
    assert docpipe.__version__ == VERSION
    for package in PACKAGES:
        project = tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]
        assert project["version"] == VERSION, package


def test_docpipe_version_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "docpipe.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == f"docpipe {VERSION}\n"


def test_the_openapi_document_states_it() -> None:
    from docpipe_api.main import create_app

    assert create_app().openapi()["info"]["version"] == VERSION


def test_the_charts_app_version_is_it() -> None:
    chart = yaml.safe_load((ROOT / "charts/docpipe/Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION, "set appVersion in charts/docpipe/Chart.yaml"


def test_every_image_is_labelled_with_it(tmp_path: Path) -> None:
    """build-images with a stand-in engine that records its arguments: every target gets
    the version as a build argument, and the Dockerfile's runtime stage, which every image
    starts from, turns it into the OCI label."""
    calls = tmp_path / "calls"
    engine = tmp_path / "engine"
    engine.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = image ] && echo 1000000\nexit 0\n'
    )
    engine.chmod(0o755)
    env = {**os.environ, "CONTAINER_ENGINE": str(engine), "CA_BUNDLE": ""}
    subprocess.run(
        [str(ROOT / "scripts/build-images")], env=env, check=True, capture_output=True, timeout=60
    )
    builds = [line for line in calls.read_text().splitlines() if line.startswith("build ")]
    assert len(builds) == 5
    assert all(f"--build-arg VERSION={VERSION}" in line for line in builds)

    dockerfile = (ROOT / "Dockerfile").read_text()
    runtime = dockerfile.split("AS runtime\n", 1)[1].split("\nFROM ", 1)[0]
    assert 'LABEL org.opencontainers.image.version="${VERSION}"' in runtime
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", dockerfile, re.MULTILINE)
    parents = {stage: base for base, stage in stages}
    for target in ("api", "worker-interactive", "worker-batch", "beat", "fake-llm"):
        stage = target
        while stage in parents and stage != "runtime":
            stage = parents[stage]
        assert stage == "runtime", f"{target} does not start from the runtime stage"


def test_the_changelog_has_an_unreleased_section_and_the_version_as_newest_release() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert headings[1] == VERSION, "add a section for the version to CHANGELOG.md"
