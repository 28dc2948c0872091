"""Evaluation sets: documents with the output a pipeline's step should give, tenant-scoped,
named and versioned.

Every change of a set's items (an upload, a promotion of reviews) is one new version, made
in one transaction: its items are checked against the step's output schema (what is not
scored may be left out) and its documents must exist, or nothing changes. An item's earlier
expected output stays readable under the versions it belonged to, so a report names the
version it scored.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import IO, Any

import jsonschema
from psycopg.types.json import Jsonb

from docpipe import json_codec
from docpipe.errors import ConflictError, InvalidRequestError, NotFoundError
from docpipe.evaluation.comparators import Leaf, Node, ObjectNode
from docpipe.pipelines.model import Step
from docpipe.state.batches import BatchDocument, store_documents
from docpipe.state.db import Database, Session
from docpipe.state.documents import DOCUMENT_ID, put_file

__all__ = [
    "EvaluationSet",
    "ExpectedItem",
    "SentFiles",
    "SetItem",
    "add_items",
    "create_set",
    "expected_schema",
    "find_set",
    "items_page",
    "list_sets",
    "parse_item_lines",
    "promote_reviews",
    "set_items",
]

_CHUNK = 500  # items stored per statement
_MAX_ERRORS = 50  # errors named in one refusal


@dataclass(frozen=True)
class EvaluationSet:
    id: str
    name: str
    pipeline: str  # a pipeline's name: any of its versions may be evaluated on it
    step: str
    version: int
    items: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ExpectedItem:
    """What one document's step should give, and where that came from."""

    document_id: str
    expected: Mapping[str, Any]
    source: str  # review | upload | samples
    review_decision_id: int | None = None
    decided_by: str | None = None
    run_id: str | None = None
    text: str | None = None  # a new text document sent with the item
    file: IO[bytes] | None = None  # a file sent with the item, already held to the bounds
    file_format: str = ""  # of a document (PDF, DOCX, image)

    def row(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "expected": self.expected,
            "source": self.source,
            "review_decision_id": self.review_decision_id,
            "decided_by": self.decided_by,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class SetItem:
    document_id: str
    expected: dict[str, Any]
    source: str
    decided_by: str | None
    review_decision_id: int | None
    run_id: str | None
    added_in: int
    created_at: datetime


def create_set(
    db: Database, *, tenant_id: str, name: str, pipeline: str, step: str
) -> tuple[EvaluationSet, bool]:
    """A new empty set, or the tenant's set of that name if it is for the same pipeline
    and step (``created`` False); ConflictError if it is for another."""
    with db.transaction() as session:
        row = session.one_as(
            EvaluationSet,
            "create_evaluation_set",
            id=uuid.uuid4(),
            tenant_id=tenant_id,
            name=name,
            pipeline=pipeline,
            step=step,
        )
        if row is not None:
            return row, True
        existing = session.one_as(
            EvaluationSet, "evaluation_set_named", tenant_id=tenant_id, name=name
        )
    assert existing is not None, "the name was taken: the set exists"
    if (existing.pipeline, existing.step) != (pipeline, step):
        raise ConflictError(
            f"evaluation set {name!r} exists for {existing.pipeline} step {existing.step}"
        )
    return existing, False


def find_set(db: Database | Session, *, tenant_id: str, ref: str) -> EvaluationSet:
    """The tenant's set named ``ref``, or whose id it is; NotFoundError otherwise (another
    tenant's set is not found either)."""
    found = db.one_as(EvaluationSet, "evaluation_set_named", tenant_id=tenant_id, name=ref)
    if found is None and _is_uuid(ref):
        found = db.one_as(EvaluationSet, "evaluation_set_by_id", tenant_id=tenant_id, id=ref)
    if found is None:
        raise NotFoundError(f"evaluation set {ref[:100]!r} not found")
    return found


def list_sets(db: Database, *, tenant_id: str, limit: int = 1000) -> list[EvaluationSet]:
    return db.all_as(EvaluationSet, "evaluation_sets", tenant_id=tenant_id, limit=limit)


def set_items(
    db: Database | Session, set_id: str, version: int, *, page: int = 1000
) -> Iterator[SetItem]:
    """The items of ``version`` of a set by document id, read a page at a time."""
    after = ""
    while True:
        rows = db.all_as(
            SetItem, "set_items", set_id=set_id, version=version, after=after, limit=page
        )
        yield from rows
        if len(rows) < page:
            return
        after = rows[-1].document_id


def items_page(
    db: Database, set_id: str, version: int, *, after: str = "", limit: int = 100
) -> list[SetItem]:
    """A page of ``version``'s items, by document id after ``after``."""
    return db.all_as(SetItem, "set_items", set_id=set_id, version=version, after=after, limit=limit)


def expected_schema(step: Step) -> dict[str, Any]:
    """What an expected output of ``step`` must satisfy: its output schema, except that
    what is not scored (``compare: none``, the evidence) may be left out."""
    schema = dict(step.output_schema)
    tree = step.comparison
    if isinstance(tree, ObjectNode) and "required" in schema:
        unscored = {name for name, node in tree.properties.items() if not _scores(node)}
        schema["required"] = [r for r in schema["required"] if r not in unscored]
    return schema


def _scores(node: Node) -> bool:
    """Whether anything under ``node`` is scored."""
    if isinstance(node, Leaf):
        return node.compare != "none"
    if isinstance(node, ObjectNode):
        return any(_scores(n) for n in node.properties.values())
    return _scores(node.item)


def add_items(
    db: Database,
    *,
    tenant_id: str,
    evaluation_set: EvaluationSet,
    step: Step,
    items: Iterable[ExpectedItem],
    max_items: int,
) -> EvaluationSet:
    """Store ``items`` as the set's next version, in one transaction and in chunks (the
    caller may stream them). InvalidRequestError naming each item's errors (its place from
    1, the JSON pointer, the message) when one breaks the step's schema, NotFoundError
    naming the documents the tenant does not have; either way nothing changes. No items:
    the set as it was (no new version)."""
    try:
        return _add_items(db, tenant_id, evaluation_set, step, items, max_items)
    except _NothingAdded:  # (its version was rolled back with the transaction)
        return evaluation_set


class _NothingAdded(Exception):
    """An upload without items: the set stays as it is."""


def _add_items(
    db: Database,
    tenant_id: str,
    evaluation_set: EvaluationSet,
    step: Step,
    items: Iterable[ExpectedItem],
    max_items: int,
) -> EvaluationSet:
    validator = jsonschema.validators.validator_for(step.output_schema)(expected_schema(step))
    errors: list[dict[str, Any]] = []
    stream = iter(enumerate(items, start=1))
    with db.transaction() as session:
        version = session.one("open_set_version", set_id=evaluation_set.id, tenant_id=tenant_id)
        if version is None:
            raise NotFoundError(f"evaluation set {evaluation_set.name!r} not found")
        added = 0
        while chunk := list(islice(stream, _CHUNK)):
            added += len(chunk)
            if added > max_items:
                raise InvalidRequestError(
                    f"more than {max_items} items (DOCPIPE_MAX_EVALUATION_ITEMS)"
                )
            for place, item in chunk:
                if len(errors) < _MAX_ERRORS:  # the refusal names this many
                    errors += _errors_of(validator, place, item)
            if errors:
                continue  # go on reading: the refusal names what else is wrong (up to a limit)
            if bad := next((i for _, i in chunk if not DOCUMENT_ID.match(i.document_id)), None):
                raise InvalidRequestError(f"document id {bad.document_id[:140]!r} is not valid")
            # A document named twice: its last line counts, within a chunk as across them
            # (one statement may not write a row twice).
            chunk = list({i.document_id: (p, i) for p, i in chunk}.values())
            sent = [BatchDocument(i.document_id, i.text) for _, i in chunk if i.text is not None]
            store_documents(session, tenant_id, sent)
            for _, item in chunk:
                if item.file is not None:  # the way PUT /documents/{id} stores it
                    put_file(session, tenant_id, item.document_id, item.file, item.file_format)
            ids = sorted({item.document_id for _, item in chunk})
            if missing := session.all("missing_set_documents", tenant_id=tenant_id, ids=ids):
                raise NotFoundError(
                    "documents not found: " + ", ".join(repr(r["id"]) for r in missing)
                )
            session.execute(
                "put_set_items",
                set_id=evaluation_set.id,
                tenant_id=tenant_id,
                version=version["version"],
                items=Jsonb([item.row() for _, item in chunk]),
            )
        if errors:
            raise InvalidRequestError(
                f"{len(errors)}{'+' if len(errors) >= _MAX_ERRORS else ''} expected output(s) "
                f"do not fit the output schema of step {step.name}",
                details={"errors": errors[:_MAX_ERRORS]},
            )
        if added == 0:
            raise _NothingAdded
        updated = session.one_as(EvaluationSet, "count_set_items", set_id=evaluation_set.id)
        assert updated is not None
        if updated.items > max_items:  # raised inside: the transaction is rolled back
            raise InvalidRequestError(
                f"the set would hold {updated.items} items; at most {max_items} "
                "(DOCPIPE_MAX_EVALUATION_ITEMS)"
            )
    return updated


def promote_reviews(
    db: Database,
    *,
    tenant_id: str,
    evaluation_set: EvaluationSet,
    step: Step,
    run_id: str | None = None,
    batch_id: str | None = None,
    max_items: int,
) -> EvaluationSet:
    """Make the output a person approved (as given or corrected) of the set's step in one
    run, or in every reviewed run of a batch, the expected output of its document, keeping
    who decided. ConflictError when there is none (or no such run or batch of the
    tenant's)."""
    if (run_id is None) == (batch_id is None):
        raise InvalidRequestError("promote one run (run_id) or a batch's runs (batch_id)")
    if run_id is not None:
        rows = (
            db.all("reviewed_output_of_run", run_id=run_id, tenant_id=tenant_id, step=step.name)
            if _is_uuid(run_id)
            else []
        )
    else:
        rows = (
            db.all(
                "reviewed_outputs_of_batch", batch_id=batch_id, tenant_id=tenant_id, step=step.name
            )
            if _is_uuid(batch_id or "")
            else []
        )
    rows = [r for r in rows if r["pipeline"].partition(":")[0] == evaluation_set.pipeline]
    if not rows:
        which = f"run {run_id}" if run_id is not None else f"batch {batch_id}"
        raise ConflictError(
            f"{which} has no output of step {step.name} of {evaluation_set.pipeline} that a "
            "person approved"
        )
    items = [
        ExpectedItem(
            document_id=r["document_id"],
            expected=r["output"],
            source="review",
            review_decision_id=r["review_decision_id"],
            decided_by=r["decided_by"],
            run_id=r["run_id"],
        )
        for r in rows
    ]
    return add_items(
        db,
        tenant_id=tenant_id,
        evaluation_set=evaluation_set,
        step=step,
        items=items,
        max_items=max_items,
    )


def _errors_of(
    validator: jsonschema.protocols.Validator, place: int, item: ExpectedItem
) -> list[dict[str, Any]]:
    return [
        {
            "item": place,
            "document": item.document_id,
            "path": "/" + "/".join(str(p) for p in e.absolute_path),
            "message": e.message[:500],
        }
        for e in islice(validator.iter_errors(item.expected), 10)
    ]


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


# A file part's name, and the line naming it ("line 3") -> its file and its format; raises
# naming the line when there is no such part or its file is refused.
SentFiles = Callable[[str, str], tuple[IO[bytes], str]]


def parse_item_lines(
    file: IO[bytes],
    *,
    source: str,
    max_line_bytes: int,
    max_text_bytes: int,
    sent_files: SentFiles,
) -> Iterator[ExpectedItem]:
    """The items of a JSON-lines upload, one a line: ``{"document": "<id>", "expected":
    {...}}``, or ``{"document": {"id": "<id>", "text": "..."}, "expected": {...}}`` for a new
    text document, or ``{"document": {"id": "<id>", "file": "<part>"}, ...}`` for a file
    sent beside the lines (``sent_files``). Read a line at a time, never more than a line
    may hold; InvalidRequestError naming the line of the first item that is not right."""
    longest = max_line_bytes + max_text_bytes + 1024
    number = 0
    while line := file.readline(longest + 1):
        number += 1
        if len(line) > longest:
            raise InvalidRequestError(f"line {number}: longer than an item may be")
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # (nested past what the parser follows)
            raise InvalidRequestError(f"line {number}: not JSON") from None
        if json_codec.holds_nul(line):
            raise InvalidRequestError(f"line {number}: {json_codec.NUL_REFUSED}")
        yield _item(data, number, source, max_line_bytes, max_text_bytes, sent_files)


def _item(
    data: Any,
    number: int,
    source: str,
    max_expected_bytes: int,
    max_text_bytes: int,
    sent_files: SentFiles,
) -> ExpectedItem:
    where = f"line {number}"
    if not isinstance(data, dict) or set(data) - {"document", "expected"}:
        raise InvalidRequestError(f'{where}: an item is {{"document", "expected"}}')
    document: Any = data.get("document")
    expected = data.get("expected")
    if not isinstance(expected, dict):
        raise InvalidRequestError(f"{where}: expected must be a JSON object")
    if len(json.dumps(expected)) > max_expected_bytes:
        raise InvalidRequestError(
            f"{where}: the expected output is larger than {max_expected_bytes} bytes "
            "(DOCPIPE_MAX_EXPECTED_OUTPUT_BYTES)"
        )
    text: Any = None
    file: IO[bytes] | None = None
    file_format = ""
    if isinstance(document, dict) and "file" in document:
        document, part = document.get("id"), document.get("file")
        if not isinstance(part, str) or "text" in data["document"]:
            raise InvalidRequestError(f"{where}: document.file must be a file part's name")
        file, file_format = sent_files(where, part)
    elif isinstance(document, dict):
        document, text = document.get("id"), document.get("text")
        if not isinstance(text, str):
            raise InvalidRequestError(f"{where}: document.text must be a string")
        if len(text.encode()) > max_text_bytes:
            raise InvalidRequestError(
                f"{where}: the document is larger than {max_text_bytes} bytes"
            )
    if not isinstance(document, str) or not DOCUMENT_ID.match(document):
        raise InvalidRequestError(f"{where}: document must be a valid document id")
    return ExpectedItem(document, expected, source, text=text, file=file, file_format=file_format)
