"""The review queue as a reviewer sees it: its filters and order, carried from the queue page
into each review (``?queue=...``) and into the decision's form, so that "approve and next"
opens the next review of the same queue. Pure: no database, no request."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from docpipe.errors import InvalidRequestError
from docpipe.state.review_queue import QueueOrder
from docpipe.state.reviews import QueueFilter
from docpipe.statuses import ReviewReason

__all__ = ["MAX_QUEUE_CHARS", "QueueView", "queue_view"]

# A queue's filters and order as a query string: four ids or keys and an order.
MAX_QUEUE_CHARS = 1000
_KEYS = ("pipeline", "step", "reason", "batch_id", "order")


@dataclass(frozen=True)
class QueueView:
    pipeline: str = ""
    step: str = ""
    reason: str = ""
    batch_id: str = ""
    order: QueueOrder = QueueOrder.OLDEST

    @property
    def where(self) -> QueueFilter:
        return QueueFilter(
            self.pipeline or None, self.step or None, self.reason or None, self.batch_id or None
        )

    @property
    def filters(self) -> dict[str, str]:
        """The filters by name ("" for any), as the queue page's form shows them."""
        return {
            "pipeline": self.pipeline,
            "step": self.step,
            "reason": self.reason,
            "batch_id": self.batch_id,
        }

    def query(self, **changes: str) -> str:
        """The queue as a query string, the values set only, with ``changes``."""
        values = {**self.filters, "order": str(self.order), **changes}
        if values["order"] == QueueOrder.OLDEST:
            del values["order"]
        return urlencode({k: v for k, v in values.items() if v})


def queue_view(
    *,
    pipeline: str = "",
    step: str = "",
    reason: str = "",
    batch_id: str = "",
    order: str = "",
    query: str = "",
) -> QueueView:
    """The queue of the filters given, or of ``query`` (a queue's query string, as a review
    carries it); InvalidRequestError for an unknown reason or order."""
    if query:
        if len(query) > MAX_QUEUE_CHARS:
            raise InvalidRequestError(f"queue: at most {MAX_QUEUE_CHARS} characters")
        try:
            given = dict(parse_qsl(query, max_num_fields=len(_KEYS)))
        except ValueError:
            raise InvalidRequestError("queue: not a queue's filters") from None
        if unknown := set(given) - set(_KEYS):
            raise InvalidRequestError(f"queue: unknown {', '.join(sorted(unknown))}")
        return queue_view(**given)
    if reason and reason not in set(ReviewReason):
        raise InvalidRequestError(f"reason: one of {', '.join(ReviewReason)}")
    if order and order not in set(QueueOrder):
        raise InvalidRequestError(f"order: one of {', '.join(QueueOrder)}")
    return QueueView(pipeline, step, reason, batch_id, QueueOrder(order or QueueOrder.OLDEST))
