"""The ``docpipe`` command starts without what only some of its commands use: every run of
it (a shell completion, each of the CLI tests' subprocesses) pays its imports."""

from __future__ import annotations

import json
import subprocess
import sys

# Each costs tens of milliseconds or more at start-up (the settings through
# pydantic_settings, the pipelines through jsonschema, the readers of documents); a
# command that needs one imports it when it runs.
HEAVY = ("docpipe.settings", "docpipe.pipelines", "docpipe.extraction", "pydantic", "jsonschema")


def test_building_the_command_tree_imports_no_settings_pipelines_or_readers() -> None:
    script = (
        "import json, sys\n"
        "from docpipe.cli import build_parser\n"
        "build_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    heavy = [m for m in loaded if m.startswith(HEAVY)]
    assert heavy == []
