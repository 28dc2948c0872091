"""Throwaway servers and databases for tests."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def create_database(admin_url: str, prefix: str) -> str:
    """A new empty database on the admin server; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return psycopg.conninfo.make_conninfo(admin_url, dbname=name)


@contextmanager
def service_dir(name: str) -> Iterator[Path]:
    """A private state directory that the postgres user can reach when we run as root
    (pytest's own tmp_path lives under a root-only directory)."""
    parent = Path(tempfile.mkdtemp(prefix=f"docpipe-{name}-"))
    parent.chmod(0o711)
    try:
        yield parent / "data"
    finally:
        shutil.rmtree(parent, ignore_errors=True)
