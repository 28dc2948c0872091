"""docpipe's ``document_extract:v1`` pipeline without docpipe: the same calls, no state.

The peers run the very step functions of ``docpipe.pipelines.document_extract`` (same prompts, same
user messages, same answer schemas, same fallback model, same post-processing) through a
context that only talks to the provider: no call log, no memo, no budget check, no lease.
Each step's independent calls go out ``STEP_CALL_CONCURRENCY`` at a time, as in docpipe
(one thread pool per step, like docpipe's ``StepCalls.ask_all``), and each step's output
is validated against its schema, as docpipe's executor does. Each request is the one docpipe
sends (``plan_call``: the step's schema in json_schema mode, its max_tokens), through docpipe's
provider client (``docpipe.providers.client.LLMClient``), and its answer is read as docpipe
reads it (``read_answer``), so whatever differs in a comparison is orchestration only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from typing import Any

from docpipe.errors import InvalidOutputError
from docpipe.pipelines import Step
from docpipe.pipelines.document_extract import DOCUMENT_EXTRACT
from docpipe.pipelines.text_extraction import EXTRACT_TEXT
from docpipe.providers.client import LLMClient, validate_json
from docpipe.providers.routing import RouteReason, plan_call, read_answer
from docpipe.settings import Settings

__all__ = ["PIPELINE", "STEP_CALL_CONCURRENCY", "llm_client", "run_document", "run_step"]

# The peers are given each document as text, so they run the pipeline's own steps. So does
# docpipe: a text document's extract_text step is done as its run is created (in the same
# statement, no message, no worker), and every docpipe figure includes what that costs.
PIPELINE = replace(
    DOCUMENT_EXTRACT, steps=tuple(s for s in DOCUMENT_EXTRACT.steps if s.name != EXTRACT_TEXT)
)
STEP_CALL_CONCURRENCY = int(os.environ.get("DOCPIPE_STEP_CALL_CONCURRENCY", "4"))


@cache
def llm_client(pid: int | None = None) -> LLMClient:
    """One provider client per process (pass ``os.getpid()``: never share across a fork)."""
    return LLMClient(
        base_url=os.environ["PEER_LLM_BASE_URL"],
        api_key="",
        timeout_s=20,
    )


@cache
def _settings() -> Settings:
    return Settings()  # docpipe's defaults: the models and output mode its workers use here


class PlainContext:
    """A docpipe.pipelines.StepInput that only talks to the provider."""

    def __init__(self, step: Step, document: str, outputs: Mapping[str, Any]) -> None:
        self.step = step
        self.document = document
        self.page_starts = (0,)  # a text document is one page
        self.outputs = outputs
        self.llm = llm_client(os.getpid())

    def ask(self, call_key: str, user: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        messages = [
            {"role": "system", "content": self.step.system_prompt},
            {"role": "user", "content": user},
        ]
        invalid = []
        for model in self.step.models:
            settings = _settings()
            planned = plan_call(
                settings.provider_table.model(model),
                messages,
                schema,
                step=self.step.name,
                max_tokens=self.step.max_tokens or settings.default_max_tokens,
                reason=RouteReason.PREFERRED,
            )
            completion = self.llm.chat(planned.request)
            try:
                return read_answer(completion, schema, planned)
            except InvalidOutputError as exc:
                invalid.append(f"{model}: {exc}")
        raise InvalidOutputError(f"{call_key}: no valid answer ({'; '.join(invalid)})")

    def ask_all(
        self,
        requests: Sequence[tuple[str, str, Mapping[str, Any]]],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]:
        parallel = min(concurrency or STEP_CALL_CONCURRENCY, STEP_CALL_CONCURRENCY, len(requests))
        if parallel <= 1:
            return [self.ask(*r) for r in requests]
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            return list(pool.map(lambda r: self.ask(*r), requests))


def run_step(name: str, document: str, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """One step of the pipeline, from the document and the earlier steps' outputs."""
    step = PIPELINE.step(name)
    output = step.execute(PlainContext(step, document, outputs))
    validate_json(output, step.output_schema)
    return output


def run_document(document: str) -> dict[str, Any]:
    """The whole pipeline in one go (what a plain script or a one-task worker does)."""
    outputs: dict[str, Any] = {}
    for step in PIPELINE.steps:
        outputs[step.name] = run_step(step.name, document, outputs)
    return outputs
