"""Pipelines: which ones this deployment runs, and what each step asks, of which model."""

from __future__ import annotations

from fastapi import APIRouter

from docpipe.errors import NotFoundError
from docpipe.pipelines import Pipeline
from docpipe_api.deps import PipelinesDep
from docpipe_api.errors import error_responses
from docpipe_api.schemas import (
    PipelineDetailOut,
    PipelineListOut,
    PipelineSummaryOut,
    StepDetailOut,
)

__all__ = ["router"]

router = APIRouter(tags=["pipelines"])


def _summary(pipeline: Pipeline) -> PipelineSummaryOut:
    return PipelineSummaryOut(
        key=pipeline.key,
        name=pipeline.name,
        version=pipeline.version,
        source=pipeline.source,
        definition_hash=pipeline.definition_hash,
        steps=pipeline.step_names,
    )


@router.get("/pipelines", response_model=PipelineListOut, summary="The pipelines runs may use")
def list_pipelines(pipelines: PipelinesDep) -> PipelineListOut:
    return PipelineListOut(pipelines=[_summary(p) for p in pipelines])


@router.get(
    "/pipelines/{key}",
    response_model=PipelineDetailOut,
    summary="A pipeline's steps: models, prompt versions, output schemas, bounds",
    responses=error_responses(404, 422),
)
def read_pipeline(key: str, pipelines: PipelinesDep) -> PipelineDetailOut:
    if (pipeline := pipelines.by_key.get(key)) is None:
        raise NotFoundError(
            f"unknown pipeline {key!r} (known: {', '.join(sorted(pipelines.by_key))})"
        )
    return PipelineDetailOut(
        **_summary(pipeline).model_dump(exclude={"steps"}),
        steps=[
            StepDetailOut(
                name=step.name,
                kind=str((step.spec or {}).get("kind", "python")),
                models=list(step.models),
                prompt_version=step.prompt_version,
                max_attempts=step.max_attempts,
                budget_usd=step.budget_usd,
                output_schema=dict(step.output_schema),
            )
            for step in pipeline.steps
        ],
    )
