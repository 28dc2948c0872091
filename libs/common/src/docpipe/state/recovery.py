"""Recovery that does not wait for Redis: beat's reaper finds work that stopped moving.

- a step whose worker died (SIGKILL, OOM kill: its lease session ended, docpipe.state.leases)
  goes back to the queue within the reaper's interval, and one whose worker is cut off (node
  loss, a partition: its lease expired) within lease_ttl_s + the reaper's interval; never
  after the broker's visibility timeout;
- a pending step whose message is gone (Redis flushed or restarted empty, a message lost
  between commit and publish) is enqueued again;
- runs past their deadline are ended as 'expired';
- a webhook attempt whose worker died is recorded as interrupted and its next attempt
  parked; a pending delivery whose message is gone is enqueued again.

Everything is re-enqueued through the outbox, so a publish failure is swept later too.
While Redis does not answer (its client gives up after DOCPIPE_REDIS_SOCKET_TIMEOUT_S), a
pending step cannot be told lost from waiting: that part of the pass waits for the next
one, the rest (expired leases, deadlines) goes on from PostgreSQL alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from docpipe.broker.queues import LANE_QUEUES, WEBHOOK_QUEUE, sent_before
from docpipe.state import webhooks
from docpipe.state.db import Database
from docpipe.state.outbox import LANE_QUEUES_PARAM

__all__ = ["Recovered", "recover_stalled_work"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    expired_leases: int
    lost_messages: int
    expired_runs: int
    interrupted_webhooks: int
    lost_webhooks: int
    outbox_ids: tuple[int, ...]

    def as_dict(self) -> dict[str, int]:
        return {
            "expired_leases": self.expired_leases,
            "lost_messages": self.lost_messages,
            "expired_runs": self.expired_runs,
            "interrupted_webhooks": self.interrupted_webhooks,
            "lost_webhooks": self.lost_webhooks,
        }


def recover_stalled_work(
    db: Database,
    broker_redis: redis.Redis,
    *,
    grace_s: float,
    lease_s: float,
    webhook_retry: webhooks.RetryPolicy,
) -> Recovered:
    """One reaper pass. ``grace_s`` covers the moment between a worker taking a message off
    the queue and claiming its step, and clock skew between hosts; ``lease_s`` is the lease
    period that workers get to renew after a PostgreSQL restart."""
    with db.transaction() as tx:
        leases = tx.all("reap_lost_leases", lease_s=lease_s, queues=LANE_QUEUES_PARAM)
        tx.execute("abandon_orphaned_steps", lease_s=lease_s)
    expired = db.all("expire_overdue_runs")
    interrupted = webhooks.reap_interrupted_attempts(db, retry=webhook_retry, queue=WEBHOOK_QUEUE)
    try:
        cutoffs = {
            queue: sent_before(broker_redis, queue, grace_s)
            for queue in (*LANE_QUEUES.values(), WEBHOOK_QUEUE)
        }
    except redis.RedisError as exc:
        # What waits in Redis cannot be told from what was lost: look again next pass.
        log.warning(
            "reaper: Redis did not answer, lost messages are looked for next pass (%s: %s)",
            type(exc).__name__,
            exc,
        )
        lost: list[dict[str, Any]] = []
        lost_webhooks: tuple[int, ...] = ()
    else:
        lane_cutoffs = {f"{lane}_cutoff": cutoffs[queue] for lane, queue in LANE_QUEUES.items()}
        lost = db.all(
            "redrive_lost_steps", grace_s=grace_s, queues=LANE_QUEUES_PARAM, **lane_cutoffs
        )
        lost_webhooks = webhooks.redrive_lost_deliveries(
            db, queue=WEBHOOK_QUEUE, grace_s=grace_s, cutoff=cutoffs[WEBHOOK_QUEUE]
        )
    return Recovered(
        expired_leases=len(leases),
        lost_messages=len(lost),
        expired_runs=len(expired),
        interrupted_webhooks=len(interrupted),
        lost_webhooks=len(lost_webhooks),
        outbox_ids=(*(r["id"] for r in (*leases, *lost)), *lost_webhooks),
    )
