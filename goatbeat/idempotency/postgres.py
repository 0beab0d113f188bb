"""PostgresLedger: the idempotency ledger in goatbeat's PostgreSQL database (psycopg 3).

One autocommit connection per thread and per process (opened on first use, so a Celery
prefork child or a Dramatiq worker thread never shares its parent's socket), replaced after a
connection error. Every call is one statement from ``sql/postgres/queries.sql``; instants come
from the database clock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from goatbeat.core.errors import StoreError
from goatbeat.idempotency import Delivery
from goatbeat.stores import schema

__all__ = ["PostgresLedger", "delivery_from_row"]


def delivery_from_row(row: Mapping[str, Any]) -> Delivery:
    def utc(value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    started = utc(row["started_at"])
    assert started is not None
    return Delivery(
        idempotency_key=row["idempotency_key"],
        state=row["state"],
        owner=row["owner"],
        attempts=int(row["attempts"]),
        duplicates=int(row["duplicates"]),
        started_at=started,
        expires_at=utc(row["expires_at"]),
        finished_at=utc(row["finished_at"]),
    )


class PostgresLedger:
    """``PostgresLedger("postgresql://…")``: the database goatbeat migrated (schema >= 2)."""

    def __init__(self, dsn: str, *, connect_timeout: float = 10.0) -> None:
        self.dsn = dsn
        self.url: str | None = dsn if dsn.startswith(("postgresql://", "postgres://")) else None
        """The database URL, for the completion reporter writing to it (None: a DSN that is
        not a URL, which no reporter is given)."""
        self.connect_timeout = connect_timeout
        self._q = schema.queries("postgres")
        self._local = threading.local()
        # Every connection opened (by any thread), so close() closes them all: one dropped
        # with its thread would be closed by the garbage collector, with a ResourceWarning.
        self._opened: list[tuple[int, psycopg.Connection[Any]]] = []
        self._opened_lock = threading.Lock()

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and (conn.closed or conn.broken or self._local.pid != os.getpid()):
            conn = None  # a forked child must not use its parent's socket
        if conn is None:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                # Never prepared server-side: the workers' database may be PgBouncer in
                # transaction mode, where a prepared statement is gone with the session.
                prepare_threshold=None,
                connect_timeout=max(1, int(self.connect_timeout)),
                application_name="goatbeat-worker",
            )
            self._local.conn = conn
            self._local.pid = os.getpid()
            with self._opened_lock:
                self._opened.append((os.getpid(), conn))
        return conn

    def _fetch(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        try:
            conn = self._connection()
            with psycopg.Cursor(conn, row_factory=dict_row) as cur:
                cur.execute(self._q[name], params)
                return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
                self._drop()
            raise StoreError(f"postgres ledger: {exc}") from exc

    def begin(self, key: str, *, owner: str, lease: timedelta | None) -> bool:
        return bool(self._fetch("delivery_begin", {"key": key, "owner": owner, "lease": lease}))

    def duplicate(self, key: str) -> str | None:
        rows = self._fetch("delivery_duplicate", {"key": key})
        return str(rows[0]["state"]) if rows else None

    def succeeded(self, key: str, *, owner: str, counted: bool) -> None:
        self._fetch("delivery_succeeded", {"key": key, "owner": owner, "counted": counted})

    def failed(self, key: str, *, owner: str) -> None:
        self._fetch("delivery_failed", {"key": key, "owner": owner})

    def read(self, key: str) -> Delivery | None:
        rows = self._fetch("delivery_read", {"key": key})
        return delivery_from_row(rows[0]) if rows else None

    def prune(self, *, before: datetime) -> int:
        rows = self._fetch("delivery_prune", {"before": before})
        return int(rows[0]["deleted"])

    def _drop(self) -> None:
        """Forget this thread's connection after a connection error (the next call reconnects)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._opened_lock:
                self._opened = [(pid, c) for pid, c in self._opened if c is not conn]
            try:
                conn.close()
            except psycopg.Error:
                pass  # broken already

    def close(self) -> None:
        """Close every connection this process opened. Those a forked child inherited are left
        alone: closing one would end its parent's session."""
        self._local.conn = None
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for pid, conn in opened:
            if pid == os.getpid():
                try:
                    conn.close()
                except psycopg.Error:
                    pass  # broken already
