"""A batch body's documents are counted in its bytes before it is parsed
(docpipe_api.bounds.check_batch_documents), a MiB of it at a time."""

from __future__ import annotations

import pytest

from docpipe.errors import InvalidRequestError
from docpipe_api.bounds import check_batch_documents

PADDING = b'{"documents": [{"text": "' + b"x" * (3 * 1024 * 1024) + b'"}'


def test_documents_past_the_first_mib_are_counted() -> None:
    body = PADDING + b', {"id": "a"}' * 10 + b"]}"
    check_batch_documents(body, 11)
    with pytest.raises(InvalidRequestError, match=r"the limit is 10 \(DOCPIPE_MAX_BATCH_DOCUMENTS"):
        check_batch_documents(body, 10)


def test_braces_in_texts_open_no_document() -> None:
    body = b'{"documents": [{"text": "' + b"{" * 5_000_000 + b'"}]}'
    check_batch_documents(body, 1)
