"""What reading a document may cost, as errors a tenant can act on: the characters it
expands into (:class:`TextBudget`, :func:`check_page_chars`: ``too_much_text``) and the
time it takes (:func:`too_slow`). Light on purpose: the process that reads PDFs
(docpipe.extraction.pdf_server) checks the same bounds without loading the settings."""

from __future__ import annotations

from docpipe.errors import UnreadableDocumentError

__all__ = ["TextBudget", "check_page_chars", "too_much_text", "too_slow"]


def too_much_text(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="too_much_text")


def too_slow(message: str) -> UnreadableDocumentError:
    return UnreadableDocumentError(message, kind="too_slow")


def check_page_chars(page: int, chars: int, max_chars: int) -> None:
    """too_much_text when page ``page`` (1-based) holds more than ``max_chars``."""
    if chars > max_chars:
        raise too_much_text(
            f"page {page} holds {chars} characters (at most {max_chars}, DOCPIPE_MAX_PAGE_CHARS)"
        )


class TextBudget:
    """The characters a document may expand into, spent while its reader writes them
    (every repeat of a text counts: a cell in each column it spans, a note at each place it
    is written), so what a reader holds stays proportional to the bound, whatever a small
    file asks for; past it, too_much_text."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.spent = 0

    def spend(self, chars: int) -> None:
        self.spent += chars
        if self.spent > self.max_chars:
            raise too_much_text(
                f"the document's text runs past {self.max_chars} characters "
                "(DOCPIPE_MAX_DOCUMENT_CHARS; repeats of a text count each time)"
            )
