"""What the ``docpipe`` command says when it fails: one line saying what happened and what to
do, and an exit code a script can act on. The traceback is shown only with ``--debug``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from docpipe.cli.client import ApiError, ApiUnreachable

__all__ = ["ExitCode", "Failure", "UsageError", "explain"]


class ExitCode(IntEnum):
    """The exit codes of every ``docpipe`` command; :attr:`meaning` is what ``docpipe
    --help`` and the docs say of each."""

    OK = 0
    NOT_DONE = 1
    USAGE = 2
    UNREACHABLE = 3
    REFUSED = 4
    UNAVAILABLE = 5

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "it did what it says",
    ExitCode.NOT_DONE: "it ran, and what it reports is not a success: a run that did not end "
    "done, a pipeline file with errors, an API key that does not exist",
    ExitCode.USAGE: "wrong arguments or settings: the message names them",
    ExitCode.UNREACHABLE: "the API (or, for migrate and api-key, PostgreSQL) did not answer",
    ExitCode.REFUSED: "the API refused the request (401, 403, 404, 409, 413, 422): change it "
    "and try again",
    ExitCode.UNAVAILABLE: "the API failed, or stayed busy or unavailable after the command's "
    "retries (429, 503, 5xx): try again later",
}


class UsageError(Exception):
    """A command's arguments are wrong: the message says which and how to write them."""


@dataclass(frozen=True)
class Failure:
    message: str
    exit_code: ExitCode


# What each refusal means, and what to do about it (the API's own detail goes between).
_REFUSALS = {
    401: (
        "the API wants a valid API key",
        "pass your tenant's key with --api-key or "
        "DOCPIPE_API_KEY ('docpipe api-key create TENANT' makes one)",
    ),
    403: ("the API does not allow this to your key", ""),
    404: ("not found", "check the id (another tenant's ids are not found either)"),
    409: ("it conflicts with what is stored", ""),
    413: ("too large for the API", ""),
    422: ("the API refused the request as invalid", ""),
}


def explain(exc: BaseException) -> Failure | None:
    """The one line and exit code for ``exc``, or None for an error the command does not
    know (shown as an unexpected error)."""
    if isinstance(exc, UsageError):
        return Failure(str(exc), ExitCode.USAGE)
    if isinstance(exc, ApiUnreachable):
        return Failure(
            f"cannot reach the docpipe API at {exc.url} ({exc.reason}): start one with "
            "'docpipe stack up', or point DOCPIPE_API_URL (or --api) at yours",
            ExitCode.UNREACHABLE,
        )
    if isinstance(exc, ApiError):
        return _explain_answer(exc)
    if isinstance(exc, OSError):
        name = f" {exc.filename}" if exc.filename else ""
        return Failure(f"cannot read{name}: {exc.strerror or exc}", ExitCode.USAGE)
    return _explain_library_error(exc)


def _explain_answer(exc: ApiError) -> Failure:
    status, detail = exc.status, exc.detail
    if status in _REFUSALS:
        what, todo = _REFUSALS[status]
        return Failure(
            f"{what} ({status}): {detail}" + (f"; {todo}" if todo else ""), ExitCode.REFUSED
        )
    tries = f" after {exc.attempts} tries" if exc.attempts > 1 else ""
    if status == 429:
        return Failure(
            f"the API still refuses this key's requests as too many{tries} (429): {detail}; "
            "wait a minute and try again (the limit is DOCPIPE_API_KEY_RPM)",
            ExitCode.UNAVAILABLE,
        )
    if status == 503:
        return Failure(
            f"the API stayed unavailable{tries} (503): {detail}; its database or Redis is "
            "away, try again shortly",
            ExitCode.UNAVAILABLE,
        )
    if status >= 500:
        return Failure(
            f"the API failed ({status}): {detail}; its log says why", ExitCode.UNAVAILABLE
        )
    return Failure(f"the API refused the request ({status}): {detail}", ExitCode.REFUSED)


def _explain_library_error(exc: BaseException) -> Failure | None:
    """Errors of the commands that work in the database or read the settings."""
    import psycopg
    from pydantic import ValidationError

    if isinstance(exc, psycopg.OperationalError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Failure(
            f"cannot reach PostgreSQL ({first}): start it ('docpipe stack up' runs one), or "
            "point DOCPIPE_DATABASE_URL at yours",
            ExitCode.UNREACHABLE,
        )
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            (f"DOCPIPE_{'_'.join(str(p) for p in e['loc']).upper()}: " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        return Failure(f"the settings are wrong: {problems}", ExitCode.USAGE)
    return None
