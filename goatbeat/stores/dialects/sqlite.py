"""The SQLite dialect: SQLiteStore's database, on the standard library's sqlite3.

Safe for several processes on one host: WAL mode, a busy timeout, and every write transaction
starts with ``BEGIN IMMEDIATE`` so writers queue for the lock instead of failing to upgrade it.
A claim reads and plans outside the write lock, then checks the lease and writes with
compare-and-set inside one ``BEGIN IMMEDIATE`` transaction, so an edit made meanwhile wins,
exactly as with PostgreSQL.

The lease and due-ness use the store clock (an injectable :class:`~goatbeat.core.clock.Clock`,
the host clock by default): processes on one host share it. SQLite has no LISTEN/NOTIFY;
``notify()`` bumps a counter row and ``wait()`` polls ``PRAGMA data_version`` (free when
nothing changed) to notice it from other processes.

Every operation is :class:`~goatbeat.stores.store.DialectStore`'s; this module keeps the
connection, and :mod:`goatbeat.stores.dialects.sqlite_tx` answers its primitives
(:mod:`goatbeat.stores.dialect`) with the named queries of ``sql/sqlite/queries.sql``.
SQLite has no arrays, so a primitive over a batch runs its statement once per row, inside the
one transaction.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from goatbeat.core.clock import Clock
from goatbeat.core.errors import StoreError
from goatbeat.stores import schema
from goatbeat.stores.dialects.sqlite_tx import SQLiteTx, decode_time, encode_time

__all__ = ["SQLiteDialect", "encode_time", "decode_time"]

_POLL_STEP = 0.05  # seconds between two looks at PRAGMA data_version while waiting


class SQLiteDialect:
    """One SQLite file (or ``":memory:"``), one connection guarded by a lock."""

    kind = "sqlite"
    supports_shards = False
    records_in_claim = False
    compares_publications = False
    claim_attempts = 1

    def __init__(self, path: str | Path, clock: Clock, *, busy_timeout: float = 30.0) -> None:
        self.path = str(path)
        self.clock = clock
        self.busy_timeout = busy_timeout
        self.q = schema.queries("sqlite")
        self.timed = frozenset(name for name, text in self.q.items() if ":now" in text)
        self.lock = threading.RLock()
        self._local = threading.Condition(threading.Lock())
        self._local_notified = 0
        self._conn: sqlite3.Connection | None = None
        self.data_version: int | None = None
        self._seen_counter: int | None = None
        with self.lock:
            self._connect()
            self._seen_counter = self._read_counter()

    # -- plumbing --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # we issue BEGIN ourselves
                check_same_thread=False,  # guarded by self.lock
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: cannot open {self.path!r}: {exc}") from exc
        self._conn = conn
        return conn

    @contextmanager
    def _handle(self, *, begin: str | None = None) -> Iterator[SQLiteTx]:
        """The connection, under the store lock, with sqlite errors turned into StoreError;
        with ``begin``, inside that transaction (committed at the end, rolled back on error)."""
        with self.lock:
            conn = self._connect()
            tx = SQLiteTx(self, conn)
            try:
                if begin is not None:
                    tx.begin(begin)
                try:
                    yield tx
                except BaseException:
                    tx.rollback()
                    raise
                tx.commit()
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc}") from exc

    def session(self) -> Any:
        return self._handle()

    def transaction(self) -> Any:
        return self._handle(begin="BEGIN IMMEDIATE")

    def claim(self) -> Any:
        return self._handle()  # reads outside the write lock; begin_writes takes it

    def snapshot(self) -> Any:
        return self._handle(begin="BEGIN")  # one snapshot for every read

    def now(self) -> datetime:
        return self.clock.now().astimezone(UTC)

    def _read_counter(self) -> int | None:
        assert self._conn is not None
        try:
            row = self._conn.execute(self.q["notify_counter"]).fetchone()
        except sqlite3.OperationalError:
            return None  # not migrated yet
        return None if row is None else int(row[0])

    # -- lifecycle -------------------------------------------------------------------------

    def migrate(self) -> None:
        with self.transaction() as tx:
            conn = tx.conn
            for statement in schema.split_statements(schema.version_table_sql("sqlite")):
                conn.execute(statement)
            applied = {int(r[0]) for r in conn.execute(self.q["applied_versions"])}
            for version in schema.migration_versions("sqlite"):
                if version in applied:
                    continue
                for statement in schema.split_statements(schema.sqlite_migration_sql(version)):
                    conn.execute(statement)
        with self.lock:
            if self._seen_counter is None:
                self._seen_counter = self._read_counter()

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def info(self) -> dict[str, Any]:
        with self.session() as tx:
            try:
                versions = [int(r[0]) for r in tx.conn.execute(self.q["applied_versions"])]
            except sqlite3.OperationalError:
                versions = []
        return {"kind": "sqlite", "database": self.path, "schema_version": max(versions, default=0)}

    # -- wake-ups --------------------------------------------------------------------------

    def wake_local(self) -> None:
        with self._local:
            self._local_notified += 1
            self._local.notify_all()

    def _counter_moved(self) -> bool:
        """Whether the notify counter moved since we last reported it. Reads the counter only
        when PRAGMA data_version says another connection committed (or we did)."""
        with self.session() as tx:
            version = int(tx.conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self.data_version and self._seen_counter is not None:
                return False
            self.data_version = version
            counter = self._read_counter()
            if counter is None:
                return False
            if self._seen_counter is None:
                self._seen_counter = counter
                return False
            moved = counter != self._seen_counter
            self._seen_counter = counter
            return moved

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._local:
                local_seen = self._local_notified
            if self._counter_moved():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # A notify() from this very store wakes us at once; other processes within a step.
            with self._local:
                if self._local_notified == local_seen:
                    self._local.wait(timeout=min(remaining, _POLL_STEP))
