"""The web pages' sessions on the server: started when a person signs in, ended when they
sign out or expire. A cookie names its session by an id only it holds (the table keeps the
id's hash), so a cookie copied before signing out is refused after it."""

from __future__ import annotations

import hashlib
import secrets

from docpipe.state.db import Database

__all__ = ["end_web_session", "start_web_session", "web_session_is_live"]


def start_web_session(
    db: Database, *, tenant_id: str, api_key_id: str | None, max_age_s: float
) -> str:
    """A new session's id (for the cookie), live for ``max_age_s``."""
    session_id = secrets.token_urlsafe(32)
    db.execute(
        "start_web_session",
        id_sha256=_hashed(session_id),
        tenant_id=tenant_id,
        api_key_id=api_key_id,
        max_age_s=max_age_s,
    )
    return session_id


def web_session_is_live(db: Database, session_id: str) -> bool:
    """Whether the session was started here and is neither signed out nor expired."""
    return db.one("web_session_is_live", id_sha256=_hashed(session_id)) is not None


def end_web_session(db: Database, session_id: str) -> bool:
    """Sign the session out (False: it had ended already)."""
    return db.one("end_web_session", id_sha256=_hashed(session_id)) is not None


def _hashed(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
