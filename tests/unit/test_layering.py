"""The drawing of the house holds: import-linter's contracts (.importlinter) are kept, so an
upward import or a cycle between modules of a role fails the suite, not just `make lint`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_import_contracts_are_kept(repo_root: Path) -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
