"""Pipelines that take their time, for the time-limit tests of the threads pool: imported by
the tests, and loaded by their workers (DOCPIPE_PIPELINE_MODULES=tests.support.stalling_pipelines).

- ``two_calls``: one step asking two questions one after the other (with a slow provider it
  outlives its soft time limit between them);
- ``stall``: one step that, the first time it runs, blocks its thread where no interruption
  reaches it (a wait without a timeout, as a C call would) and later runs answer at once.
  The first run marks the file named by DOCPIPE_TEST_STALL_MARKER;
- ``hold``: one step that writes the file named by DOCPIPE_TEST_STALL_MARKER and waits
  (where interruptions land) until the test deletes it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from docpipe.pipelines import Pipeline, Step, StepInput

ANSWER = {
    "type": "object",
    "required": ["topic"],
    "properties": {"topic": {"type": "string"}},
}
MARKER_ENV = "DOCPIPE_TEST_STALL_MARKER"


def ask_twice(ctx: StepInput) -> dict[str, Any]:
    first = ctx.ask("first", ctx.document, ANSWER)
    second = ctx.ask("second", ctx.document + " (again)", ANSWER)
    return {"first": first["topic"], "second": second["topic"]}


def stall_once(ctx: StepInput) -> dict[str, Any]:
    marker = Path(os.environ[MARKER_ENV])
    if not marker.exists():
        marker.write_text(str(threading.get_ident()), encoding="utf-8")
        threading.Event().wait()  # no timeout: a time limit's interruption never lands here
    return {"topic": "stalled once"}


def hold_until_released(ctx: StepInput) -> dict[str, Any]:
    marker = Path(os.environ[MARKER_ENV])
    marker.write_text(str(threading.get_ident()), encoding="utf-8")
    while marker.exists():
        time.sleep(0.05)
    return {"topic": "held"}


TWO_CALLS = Pipeline(
    name="two_calls",
    version=1,
    steps=(
        Step(
            name="ask_twice",
            prompt_version="ask_twice@v1",
            model="gpt-4o-mini",
            instructions="Say what the document is about.",
            output_schema={"type": "object", "required": ["first", "second"]},
            execute=ask_twice,
            max_tokens=50,
            answer_schemas=(ANSWER,),
        ),
    ),
)
STALL = Pipeline(
    name="stall",
    version=1,
    steps=(
        Step(
            name="stall_once",
            prompt_version="stall_once@v1",
            output_schema=ANSWER,
            execute=stall_once,
        ),
    ),
)

HOLD = Pipeline(
    name="hold",
    version=1,
    steps=(
        Step(
            name="hold_until_released",
            prompt_version="hold_until_released@v1",
            output_schema=ANSWER,
            execute=hold_until_released,
        ),
    ),
)

PIPELINES = (TWO_CALLS, STALL, HOLD)
