"""A one-step pipeline whose step may go to three models, for the routing tests: imported by
the test, and loaded by its workers (DOCPIPE_PIPELINE_MODULES=tests.support.routing_pipeline)."""

from __future__ import annotations

from typing import Any

from docpipe.pipelines import Pipeline, Step, StepInput

ANSWER = {
    "type": "object",
    "required": ["topic", "urgency"],
    "properties": {
        "topic": {"type": "string", "minLength": 1},
        "urgency": {"enum": ["low", "medium", "high"]},
        "note": {"type": "string"},
    },
}


def classify(ctx: StepInput) -> dict[str, Any]:
    """The document's topic and urgency, in one call."""
    return ctx.ask("document", ctx.document, ANSWER)


CLASSIFY = Pipeline(
    name="classify",
    version=1,
    steps=(
        Step(
            name="classify",
            prompt_version="classify@v1",
            model="balanced",
            candidates=("balanced", "fast", "cheap"),
            instructions="Say what the document is about and how urgent it is.",
            output_schema=ANSWER,
            execute=classify,
            max_tokens=200,
            answer_schemas=(ANSWER,),
        ),
    ),
)

PIPELINES = (CLASSIFY,)
