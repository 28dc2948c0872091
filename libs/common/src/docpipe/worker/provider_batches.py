"""The provider-batch lane's collector and poller, one periodic job in beat's schedule
(docpipe.state.provider_batches holds the states they move calls through). They speak to
each provider through the adapter of the batch interface it declares
(docpipe.providers.batch_interfaces: OpenAI's or Anthropic's).

Each pass:

1. finishes creating the provider batches a crash or a failed request left ``packing``:
   the provider's batch is looked for first (OpenAI's: by its metadata, then its input
   file by name; Anthropic's: among those created since the intent, by its size), so a
   batch is never created twice for the same calls;
2. ends the waits (packed or not) of runs whose deadline comes close
   (DOCPIPE_PROVIDER_BATCH_DEADLINE_MARGIN_S): their steps send them in real time;
3. packs the calls waiting for each model into provider batches, once
   DOCPIPE_PROVIDER_BATCH_MIN_CALLS wait or the oldest has waited
   DOCPIPE_PROVIDER_BATCH_MAX_WAIT_S, each within the provider's limits (requests, bytes):
   the intent first (its row and its calls, one statement), then the upload (OpenAI's)
   and the create;
4. ends the waits of runs that ended before their calls were packed (never sent, unpaid),
   and cancels the provider batches nobody waits for any more;
5. asks the provider about every submitted batch, and ends those that ended with their
   results' lines applied to their calls (one statement each);
6. wakes the parked steps whose calls are all answered (at most
   DOCPIPE_PROVIDER_BATCH_WAKE_LIMIT, oldest answers first), and publishes their messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from docpipe.broker.messages import Broker
from docpipe.errors import LLMError, PermanentLLMError
from docpipe.providers.anthropic_batches import AnthropicBatches
from docpipe.providers.batch_interfaces import BatchHTTP, BatchInterface, RemoteBatch
from docpipe.providers.openai_batches import OpenAIBatches
from docpipe.settings import Settings
from docpipe.settings.provider_specs import BatchInterfaceSpec, ModelPrice, ResolvedProvider
from docpipe.state import provider_batches as state
from docpipe.state.db import Database
from docpipe.state.outbox import publish_outbox

__all__ = [
    "ProviderBatchPass",
    "batch_interface",
    "batch_interfaces",
    "run_provider_batches",
]

log = logging.getLogger(__name__)


def batch_interfaces(settings: Settings) -> dict[str, BatchInterface]:
    """A client of each provider's batch interface, by provider name."""
    return {
        p.name: batch_interface(p, timeout_s=settings.llm_timeout_s)
        for p in settings.provider_table.providers
        if p.batch is not None
    }


def batch_interface(provider: ResolvedProvider, *, timeout_s: float) -> BatchInterface:
    """A client of the batch interface ``provider`` declares (``batch.interface``)."""
    assert provider.batch is not None, "only a provider that declares a batch interface"
    adapter = AnthropicBatches if provider.batch.interface == "anthropic" else OpenAIBatches
    key = provider.api_key.get_secret_value()
    return adapter(BatchHTTP(provider.base_url, adapter.headers(key), timeout_s=timeout_s))


@dataclass
class ProviderBatchPass:
    """What one pass did, for the periodic job's record."""

    created: int = 0
    packed_calls: int = 0
    recovered: int = 0
    ended: int = 0
    answered: int = 0
    failed: int = 0
    woken: int = 0
    cancelled: int = 0
    dropped: int = 0
    switched: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        counts = {k: v for k, v in vars(self).items() if isinstance(v, int)}
        return {**counts, "errors": len(self.errors)}


def run_provider_batches(
    db: Database,
    broker: Broker,
    settings: Settings,
    interfaces: Mapping[str, BatchInterface],
) -> ProviderBatchPass:
    """One pass of the collector and the poller (see the module's docstring)."""
    done = ProviderBatchPass()
    specs = {p.name: p.batch for p in settings.provider_table.providers if p.batch is not None}
    for batch in state.open_batches(db):
        if batch.state == "packing" and batch.provider in interfaces:
            _submit(
                db,
                interfaces[batch.provider],
                specs[batch.provider],
                batch.id,
                done,
                recovering=batch,
            )
    # Before packing: a call whose run's deadline is close is never packed.
    done.switched = state.switch_waits_near_deadline(db, settings.provider_batch_deadline_margin_s)
    for group in state.waiting_groups(db):
        interface, spec = interfaces.get(group.provider), specs.get(group.provider)
        if interface is None or spec is None:
            continue  # its provider no longer declares a batch interface: nothing to do
        if group.calls < settings.provider_batch_min_calls and (
            group.oldest_s < settings.provider_batch_max_wait_s
        ):
            continue
        _pack_group(db, interface, spec, group, done)
    done.dropped = state.drop_waits_of_ended_runs(db)
    for batch_id, provider, remote_id in state.abandoned_batches(db):
        if provider in interfaces:
            _cancel(db, interfaces[provider], batch_id, remote_id, done)
    for batch in state.open_batches(db):
        if batch.state == "submitted" and batch.provider in interfaces and batch.remote_id:
            _poll(db, interfaces[batch.provider], batch, done, settings)
    woken = state.wake_steps(db, settings.provider_batch_wake_limit)
    done.woken = publish_outbox(db, broker, woken) if woken else 0
    for error in done.errors:
        log.warning("provider batches: %s", error)
    return done


