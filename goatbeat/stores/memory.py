"""MemoryStore: the whole ScheduleStore contract in this process, for tests and demos.

It is the SQLite store on a private in-memory database (SQLite's ``:memory:``): the same
store, the same SQL, the same conformance suite, nothing persisted. Thread-safe (one
connection under one lock), single process; ``wait()`` wakes on ``notify()`` from any thread.
Its clock is injectable (:class:`~goatbeat.core.clock.FakeClock` in tests), so users can test
their own scheduling code against it.
"""

from __future__ import annotations

import json
import weakref
from datetime import datetime
from typing import Any

from goatbeat.core.clock import Clock
from goatbeat.core.errors import ScheduleNotFound
from goatbeat.core.store import SCHEMA_VERSION
from goatbeat.stores.claims import Planner
from goatbeat.stores.definitions import JSON_COLUMNS, SCHEDULE_COLUMNS
from goatbeat.stores.sqlite import SQLiteStore, encode_time

__all__ = ["MemoryStore"]

_COLUMNS = frozenset(SCHEDULE_COLUMNS) | {
    "published_fingerprint",
    "active_execution_id",
    "last_success_at",
    "last_failure_at",
    "consecutive_failures",
}


class MemoryStore(SQLiteStore):
    """An in-process ScheduleStore, migrated when made (``migrate()`` has nothing to do, and
    ``close()`` keeps the data: the database goes with the store)."""

    def __init__(self, clock: Clock | None = None, *, planner: Planner | None = None) -> None:
        super().__init__(":memory:", clock, planner=planner)
        self.dialect.migrate()
        # The database lives as long as the store: closed when the store is collected.
        weakref.finalize(self, self.dialect.close)

    def migrate(self) -> None:
        return None

    def close(self) -> None:
        return None  # the data stays: a memory store has nothing to reconnect to

    def info(self) -> dict[str, Any]:
        return {"kind": "memory", "database": None, "schema_version": SCHEMA_VERSION}

    def write_raw(self, name: str, **columns: Any) -> None:
        """Test hook: overwrite columns of the row ``name`` with raw values, unchecked and
        without bumping its version, as a hand-written SQL ``UPDATE`` would (JSON columns take
        decoded values, instants aware datetimes). For tests of damaged rows only."""
        unknown = set(columns) - _COLUMNS
        if unknown:
            raise KeyError(f"no column(s) {sorted(unknown)}")
        with self.dialect.session() as tx:
            conn = tx.conn  # type: ignore[attr-defined]
            if (
                conn.execute("SELECT 1 FROM goatbeat_schedule WHERE name = ?", (name,)).fetchone()
                is None
            ):
                raise ScheduleNotFound(name)
            # The schema's CHECKs keep a bad value out; a hand edit can switch them off.
            conn.execute("PRAGMA ignore_check_constraints = ON")
            try:
                for column, value in columns.items():
                    if column in JSON_COLUMNS:
                        value = json.dumps(value)
                    elif isinstance(value, datetime):
                        value = encode_time(value)
                    conn.execute(
                        f"UPDATE goatbeat_schedule SET {column} = ? WHERE name = ?", (value, name)
                    )
            finally:
                conn.execute("PRAGMA ignore_check_constraints = OFF")
