"""SQLiteStore: the embedded default, on the standard library's sqlite3.

Safe for several processes on one host: WAL mode, a busy timeout, and every write transaction
starts with ``BEGIN IMMEDIATE`` so writers queue for the lock instead of failing to upgrade it.
A claim reads and plans outside the write lock, then checks the lease and writes with
compare-and-set inside one ``BEGIN IMMEDIATE`` transaction, so an edit made meanwhile wins,
exactly as with PostgreSQL. The lease and due-ness use the store clock (an injectable
:class:`~goatbeat.core.clock.Clock`, the host clock by default): processes on one host share
it. SQLite has no LISTEN/NOTIFY; ``notify()`` bumps a counter row and ``wait()`` polls
``PRAGMA data_version`` (free when nothing changed) to notice it from other processes.

It is :class:`~goatbeat.stores.store.DialectStore` over the SQLite dialect
(:mod:`goatbeat.stores.dialects.sqlite`, queries in ``sql/sqlite/queries.sql``).
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
