"""SQLiteStore: the embedded default, on the standard library's sqlite3, safe for several
processes on one host.

It is :class:`~goatbeat.stores.store.DialectStore` over the SQLite dialect:
:mod:`goatbeat.stores.dialects.sqlite` says how processes share the file (WAL, ``BEGIN
IMMEDIATE``, the store clock, wake-ups through ``PRAGMA data_version``); its queries are in
``sql/sqlite/queries.sql``.
"""

from __future__ import annotations

from pathlib import Path

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.stores.claims import Planner
from goatbeat.stores.dialects.sqlite import SQLiteDialect, decode_time, encode_time
from goatbeat.stores.store import DialectStore

__all__ = ["SQLiteStore", "encode_time", "decode_time"]


class SQLiteStore(DialectStore):
    """A ScheduleStore in one SQLite file. ``path`` may be ``":memory:"`` (single process)."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock | None = None,
        *,
        busy_timeout: float = 30.0,
        planner: Planner | None = None,
    ) -> None:
        clock = clock or SystemClock()
        dialect = SQLiteDialect(path, clock, busy_timeout=busy_timeout)
        super().__init__(dialect, clock, planner)
        self.path = dialect.path
        self.busy_timeout = busy_timeout
