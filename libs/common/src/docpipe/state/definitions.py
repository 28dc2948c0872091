"""Definitions that cannot drift: a run keeps the pipeline definition it started with, so a
process that loaded another definition under the same ``name:vN``, or none, while runs of
that key are still going, is refused (the API at start-up, ``docpipe migrate`` before a
deploy) with a message naming the runs. A worker that meets such a run anyway (two deploys
side by side) sends it to review instead of running it (docpipe.worker.executor).
"""

from __future__ import annotations

from dataclasses import dataclass

from docpipe.pipelines.catalog import Catalog
from docpipe.pipelines.model import PipelineError
from docpipe.state.db import Database

__all__ = ["check_running_definitions"]


@dataclass(frozen=True)
class _InUse:
    pipeline: str
    pipeline_hash: str | None
    runs: int
    examples: list[str]


def check_running_definitions(db: Database, pipelines: Catalog) -> None:
    """PipelineError unless every pipeline that active runs use is loaded as they started it."""
    problems = []
    for used in db.all_as(_InUse, "active_run_definitions"):
        runs = f"{used.runs} active run(s), e.g. {', '.join(used.examples)}"
        loaded = pipelines.by_key.get(used.pipeline)
        if loaded is None:
            problems.append(f"{used.pipeline} is used by {runs}, but is not loaded")
        elif used.pipeline_hash not in (None, loaded.definition_hash):
            problems.append(
                f"{used.pipeline} ({loaded.source}) is not the definition {runs} started "
                f"with: give the changed definition a new version"
            )
    if problems:
        raise PipelineError(
            "; ".join(problems) + " (let those runs end, or cancel them, before this change)"
        )
