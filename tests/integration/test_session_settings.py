"""What every docpipe connection sets for its session, whatever the server's defaults."""

from __future__ import annotations

from docpipe.state.db import Database


def test_a_connection_never_compiles_its_statements(db: Database) -> None:
    """JIT compiling took 90-160 ms of statements doing 2 ms of work once the tables were
    large enough for their estimated costs to pass jit_above_cost (bench.scale)."""
    with db.session() as s:
        row = s.conn.execute(b"SELECT current_setting('jit') AS jit").fetchone()
    assert row is not None and row["jit"] == "off"
