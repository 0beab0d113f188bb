"""SQLiteLedger: the idempotency ledger in goatbeat's SQLite file (the embedded default).

For workers on the scheduler's host only (a SQLite file is not shared across machines). One
connection per thread and per process, a busy timeout so concurrent workers queue for the
write lock, and the host's clock for instants. Every call is one statement from
``sql/sqlite/queries.sql`` (the prune, two), committed on its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import StoreError
from goatbeat.idempotency import Delivery
from goatbeat.stores import schema
from goatbeat.stores.sqlite import decode_time, encode_time

__all__ = ["SQLiteLedger"]


class SQLiteLedger:
    """``SQLiteLedger("goatbeat.db")``: the file goatbeat migrated (schema >= 2)."""

    def __init__(self, path: str, *, busy_timeout: float = 30.0, clock: Clock | None = None):
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self.clock: Clock = clock or SystemClock()
        self._q = schema.queries("sqlite")
        self._local = threading.local()
        # Every connection opened (by any thread), so close() closes them all: one dropped
        # with its thread would be closed by the garbage collector, with a ResourceWarning.
        self._opened: list[tuple[int, sqlite3.Connection]] = []
        self._opened_lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            # Used by its own thread only; close() may come from another.
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            self._local.conn = conn
            self._local.pid = os.getpid()
            with self._opened_lock:
                self._opened.append((os.getpid(), conn))
        return conn

    def _now(self) -> str:
        text = encode_time(self.clock.now())
        assert text is not None
        return text

    def _fetch(self, name: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        try:
            cur = self._connection().execute(self._q[name], dict(params))
            rows = cur.fetchall()
            cur.close()
            return rows
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite ledger: {exc}") from exc

    def begin(self, key: str, *, owner: str, lease: timedelta | None) -> bool:
        now = self.clock.now()
        expires = None if lease is None else encode_time(now + lease)
        params = {"key": key, "owner": owner, "now": encode_time(now), "expires_at": expires}
        return bool(self._fetch("delivery_begin", params))

    def duplicate(self, key: str) -> str | None:
        rows = self._fetch("delivery_duplicate", {"key": key})
        return str(rows[0]["state"]) if rows else None

    def succeeded(self, key: str, *, owner: str, counted: bool) -> None:
        params = {"key": key, "owner": owner, "counted": int(counted), "now": self._now()}
        self._fetch("delivery_succeeded", params)

    def failed(self, key: str, *, owner: str) -> None:
        self._fetch("delivery_failed", {"key": key, "owner": owner, "now": self._now()})

    def read(self, key: str) -> Delivery | None:
        rows = self._fetch("delivery_read", {"key": key})
        if not rows:
            return None
        row = rows[0]
        started = decode_time(row["started_at"])
        assert started is not None
        return Delivery(
            idempotency_key=row["idempotency_key"],
            state=row["state"],
            owner=row["owner"],
            attempts=int(row["attempts"]),
            duplicates=int(row["duplicates"]),
            started_at=started,
            expires_at=decode_time(row["expires_at"]),
            finished_at=decode_time(row["finished_at"]),
        )

    def prune(self, *, before: datetime) -> int:
        cutoff = encode_time(before)
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            deleted = conn.execute(self._q["delivery_prune_deliveries"], {"before": cutoff})
            count = deleted.rowcount
            keys = conn.execute(self._q["delivery_prune_task_keys"], {"before": cutoff})
            count += keys.rowcount
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"sqlite ledger: {exc}") from exc
        return int(count)

    def close(self) -> None:
        """Close every connection this process opened."""
        self._local.conn = None
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for pid, conn in opened:
            if pid == os.getpid():
                conn.close()
