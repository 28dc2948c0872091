"""``/control/*``: what tests use to inject faults, change settings and read counters."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field, model_validator

from docpipe_fake_llm.batch_faults import BatchPoint, FateKind, PointFaultKind
from docpipe_fake_llm.faults import FaultKind
from docpipe_fake_llm.mistakes import Mistakes
from docpipe_fake_llm.provider import FakeProvider

__all__ = ["router"]

# Every route is async so that it runs on the event loop that owns the provider's state,
# never in FastAPI's thread pool.
router = APIRouter(prefix="/control")


def _provider(request: Request) -> FakeProvider:
    provider: FakeProvider = request.app.state.provider
    return provider


ProviderDep = Annotated[FakeProvider, Depends(_provider)]


class FaultSpec(BaseModel):
    kind: FaultKind
    count: int = Field(1, ge=1)
    step: str | None = None
    model: str | None = None
    retry_after: float | None = Field(None, ge=0)
    hang_s: float | None = Field(None, ge=0)


class ConfigChange(BaseModel):
    """Fields left out keep their value; a null ``rpm`` or ``burst`` means 0 (unlimited)."""

    latency_ms: tuple[int, int] | None = None
    rpm: int | None = Field(None, ge=0)
    burst: int | None = Field(None, ge=0)
    tpm: int | None = Field(None, ge=0)
    # {model: [rpm, tpm]}: replaces every model's own limits
    model_limits: dict[str, tuple[int, int]] | None = None
    rate_headers: bool | None = None
    # The batch interfaces (a null window: each batch's own)
    batch_completion_s: float | None = Field(None, ge=0)
    batch_window_s: float | None = Field(None, gt=0)
    batch_max_requests: int | None = Field(None, ge=1)
    batch_max_bytes: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _latency_is_a_range(self) -> ConfigChange:
        if self.latency_ms is not None and not 0 <= self.latency_ms[0] <= self.latency_ms[1]:
            raise ValueError("latency_ms must be [low, high] with 0 <= low <= high")
        return self


@router.post("/faults")
async def add_fault(spec: FaultSpec, provider: ProviderDep) -> dict[str, Any]:
    fault = provider.faults.add(
        spec.kind,
        spec.count,
        step=spec.step,
        model=spec.model,
        retry_after=spec.retry_after,
        hang_s=spec.hang_s,
    )
    return fault.as_dict()


@router.get("/faults")
async def list_faults(provider: ProviderDep) -> dict[str, Any]:
    return {"faults": provider.faults.pending()}


@router.delete("/faults")
async def clear_faults(provider: ProviderDep) -> dict[str, Any]:
    return {"cleared": provider.faults.clear()}


@router.get("/config")
async def read_config(provider: ProviderDep) -> dict[str, Any]:
    return provider.settings()


@router.post("/config")
async def change_config(change: ConfigChange, provider: ProviderDep) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if change.latency_ms is not None:
        changes["latency_ms"] = change.latency_ms
    for name in ("rpm", "burst", "tpm"):
        if name in change.model_fields_set:
            changes[name] = getattr(change, name) or 0
    if change.model_limits is not None:
        if any(min(pair) < 0 for pair in change.model_limits.values()):
            raise HTTPException(422, "model limits must not be negative")
        changes["model_limits"] = dict(change.model_limits)
    if change.rate_headers is not None:
        changes["rate_headers"] = change.rate_headers
    for name in ("batch_completion_s", "batch_max_requests", "batch_max_bytes"):
        if getattr(change, name) is not None:
            changes[name] = getattr(change, name)
    if "batch_window_s" in change.model_fields_set:
        changes["batch_window_s"] = change.batch_window_s
    provider.reconfigure(**changes)
    return provider.settings()


class MistakesSpec(BaseModel):
    """docpipe_fake_llm.mistakes: replaces the mistakes the model makes."""

    error_rates: dict[str, Annotated[float, Field(ge=0, le=1)]] = {}
    extra_rate: float = Field(0.0, ge=0, le=1)
    seed: int = 0


@router.get("/mistakes")
async def read_mistakes(provider: ProviderDep) -> dict[str, Any]:
    return provider.mistakes.as_dict()


@router.post("/mistakes")
async def change_mistakes(spec: MistakesSpec, provider: ProviderDep) -> dict[str, Any]:
    provider.mistakes = Mistakes(spec.error_rates, spec.extra_rate, spec.seed)
    return provider.mistakes.as_dict()


@router.post("/reset")
async def reset(provider: ProviderDep) -> dict[str, Any]:
    provider.reset()
    return {"status": "reset", **provider.settings()}


@router.get("/stats")
async def read_stats(provider: ProviderDep) -> dict[str, Any]:
    return provider.stats.as_dict()


class BatchFaultSpec(BaseModel):
    """docpipe_fake_llm.batch_faults: a fault at a point of a batch's life."""

    point: BatchPoint
    kind: PointFaultKind
    count: int = Field(1, ge=1)
    after: bool = False
    hang_s: float | None = Field(None, ge=0)


class BatchFateSpec(BaseModel):
    """docpipe_fake_llm.batch_faults: what becomes of the next ``count`` batches created."""

    kind: FateKind
    count: int = Field(1, ge=1)
    requests: int = Field(1, ge=0)
    status: int = Field(500, ge=400, le=599)
    share: float = Field(0.0, ge=0, le=1)
    delay_s: float = Field(0.0, ge=0)


@router.post("/batch-faults")
async def add_batch_fault(spec: BatchFaultSpec, provider: ProviderDep) -> dict[str, Any]:
    fault = provider.batch_faults.add(
        spec.point, spec.kind, spec.count, after=spec.after, hang_s=spec.hang_s
    )
    return fault.as_dict()


@router.post("/batch-fates")
async def add_batch_fate(spec: BatchFateSpec, provider: ProviderDep) -> dict[str, Any]:
    fate = provider.batches.fates.add(
        spec.kind,
        spec.count,
        requests=spec.requests,
        status=spec.status,
        share=spec.share,
        delay_s=spec.delay_s,
    )
    return fate.as_dict()


@router.get("/batch-faults")
async def list_batch_faults(provider: ProviderDep) -> dict[str, Any]:
    return {"faults": provider.batch_faults.pending(), "fates": provider.batches.fates.pending()}


@router.get("/batches")
async def read_batch_stats(provider: ProviderDep) -> dict[str, Any]:
    """What the batch interfaces were sent, processed and billed (and the real-time bill)."""
    return provider.batches.stats()
