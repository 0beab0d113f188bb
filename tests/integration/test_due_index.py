"""Paused schedules cost the claim nothing: the due index leaves them out, and the due query
and next_due_at walk it (SQLite here; PostgreSQL in test_postgres_store)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from goatbeat.stores import SQLiteStore, schema
from tests.conformance.helpers import T0, hourly


def test_sqlite_walks_the_due_index_which_holds_no_paused_row(tmp_path: Path) -> None:
    path = tmp_path / "due.db"
    store = SQLiteStore(path)
    try:
        store.migrate()
        store.publish([hourly(f"s{i}") for i in range(20)])
        for i in range(15):
            store.pause(f"s{i}", note="held")
    finally:
        store.close()
    q = schema.queries("sqlite")
    with closing(sqlite3.connect(path)) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + q["claim_select_due"], {"now": "9999", "limit": 10}
        ).fetchall()
        assert "USING INDEX goatbeat_schedule_due_idx" in str(plan[0])
        plan = conn.execute("EXPLAIN QUERY PLAN " + q["next_due_at"]).fetchall()
        assert "USING INDEX goatbeat_schedule_due_idx" in str(plan[0])
        # The index itself holds the five unpaused rows only.
        (in_index,) = conn.execute(
            "SELECT count(*) FROM goatbeat_schedule INDEXED BY goatbeat_schedule_due_idx "
            "WHERE enabled AND NOT paused AND next_run_at IS NOT NULL"
        ).fetchone()
        assert in_index == 5
    reopened = SQLiteStore(path)
    try:
        assert reopened.next_due_at() is not None and reopened.next_due_at() > T0
    finally:
        reopened.close()