def _pack_group(
    db: Database,
    interface: BatchInterface,
    spec: BatchInterfaceSpec,
    group: state.WaitingGroup,
    done: ProviderBatchPass,
) -> None:
    """Provider batches of the group's waiting calls, each within the provider's limits,
    until none waits."""
    while True:
        calls = state.waiting_calls(db, group.provider, group.model, spec.max_requests)
        if not calls:
            return
        taken, size = _fitting(interface, calls, spec.max_bytes)
        if not taken:
            # One request alone is larger than a batch may be: it waits in vain. Its step
            # sends it in real time once the recheck wakes it (DOCPIPE_PROVIDER_BATCH_RECHECK_S).
            done.errors.append(f"call {calls[0].call_id} alone exceeds max_bytes")
            return
        batch_id = state.pack(db, group.provider, group.model, [c.call_id for c in taken], size)
        if batch_id is None:
            return
        done.packed_calls += len(taken)
        _submit(db, interface, spec, batch_id, done, recovering=None)
        if len(taken) == len(calls) and len(calls) < spec.max_requests:
            return


def _fitting(
    interface: BatchInterface, calls: Sequence[state.PackedCall], max_bytes: int
) -> tuple[list[state.PackedCall], int]:
    """The calls whose requests fit in one provider batch of at most ``max_bytes``, and
    their size."""
    taken: list[state.PackedCall] = []
    size = 0
    for call in calls:
        request = len(interface.request_bytes(call))
        if size + request > max_bytes:
            break
        taken.append(call)
        size += request
    return taken, size


def _submit(
    db: Database,
    interface: BatchInterface,
    spec: BatchInterfaceSpec,
    batch_id: int,
    done: ProviderBatchPass,
    *,
    recovering: state.OpenBatch | None,
) -> None:
    """Create the provider batch whose intent is recorded (``packing``); after a crash or a
    failed request (``recovering``: the intent as recorded) the provider's batch, then its
    staged input, is looked for first."""
    staged = None
    try:
        if recovering is not None:
            found = _found(db, interface, recovering)
            if found is not None:
                state.record_submitted(
                    db,
                    batch_id,
                    remote_id=found.remote_id,
                    input_file_id=found.input_file_id or recovering.input_file_id,
                    status=found.status,
                )
                done.recovered += 1
                return
            staged = recovering.input_file_id or interface.find_staged(batch_id)
        requests = [interface.request_bytes(c) for c in state.packed_calls(db, batch_id)]
        if staged is None:
            staged = interface.stage(batch_id, requests)
            if staged is not None:
                state.record_file(db, batch_id, staged)
        created = interface.create(batch_id, requests, staged=staged, window=spec.completion_window)
        state.record_submitted(
            db,
            batch_id,
            remote_id=created.remote_id,
            input_file_id=created.input_file_id or staged,
            status=created.status,
        )
        done.created += 1
    except PermanentLLMError as exc:
        # The provider refuses this batch (its file, its size): its calls go back to their
        # steps, to be sent again (another batch, or real time: DOCPIPE_PROVIDER_BATCH_*).
        state.fail_submission(db, batch_id, str(exc))
        done.errors.append(f"provider batch {batch_id} refused: {exc}")
    except LLMError as exc:
        done.errors.append(f"provider batch {batch_id} not created yet: {exc}")


def _found(db: Database, interface: BatchInterface, intent: state.OpenBatch) -> RemoteBatch | None:
    """The provider's batch created for ``intent`` before its answer was lost: the likeliest
    the interface finds that no other provider batch of docpipe's has on record."""
    since = time.time() - intent.age_s
    candidates = interface.find(intent.id, requests=intent.requests, since=since)
    if not candidates:
        return None
    taken = state.recorded_remote_ids(db, intent.provider, [c.remote_id for c in candidates])
    return next((c for c in candidates if c.remote_id not in taken), None)


def _cancel(
    db: Database, interface: BatchInterface, batch_id: int, remote_id: str, done: ProviderBatchPass
) -> None:
    """Cancel a provider batch nobody waits for any more (its runs ended: a cancelled
    batch's); answers that arrive anyway are recorded when it ends, paid once."""
    try:
        cancelled = interface.cancel(remote_id)
    except LLMError as exc:
        done.errors.append(f"provider batch {batch_id} not cancelled yet: {exc}")
        return
    state.record_status(db, batch_id, cancelled.status)
    done.cancelled += 1


def _poll(
    db: Database,
    interface: BatchInterface,
    batch: state.OpenBatch,
    done: ProviderBatchPass,
    settings: Settings,
) -> None:
    assert batch.remote_id is not None
    try:
        remote = interface.retrieve(batch.remote_id)
        if not remote.ended:
            state.record_status(db, batch.id, remote.status)
            return
        price = _batch_price(settings, batch.model)
        lines = [_priced(line, price) for line in interface.results(remote)]
    except LLMError as exc:
        done.errors.append(f"provider batch {batch.id} not read yet: {exc}")
        return
    answered, failed = state.end_batch(
        db,
        batch.id,
        state=remote.status,
        provider_status=remote.status,
        lines=lines,
        output_file_id=remote.output_file_id,
        error_file_id=remote.error_file_id,
        error=remote.error,
    )
    done.ended += 1
    done.answered += answered
    done.failed += failed


def _batch_price(settings: Settings, model: str) -> ModelPrice | None:
    """``model``'s price at its provider's batch discount (None: no longer configured)."""
    resolved = settings.provider_table.models.get(model)
    if resolved is None or resolved.provider.batch is None:
        return None
    return resolved.provider.batch.price(resolved.price)


def _priced(line: state.BatchLine, price: ModelPrice | None) -> state.BatchLine:
    """``line`` with its answer's usage and cost, when it has both."""
    usage = (line.answer or {}).get("usage")
    if price is None or not isinstance(usage, dict):
        return line
    try:
        tokens = int(usage["prompt_tokens"]), int(usage.get("completion_tokens") or 0)
    except (KeyError, TypeError, ValueError):
        return line
    return replace(
        line, input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=price.cost(*tokens)
    )
