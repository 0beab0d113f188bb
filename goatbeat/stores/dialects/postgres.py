"""The PostgreSQL dialect: PostgresStore's database, on psycopg 3.

One connection, in autocommit mode, reused for everything and replaced only after an error
(an ``OperationalError`` discards it and raises ``StoreError``; the next call reconnects).
Multi-statement work runs in explicit ``conn.transaction()`` blocks, so the same SQL also runs
on a connection somebody else opened (Django's, through a :class:`ConnectionProvider`).

Every instant that coordinates schedulers comes from the DATABASE clock (``now()``): lease
expiry, lease checks, and due-ness unless the caller passes ``now``. From its first
:meth:`PostgresStore.wait` on, the store LISTENs on :data:`~goatbeat.core.store.NOTIFY_CHANNEL`
on its connection, and ``wait`` returns as soon as a notification arrives.

Behind a transaction-pooling proxy (PgBouncer ``pool_mode = transaction``) consecutive
transactions, and autocommit statements, may run on different server connections, so nothing
here leaves state in a session: statements are never prepared server-side (the default
provider connects with ``prepare_threshold=None``, pooled or not: bench_claim's store loop
shows no measurable difference, about 9,500 claims/s either way, and an idle iteration costs
the server a millisecond or two more of planning), every setting is transaction-local
(``set_config(..., true)``, ``SET TRANSACTION``), locks are row locks or
``pg_advisory_xact_lock``, and no cursor outlives its transaction. LISTEN is the one thing
that needs a session: with ``pooled=True`` the store never LISTENs on its connection; it
LISTENs on ``listen_database`` (a direct connection of its own, used for nothing else) when one
is given, and otherwise ``wait`` polls: it returns True every ``poll_interval`` (logged once,
``store.polling``), so the scheduler's iteration reads whatever a notification would have
announced. A listen connection that fails raises StoreError once, then ``wait`` polls for
30 s before it connects again. NOTIFY works through the proxy (it is sent at commit) and
always goes there.

A claim batch is a fixed number of statements whatever its size: lease check (``FOR SHARE``),
due select (index walk, no row locks), one compare-and-set UPDATE over arrays, one INSERT of
the executions over arrays.

A frozen process cannot hold a standby up. The claim transaction is the only one the
scheduler keeps open across round trips while it holds locks another scheduler needs (the
lease row ``FOR SHARE``, which a takeover waits for: that wait is the fencing guarantee; the
advanced schedules' rows). Its lease check caps it, by the database clock, at what is left of
the lease (at least a second): ``statement_timeout`` for every later statement and
``idle_in_transaction_session_timeout`` for every silence of the client, as ``SET LOCAL``. A
process frozen inside it (GC pause, SIGSTOP, VM migration, lost network) is disconnected by the
server about when its lease expires, its claim rolls back and its locks go; the standby waiting
on the lease row proceeds at once. Every other lease statement is a single autocommit
statement, which the server finishes without the client.

Test hook (fault injection only): with the environment variable ``GOATBEAT_FREEZE_IN_CLAIM=<n>``
the process stops itself (``SIGSTOP``) inside its n-th claim transaction that advanced a
schedule, right after the compare-and-set: the lease row is held ``FOR SHARE`` and the advanced
schedules are row-locked, as a leader frozen by a GC pause or a VM migration would hold them.

Every operation is :class:`~goatbeat.stores.store.DialectStore`'s; this module keeps the
connections, and :mod:`goatbeat.stores.dialects.postgres_tx` answers its primitives
(:mod:`goatbeat.stores.dialect`) with the named queries of ``sql/postgres/queries.sql``, each
over arrays in one statement.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from goatbeat.core.bounded import BoundedCall, CallTimedOut, Watchdog, shutdown_socket
from goatbeat.core.errors import StoreError
from goatbeat.core.model import LeaseGrant
from goatbeat.core.observability import log_event
from goatbeat.core.store import NOTIFY_CHANNEL
from goatbeat.stores import schema
from goatbeat.stores.dialect import RolledBack, validate_payload
from goatbeat.stores.dialects.postgres_tx import PostgresTx

__all__ = ["PostgresDialect", "ConnectionProvider", "DsnConnectionProvider", "FREEZE_ENV"]

FREEZE_ENV = "GOATBEAT_FREEZE_IN_CLAIM"
"""Test hook: SIGSTOP inside the n-th claim transaction that advanced a schedule."""

_WAIT_SLICE = 0.5  # wait() gives the connection back to other threads this often
_LISTEN_RETRY = 30.0  # after the listen connection failed, poll this long before reconnecting
_CLAIM_ATTEMPTS = 3  # a deadlock or serialization failure rolls the batch back: try again
_ROLLED_BACK = (
    pg_errors.TransactionRollback,
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
)


@runtime_checkable
class ConnectionProvider(Protocol):
    """Where PostgresStore gets its connection. The connection must be in autocommit mode
    (the store opens its own transactions)."""

    def get(self) -> psycopg.Connection[Any]:
        """The connection to use now; open a new one if the previous one was discarded."""
        ...

    def discard(self) -> None:
        """Drop the current connection (it failed); the next ``get()`` must give a fresh one."""
        ...


class DsnConnectionProvider:
    """The default provider: one psycopg connection opened from a DSN, on demand."""

    def __init__(
        self, dsn: str, *, connect_timeout: float = 10.0, application_name: str = "goatbeat"
    ) -> None:
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self._conn: psycopg.Connection[Any] | None = None
        self.io_timeout: float | None = None
        """How long :meth:`get` waits for a new connection; None: as long as libpq takes."""
        self._connecting: BoundedCall | None = None

    def bound_calls(self, seconds: float) -> None:
        """Wait at most ``seconds`` for a connection (DNS lookups and every host of a
        multi-host URL included): the attempt runs in a thread of its own, and one that
        outlives the bound keeps going there; the next :meth:`get` takes its connection, or
        waits for it again, rather than start another (:class:`~goatbeat.core.bounded.BoundedCall`)."""
        self.io_timeout = seconds
        if self._connecting is None:
            self._connecting = BoundedCall(
                "postgres connect", keep_late=True, on_late=_close_quietly
            )

    def get(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                self.discard()
            if self._connecting is not None and self.io_timeout is not None:
                conn = self._connecting.call(self._connect, self.io_timeout)
            else:
                conn = self._connect()
            self._conn = conn
        return conn

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            # No server-side prepared statements: they are session state, which a
            # transaction-pooling proxy (PgBouncer < 1.21) does not keep.
            prepare_threshold=None,
            connect_timeout=max(1, int(self.connect_timeout)),
            application_name=self.application_name,
            # A partitioned or vanished server is noticed in about half a minute instead
            # of the kernel's two hours, so the loop can back off and reconnect.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=30_000,
        )

    def discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


def _close_quietly(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.close()
    except psycopg.Error:
        pass  # it is already broken; closing is best effort


class PostgresDialect:
    """PostgreSQL, on one psycopg connection from a :class:`ConnectionProvider` (and a listen
    connection of its own behind a pooling proxy): the module docstring says how."""

    kind = "postgres"
    supports_shards = True
    records_in_claim = True
    compares_publications = True
    claim_attempts = _CLAIM_ATTEMPTS

    def __init__(
        self,
        provider: ConnectionProvider,
        *,
        listen_provider: ConnectionProvider | None = None,
        pooled: bool = False,
        poll_interval: float = 1.0,
    ) -> None:
        self.provider = provider
        self.listen_provider = listen_provider
        """The direct connection wake-ups LISTEN on, when the main one is pooled."""
        self.pooled = pooled or listen_provider is not None
        self.poll_interval = float(poll_interval)
        self.last_payload: str | None = None
        """The last valid payload wait() saw (for logs); invalid ones are plain wake-ups."""
        self.q = schema.queries("postgres")
        self.lock = threading.RLock()
        self.listen_retry_at: float | None = None
        self._listen_lock = threading.Lock()
        self._next_poll: float | None = None
        self._polling_logged = False
        self._listening: psycopg.Connection[Any] | None = None
        freeze = os.environ.get(FREEZE_ENV, "").strip()
        self._freeze_at = int(freeze) if freeze.isdigit() else 0
        self._advancing_claims = 0
        self.io_timeout: float | None = None
        """The bound of every wait for the server (:meth:`bound_calls`); None: unbounded."""
        self._watchdog = Watchdog("postgres")
        self._identity_unknown_logged = False
        self._depth = 0

    # -- plumbing --------------------------------------------------------------------------

    def bound_calls(self, seconds: float) -> None:
        """Bound every wait for the server at ``seconds`` (the scheduler's
        :func:`~goatbeat.core.bounded.io_timeout`): a use of the connection (a statement,
        a transaction of a few) that gets no answer in time has its socket shut down by a
        watchdog, is logged ``io.timeout`` and fails as a StoreError; a new connection is
        waited for as long (the provider's own ``bound_calls``, when it has one)."""
        self.io_timeout = seconds
        self.bound_connects(seconds)

    def bound_connects(self, seconds: float) -> None:
        """Wait at most ``seconds`` for a new connection (the provider's ``bound_calls``, when
        it has one), statements left as they are: the scheduler bounds its connections from
        the start, its statements once the start-up publication (whose COPY may take longer)
        is done."""
        provider_bound = getattr(self.provider, "bound_calls", None)
        if callable(provider_bound):
            provider_bound(seconds)

    @contextmanager
    def connection(self, *, silence: float = 0.0) -> Iterator[psycopg.Connection[Any]]:
        """The connection under the store lock; connection failures discard it and become
        StoreError so the next call starts afresh. Once :meth:`bound_calls` was called, the
        whole use is bounded (``silence``: how long the caller itself waits for nothing, a
        LISTEN's slice, on top of the bound)."""
        with self.lock:
            outer = self._depth == 0
            self._depth += 1
            cut = False
            bound = self.io_timeout if outer else None
            try:
                try:
                    conn = self.provider.get()
                except CallTimedOut as exc:
                    raise StoreError(f"postgres: {exc}") from exc
                if bound is None:
                    yield conn
                    return
                self._watchdog.arm(bound + silence, lambda: shutdown_socket(conn.fileno()))
                try:
                    yield conn
                finally:
                    cut = self._watchdog.disarm()
                if cut:  # cut just as it ended: the socket is shut, the connection useless
                    self._listening = None
                    self.provider.discard()
            except _ROLLED_BACK as exc:
                raise RolledBack(f"postgres: {exc}") from exc
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._listening = None
                self.provider.discard()
                if cut and bound is not None:
                    log_event(
                        "io.timeout",
                        level=logging.ERROR,
                        what="postgres statement",
                        timeout=round(bound + silence, 3),
                    )
                    raise StoreError(
                        f"postgres: no answer within {bound + silence:.3g}s (the server may be "
                        "frozen, partitioned or gone); connection closed"
                    ) from exc
                raise StoreError(f"postgres: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"postgres: {exc}") from exc
            finally:
                self._depth -= 1

    @contextmanager
    def session(self) -> Iterator[PostgresTx]:
        with self.connection() as conn:
            yield PostgresTx(self, conn, in_transaction=False)

    @contextmanager
    def transaction(self) -> Iterator[PostgresTx]:
        with self.connection() as conn, conn.transaction() as tx:
            # Our own transaction, not a savepoint in a caller's (Django's connection).
            yield PostgresTx(self, conn, in_transaction=True, own=not tx.savepoint_name)

    def claim(self) -> Any:
        return self.transaction()  # the lease row FOR SHARE from the first read on

    @contextmanager
    def snapshot(self) -> Iterator[PostgresTx]:
        with self.transaction() as tx:
            tx.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield tx

    def fetch(
        self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        # An explicit server-binding cursor: a connection lent by Django may default to
        # client-side binding, which cannot send the binary arrays the claim uses.
        with psycopg.Cursor(conn, row_factory=dict_row) as cur:
            cur.execute(self.q[name], params)
            return cur.fetchall() if cur.description is not None else []

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        # Only a store that waits LISTENs: notifications to a connection nobody reads pile up
        # in psycopg's backlog (a Django web process serving the admin never waits). A new
        # connection (first wait, or after a failure) must LISTEN again.
        if conn is not self._listening:
            conn.execute(self.q["listen"])
            self._listening = conn

    def maybe_freeze(self, lease: LeaseGrant) -> None:
        """The test hook of the module docstring."""
        if not self._freeze_at:
            return
        self._advancing_claims += 1
        if self._advancing_claims != self._freeze_at:
            return
        log_event(
            "store.frozen",
            scheduler_id=lease.holder,
            fencing_token=lease.token,
            monotonic=time.monotonic(),
        )
        os.kill(os.getpid(), signal.SIGSTOP)

    # -- lifecycle -------------------------------------------------------------------------

    def migrate(self) -> None:
        with self.connection() as conn, conn.transaction():
            conn.execute(self.q["migrate_lock"])
            conn.execute(schema.version_table_sql("postgres"))
            applied = {int(r["version"]) for r in self.fetch(conn, "applied_versions")}
            for version in schema.migration_versions("postgres"):
                if version not in applied:
                    conn.execute(schema.postgres_migration_sql(version))

    def close(self) -> None:
        with self.lock:
            self._listening = None
            self.provider.discard()
        if self.listen_provider is not None:
            with self._listen_lock:
                self._listening = None
                self.listen_provider.discard()

    def now(self) -> datetime:
        with self.session() as tx:
            return tx.now()

    def identity(self) -> tuple[str, int] | None:
        """(system identifier, timeline) of the server, or None when it cannot say (a
        standby, a role without access to ``pg_control_system()``: logged once)."""
        with self.connection() as conn:
            try:
                with conn.transaction():
                    rows = self.fetch(conn, "database_identity")
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as exc:
                if not self._identity_unknown_logged:
                    self._identity_unknown_logged = True
                    log_event(
                        "store.identity_unknown",
                        level=logging.WARNING,
                        error=str(exc).strip(),
                        detail="a promotion or a restored database cannot be detected",
                    )
                return None
        if not rows:
            return None
        return str(rows[0]["system_identifier"]), int(rows[0]["timeline"])

    def info(self) -> dict[str, Any]:
        with self.connection() as conn:
            try:
                with conn.transaction():
                    versions = [int(r["version"]) for r in self.fetch(conn, "applied_versions")]
            except pg_errors.UndefinedTable:
                versions = []
            info: dict[str, Any] = {
                "kind": "postgres",
                "database": f"{conn.info.dbname}@{conn.info.host}:{conn.info.port}",
                "schema_version": max(versions, default=0),
            }
        if self.pooled:  # how wake-ups arrive, for the scheduler.started log line
            info["pooled"] = True
            info["wake_ups"] = (
                "listen_database"
                if self.listen_provider is not None
                else f"polling every {self.poll_interval:g}s"
            )
        return info

    # -- wake-ups --------------------------------------------------------------------------

    def wait(self, timeout: float) -> bool:
        if self.listen_provider is not None:
            return self._wait_on_listen_connection(timeout)
        if self.pooled:
            return self._poll(timeout)
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            with self.connection(silence=_WAIT_SLICE) as conn:
                self._listen(conn)
                if self._receive(conn, min(remaining, _WAIT_SLICE)):
                    return True
            if remaining <= 0 or time.monotonic() >= deadline:
                return False

    def _receive(self, conn: psycopg.Connection[Any], timeout: float) -> bool:
        for notification in conn.notifies(timeout=timeout, stop_after=1):
            if notification.channel != NOTIFY_CHANNEL:
                continue
            payload = notification.payload
            self.last_payload = payload if validate_payload(payload) else None
            return True
        return False

    def _wait_on_listen_connection(self, timeout: float) -> bool:
        # The listen connection has a lock of its own: a thread waiting on it never keeps the
        # (pooled) main connection from the others.
        # While the listen database is unreachable the scheduler polls, so wake-ups keep
        # working; it tries to reconnect every _LISTEN_RETRY seconds (each failure is a
        # StoreError, logged by the scheduler), never at every slice of its sleep.
        assert self.listen_provider is not None
        if self.listen_retry_at is not None:
            if time.monotonic() < self.listen_retry_at:
                return self._poll(timeout)
            self.listen_retry_at = None
            self._next_poll = None
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            with self._listen_lock:
                try:
                    conn = self.listen_provider.get()
                    self._listen(conn)
                    if self._receive(conn, min(remaining, _WAIT_SLICE)):
                        return True
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    self._listening = None
                    self.listen_provider.discard()
                    self.listen_retry_at = time.monotonic() + _LISTEN_RETRY
                    raise StoreError(f"postgres (listen_database): {exc}") from exc
                except psycopg.Error as exc:
                    raise StoreError(f"postgres (listen_database): {exc}") from exc
            if remaining <= 0 or time.monotonic() >= deadline:
                return False

    def _poll(self, timeout: float) -> bool:
        """No LISTEN through a pooling proxy: a wake-up every ``poll_interval``, so the
        scheduler's next iteration finds what a notification would have announced."""
        now = time.monotonic()
        if self._next_poll is None:
            # The first wake-up comes at once: whatever happened since the last one (or while
            # the listen connection was failing) is looked for now.
            self._next_poll = now
            if not self._polling_logged and self.listen_provider is None:
                self._polling_logged = True
                log_event(
                    "store.polling",
                    level=logging.INFO,
                    poll_interval=self.poll_interval,
                    reason="pooled database without listen_database: no LISTEN/NOTIFY wake-ups",
                )
        if now >= self._next_poll:
            self._next_poll = now + self.poll_interval
            return True
        wake = min(now + max(0.0, timeout), self._next_poll)
        time.sleep(max(0.0, wake - now))
        if time.monotonic() >= self._next_poll:
            self._next_poll = time.monotonic() + self.poll_interval
            return True
        return False
