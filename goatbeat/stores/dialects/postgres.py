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

Every operation is :class:`~goatbeat.stores.store.DialectStore`'s; this module answers its
primitives (:mod:`goatbeat.stores.dialect`) with the named queries of
``sql/postgres/queries.sql``, each over arrays in one statement.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from goatbeat.core.bounded import BoundedCall, CallTimedOut, Watchdog, shutdown_socket
from goatbeat.core.errors import StoreError
from goatbeat.core.health import SchedulerBeat
from goatbeat.core.model import ExecutionStatus, LeaseGrant, Miss, SubmitOutcome
from goatbeat.core.observability import log_event
from goatbeat.core.shards import Shard
from goatbeat.core.store import NOTIFY_CHANNEL
from goatbeat.stores import schema
from goatbeat.stores.definitions import definition_json
from goatbeat.stores.dialect import (
    Advanced,
    ClaimCheck,
    Completion,
    NameTaken,
    NewExecution,
    Replace,
    RolledBack,
    heartbeat_columns,
    validate_payload,
)

__all__ = ["PostgresDialect", "ConnectionProvider", "DsnConnectionProvider", "FREEZE_ENV"]

FREEZE_ENV = "GOATBEAT_FREEZE_IN_CLAIM"
"""Test hook: SIGSTOP inside the n-th claim transaction that advanced a schedule."""

_JSON_COLUMNS = frozenset({"trigger", "args", "kwargs", "headers"})
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


def _unless_all(values: list[Any], usual: Any) -> list[Any]:
    """``values``, or an empty array when every one is ``usual``: the claim's statements read
    the NULLs unnest pads it with as that value (see claim_advance in queries.sql)."""
    for value in values:
        if value is not usual and value != usual:
            return values
    return []


def _last_statuses(values: list[str | None]) -> dict[str, Any]:
    """claim_advance's last_status parameters: one value for the batch when all are the same
    status, else the array."""
    first = values[0] if values else None
    if first is not None and all(v == first for v in values):
        return {"last_status": [], "last_status_all": first}
    return {"last_status": values, "last_status_all": None}


def _params(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: Jsonb(v) if k in _JSON_COLUMNS else v for k, v in row.items()}


_COPY_COLUMNS = (
    "name", "source", "task", "trigger", "timezone", "args", "kwargs", "queue", "exchange",
    "routing_key", "priority", "expires", "headers", "misfire_policy", "misfire_grace",
    "catch_up_limit", "one_off", "enabled", "start_at", "end_at", "next_run_at", "last_run_at",
    "total_run_count", "description", "published_fingerprint", "jitter", "overlap",
    "max_runtime", "pause_on_failure",
)  # fmt: skip
"""The columns of ``schedule_copy``, in its order."""


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
    def session(self) -> Iterator[_Tx]:
        with self.connection() as conn:
            yield _Tx(self, conn, in_transaction=False)

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        with self.connection() as conn, conn.transaction() as tx:
            # Our own transaction, not a savepoint in a caller's (Django's connection).
            yield _Tx(self, conn, in_transaction=True, own=not tx.savepoint_name)

    def claim(self) -> Any:
        return self.transaction()  # the lease row FOR SHARE from the first read on

    @contextmanager
    def snapshot(self) -> Iterator[_Tx]:
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


class _Tx:
    """The primitives on one connection: each one statement (a few for a batch without
    arrays), in the caller's transaction or, outside one, autocommit."""

    def __init__(
        self,
        dialect: PostgresDialect,
        conn: psycopg.Connection[Any],
        *,
        in_transaction: bool,
        own: bool = True,
    ) -> None:
        self.d = dialect
        self.q = dialect.q
        self.conn = conn
        self.in_transaction = in_transaction
        self.own = own
        self._compares: list[tuple[psycopg.Cursor[Any], set[str]]] = []
        self._pipelined = False

    def _fetch(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.d.fetch(self.conn, name, params)

    def _one(self, name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._fetch(name, params)
        return rows[0] if rows else None

    def _count(self, name: str, params: Mapping[str, Any]) -> int:
        """Run ``name`` for the rows it changes (any rows it returns are left unread)."""
        with psycopg.Cursor(self.conn) as cur:
            cur.execute(self.q[name], params)
            return max(0, cur.rowcount)

    def _atomic(self) -> Any:
        """Several statements as one: a transaction of their own outside the caller's."""
        return nullcontext() if self.in_transaction else self.conn.transaction()

    def now(self) -> datetime:
        row = self._one("now")
        assert row is not None
        return row["now"].astimezone(UTC)  # type: ignore[no-any-return]

    def notify(self, payload: str) -> None:
        # Inside a transaction the notification goes out at commit, with the change.
        self.conn.execute(self.q["notify"], {"payload": payload})

    # -- schedules -------------------------------------------------------------------------

    def schedule(self, name: str) -> dict[str, Any] | None:
        return self._one("schedule_by_name", {"name": name})

    def schedules(self, source: str | None) -> list[dict[str, Any]]:
        return self._fetch("list_schedules", {"source": source})

    def schedules_named(self, names: Sequence[str]) -> list[dict[str, Any]]:
        return self._fetch("schedules_by_names", {"names": list(names)})

    def source_has_rows(self, source: str) -> bool:
        return bool(self._fetch("source_has_rows", {"source": source}))

    @contextmanager
    def comparing(self) -> Iterator[None]:
        # The comparisons are pipelined: the database compares one chunk while the store
        # validates the next.
        self._pipelined = psycopg.Pipeline.is_supported()
        with self.conn.pipeline() if self._pipelined else nullcontext():
            try:
                yield
                self._collect()
            finally:
                for cur, _ in self._compares:
                    cur.close()
                self._compares.clear()

    def unchanged(
        self, declared: Sequence[Sequence[Any]], shared: Sequence[Sequence[Any]], source: str
    ) -> Collection[str] | None:
        """``publish_unchanged`` for one chunk: the declarations as JSON (each one's own
        columns; the columns they share once per distinct combination), names back only."""
        answer: set[str] = set()
        cur = psycopg.Cursor(self.conn)
        self._compares.append((cur, answer))
        cur.execute(
            self.q["publish_unchanged"],
            {
                "declared": json.dumps(declared, separators=(",", ":")),
                "shared": definition_json(shared),
                "source": source,
            },
        )
        if not self._pipelined:
            self._collect()
        return answer

    def _collect(self) -> None:
        while self._compares:
            cur, answer = self._compares.pop(0)
            with cur:
                answer.update(row[0] for row in cur.fetchall())

    def orphans(self, source: str, declared: Sequence[str]) -> list[str]:
        rows = self._fetch("orphans", {"source": source, "names": json.dumps(list(declared))})
        return [r["name"] for r in rows]

    def lock_publication(self) -> None:
        self.conn.execute(self.q["publish_lock"])

    def current_publication(self) -> dict[str, Any] | None:
        found = self._one("publication_current")
        if found is not None:
            found["published_at"] = found["published_at"].astimezone(UTC)
        return found

    def publication_generation(self, fingerprint: str) -> int | None:
        row = self._one("publication_generation_of", {"fingerprint": fingerprint})
        return None if row is None or row["generation"] is None else int(row["generation"])

    def record_publication(self, fingerprint: str, release: int | None, schedules: int) -> int:
        params = {"fingerprint": fingerprint, "release": release, "schedules": schedules}
        row = self._one("publication_record", params)
        assert row is not None
        return int(row["generation"])

    def rename_schedule(self, id: int, version: int, new_name: str) -> int:
        params = {"id": id, "version": version, "new_name": new_name}
        written = self._count("schedule_rename", params)
        if written:
            self._count("schedule_rename_history", {"id": id, "new_name": new_name})
            self._count("schedule_rename_misses", {"id": id, "new_name": new_name})
        return written

    def insert_schedules(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert new rows with one COPY (``schedule_copy``), not one statement each."""
        texts: dict[int, tuple[Any, str]] = {}

        def as_json(column: str, value: Any) -> str:
            # JSON text for a jsonb column (COPY parses it): a trigger spec, shared by the rows
            # of one trigger object, is encoded once; an empty value never.
            if not value:
                return "[]" if isinstance(value, list) else "{}"
            if column != "trigger":
                return json.dumps(value)
            known = texts.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            text = json.dumps(value)
            texts[id(value)] = (value, text)
            return text

        with psycopg.Cursor(self.conn) as cur, cur.copy(self.q["schedule_copy"]) as copy:
            for row in rows:
                copy.write_row(
                    [
                        as_json(column, row[column]) if column in _JSON_COLUMNS else row[column]
                        for column in _COPY_COLUMNS
                    ]
                )

    def create_schedule(self, row: Mapping[str, Any]) -> dict[str, Any]:
        try:
            stored = self._one("schedule_insert", _params(row))
        except pg_errors.UniqueViolation as exc:
            raise NameTaken(f"postgres: {exc}") from exc
        assert stored is not None
        return stored

    def replace_schedules(self, replaces: Sequence[Replace]) -> int:
        params = []
        for rep in replaces:
            p = _params(rep.values)
            p.update(id=rep.id, version=rep.version)
            params.append(p)
        with psycopg.Cursor(self.conn) as cur:
            cur.executemany(self.q["schedule_replace"], params)
            return max(0, cur.rowcount)

    def set_fingerprints(self, pairs: Sequence[tuple[int, str]]) -> None:
        with psycopg.Cursor(self.conn) as cur:
            cur.executemany(
                self.q["schedule_set_fingerprint"],
                [{"id": sid, "published_fingerprint": printed} for sid, printed in pairs],
            )

    def set_enabled(self, id: int, version: int, values: Mapping[str, Any]) -> int:
        return self._count("schedule_set_enabled", {**values, "id": id, "version": version})

    def prune(self, source: str, keep: Collection[str]) -> list[str]:
        rows = self._fetch("prune", {"source": source, "keep": sorted(keep)})
        return [r["name"] for r in rows]

    def withdraw_waiting(self, schedule_id: int, error: str) -> int:
        return self._count("pause_withdraw", {"id": schedule_id, "error": error})

    def pause(self, schedule_id: int, values: Mapping[str, Any], withdrawn: int) -> None:
        self._count("pause", {**values, "id": schedule_id, "withdrawn": withdrawn})

    def resume(self, id: int, version: int, next_run_at: datetime | None, skipped: int) -> int:
        params = {
            "id": id,
            "version": version,
            "next_run_at": next_run_at,
            "skipped_count": skipped,
        }
        return self._count("resume", params)

    def delete_schedule(self, schedule_id: int, error: str) -> None:
        with self._atomic():
            self._count("abandon_claimed", {"id": schedule_id, "error": error})
            self._count("schedule_delete", {"id": schedule_id})

    def execution_statuses(self, keys: Sequence[str]) -> dict[str, str]:
        rows = self._fetch("backfill_existing", {"keys": list(keys)})
        return {r["idempotency_key"]: str(r["status"]) for r in rows}

    def insert_backfill(
        self, schedule_id: int, name: str, instants: Sequence[datetime], keys: Sequence[str]
    ) -> set[datetime]:
        written = self._fetch(
            "backfill_insert",
            {
                "schedule_id": schedule_id,
                "name": name,
                "instants": list(instants),
                "keys": list(keys),
            },
        )
        return {r["scheduled_at"].astimezone(UTC) for r in written}

    def request_run(
        self, schedule_id: int, name: str, at: datetime, key: str
    ) -> dict[str, Any] | None:
        params = {"schedule_id": schedule_id, "name": name, "at": at, "key": key}
        return self._one("request_run", params)

    def executions(self, name: str | None, status: str | None, limit: int) -> list[dict[str, Any]]:
        # Four spellings rather than "param IS NULL OR ...", so each one gets an index plan.
        query = "executions"
        if name is not None:
            query = "executions_by_name_status" if status is not None else "executions_by_name"
        elif status is not None:
            query = "executions_by_status"
        params: dict[str, Any] = {"limit": limit}
        if name is not None:
            params["name"] = name
        if status is not None:
            params["status"] = status
        return self._fetch(query, params)

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        row = self._one("lease_acquire", {"name": name, "holder": holder, "ttl": ttl})
        if row is None:
            return None
        return LeaseGrant(
            name=row["name"],
            holder=row["holder"],
            token=int(row["token"]),
            expires_at=row["expires_at"].astimezone(UTC),
        )

    def release_lease(self, name: str, holder: str, token: int, payload: str | None) -> bool:
        params = {"name": name, "holder": holder, "token": token, "payload": payload}
        return self._one("lease_release", params) is not None

    def _leases(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in rows:
            r["expires_at"] = r["expires_at"].astimezone(UTC)
            r["expired"] = bool(r["expired"])
        return rows

    def read_leases(self, names: Sequence[str]) -> list[dict[str, Any]]:
        return self._leases(self._fetch("lease_read_many", {"names": list(names)}))

    def scheduler_leases(self) -> list[dict[str, Any]]:
        return self._leases(self._fetch("leases_like"))

    # -- claiming --------------------------------------------------------------------------

    def check_lease(self, lease: LeaseGrant) -> ClaimCheck | None:
        check = self._one(
            "claim_check_lease",
            {
                "name": lease.name,
                "holder": lease.holder,
                "token": lease.token,
                # Only a transaction of our own may be capped by the check (see the query).
                "own": self.own,
            },
        )
        if check is None:
            return None
        return ClaimCheck(now=check["now"].astimezone(UTC), buffered=bool(check["buffered"]))

    def due(self, now: datetime, limit: int, shard: Shard) -> list[dict[str, Any]]:
        return self._fetch("claim_select_due", {"now": now, "limit": limit, **_shard(shard)})

    @contextmanager
    def recording(self, outcomes: Sequence[SubmitOutcome]) -> Iterator[None]:
        """Write ``outcomes`` (record_outcomes' statement, in the open transaction) while the
        block runs. In pipeline mode the statement goes out at once and the block's work (the
        store decoding the due rows) overlaps the server's; leaving the block waits for the
        write and raises its error."""
        query, params = _record_statement(outcomes)
        with psycopg.Cursor(self.conn) as cur:
            if not psycopg.Pipeline.is_supported():
                cur.execute(query, params)
                yield
                return
            with self.conn.pipeline():
                cur.execute(query, params)
                yield

    def begin_writes(self, lease: LeaseGrant) -> bool:
        return True  # the lease row is held FOR SHARE since check_lease

    def quarantine(self, damaged: Sequence[tuple[int, int]], status: str) -> set[int]:
        rows = self._fetch(
            "claim_quarantine",
            {"ids": [i for i, _ in damaged], "versions": [v for _, v in damaged], "status": status},
        )
        return {int(r["id"]) for r in rows}

    def advance(self, advances: Sequence[Advanced], lease: LeaseGrant) -> set[int]:
        rows = self._fetch(
            "claim_advance",
            {
                "ids": [a.id for a in advances],
                "versions": [a.version for a in advances],
                "next_run_at": [a.next_run_at for a in advances],
                "last_run_at": [a.last_run_at for a in advances],
                **_last_statuses([a.last_status for a in advances]),
                "runs": _unless_all([a.runs for a in advances], 1),
                "missed": _unless_all([a.missed for a in advances], 0),
                "skipped": _unless_all([a.skipped for a in advances], 0),
                "disable": _unless_all([a.disable for a in advances], False),
            },
        )
        advanced = {int(r["id"]) for r in rows}
        if advanced:
            self.d.maybe_freeze(lease)
        return advanced

    def insert_executions(
        self, executions: Sequence[NewExecution], token: int, scheduler_id: str
    ) -> dict[str, int]:
        rows = self._fetch(
            "claim_insert_executions",
            {
                "token": token,
                "scheduler_id": scheduler_id,
                "schedule_ids": [e.schedule_id for e in executions],
                "names": [e.schedule_name for e in executions],
                "scheduled_at": [e.scheduled_at for e in executions],
                "keys": [e.key for e in executions],
                "statuses": _unless_all(
                    [e.status for e in executions], ExecutionStatus.CLAIMED.value
                ),
                "retry_at": _unless_all([e.retry_at for e in executions], None),
            },
        )
        return {r["idempotency_key"]: int(r["id"]) for r in rows}

    def started_runs(self, runs: Mapping[int, int]) -> None:
        self._count("started_runs", {"ids": list(runs), "execution_ids": list(runs.values())})

    def buffered_runs(self, shard: Shard) -> list[dict[str, Any]]:
        return self._fetch("buffered_runs", _shard(shard))

    def promote(self, ids: Sequence[int], token: int, scheduler_id: str) -> list[dict[str, Any]]:
        params = {"ids": list(ids), "token": token, "scheduler_id": scheduler_id}
        return self._fetch("promote_buffered", params)

    def abandon(self, failed: Sequence[tuple[int, str]]) -> None:
        params = {"ids": [i for i, _ in failed], "errors": [e for _, e in failed]}
        self._count("abandon_damaged", params)

    def next_due_at(self, shard: Shard) -> datetime | None:
        row = self._one("next_due_at", _shard(shard))
        value = None if row is None else row["next_due_at"]
        return None if value is None else value.astimezone(UTC)

    def pending(self, limit: int, exclude: Sequence[int], shard: Shard) -> list[dict[str, Any]]:
        return self._fetch("pending", {"limit": limit, "exclude": list(exclude), **_shard(shard)})

    def next_retry_at(self, shard: Shard) -> datetime | None:
        row = self._one("next_retry_at", _shard(shard))
        at = None if row is None else row["at"]
        return None if at is None else at.astimezone(UTC)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        query, params = _record_statement(outcomes)
        with psycopg.Cursor(self.conn) as cur:
            cur.execute(query, params)

    def refuse(self, schedule_id: int, task: str, reason: str) -> bool:
        row = self._one("refuse", {"id": schedule_id, "task": task, "reason": reason})
        return row is not None and int(row["matched"]) > 0

    def claim_manual_runs(
        self, lease: LeaseGrant, scheduler_id: str, ids: Sequence[int], shard: Shard
    ) -> list[int]:
        with self._atomic():
            rows = self._fetch(
                "claim_manual_runs",
                {
                    "name": lease.name,
                    "holder": lease.holder,
                    "token": lease.token,
                    "scheduler_id": scheduler_id,
                    "ids": list(ids),
                    **_shard(shard),
                },
            )
        return [int(r["id"]) for r in rows]

    # -- reports and operations --------------------------------------------------------------

    def record_started(self, key: str, worker: str | None) -> bool:
        row = self._one("record_started", {"key": key, "worker": worker})
        return row is not None and int(row["matched"]) > 0

    def record_completion(
        self,
        key: str,
        outcome: str,
        error: str | None,
        runtime: float | None,
        worker: str | None,
        only_open: bool = False,
    ) -> Completion:
        row = self._one(
            "record_completion",
            {
                "key": key,
                "outcome": outcome,
                "error": error,
                "runtime": runtime,
                "worker": worker,
                "only_open": only_open,
            },
        )
        if row is None:
            return Completion(matched=False)
        pause = None
        if row["pause_name"] is not None:  # the pause_on_failure rule, applied in the query
            pause = (str(row["pause_name"]), int(row["failures"]))
        return Completion(matched=int(row["matched"]) > 0, pause=pause)

    def open_runs(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        started = self._fetch("open_runs_started", {"limit": limit})
        return started + self._fetch("open_runs_submitted", {"since": since, "limit": limit})

    def retry_now(self) -> int:
        return self._count("retry_now", {})

    def refused_schedules(self) -> list[dict[str, Any]]:
        return self._fetch("refused_schedules")

    def refusals(self, name: str | None, limit: int | None) -> list[dict[str, Any]]:
        query = "refusals" if name is None else "refusal_named"
        rows = self._fetch(query, {"name": name, "limit": limit})
        for row in rows:
            if row["refused_at"] is not None:
                row["refused_at"] = row["refused_at"].astimezone(UTC)
        return rows

    def longest_bound(self) -> float:
        row = self._one("longest_bound")
        return float(row["seconds"] or 0) if row is not None else 0.0

    def heartbeat(self, beat: SchedulerBeat, retention: timedelta) -> None:
        with self._atomic():
            self._fetch("heartbeat", {**heartbeat_columns(beat), "ttl": beat.ttl})
            self._fetch("scheduler_cleanup", {"retention": retention})

    def remove_scheduler(self, scheduler_id: str) -> None:
        self._fetch("scheduler_remove", {"scheduler_id": scheduler_id})

    def record_misses(
        self, misses: Sequence[Miss], scheduler_id: str, retention: timedelta
    ) -> None:
        with self._atomic(), psycopg.Cursor(self.conn) as cur:
            # Misses are rare (an outage, a long pause): a statement per schedule is plenty.
            cur.executemany(
                self.q["record_miss"],
                [
                    {
                        "schedule_id": m.schedule_id,
                        "schedule_name": m.schedule_name,
                        "missed": m.count,
                        "first_at": m.first_at,
                        "last_at": m.last_at,
                        "scheduler_id": scheduler_id,
                    }
                    for m in misses
                ],
            )
            cur.execute(self.q["miss_prune"], {"retention": retention})

    def status_counts(self, now: datetime, since: datetime) -> dict[str, int]:
        row = self._one("status_counts", {"now": now, "since": since})
        assert row is not None
        return {k: int(v) for k, v in row.items()}

    def status_oldest(self, now: datetime) -> dict[str, Any] | None:
        row = self._one("status_oldest", {"now": now})
        if row is not None:
            row["at"] = row["at"].astimezone(UTC)
        return row

    def schedulers(self) -> list[dict[str, Any]]:
        return self._fetch("schedulers")

    def schedule_health(self, late: datetime, limit: int | None) -> list[dict[str, Any]]:
        return self._fetch("schedule_health", {"late": late, "limit": limit})

    def live_schedulers(self, within: timedelta, shards: int) -> list[str]:
        rows = self._fetch("live_schedulers", {"within": within, "shards": shards})
        return [str(r["scheduler_id"]) for r in rows]


def _shard(shard: Shard) -> dict[str, Any]:
    """The shard filter's parameters: the count and the OTHER shards (see queries.sql)."""
    others = [i for i in range(shard.count) if i != shard.index]
    return {"shards": shard.count, "others": others}


def _record_statement(outcomes: Sequence[SubmitOutcome]) -> tuple[str, dict[str, Any]]:
    """record_outcomes' statement and parameters: the lean one when all are successes."""
    q = schema.queries("postgres")
    if all(o.ok for o in outcomes):
        return q["record_submitted"], {
            "ids": [o.execution_id for o in outcomes],
            "backend_task_ids": [o.backend_task_id for o in outcomes],
        }
    return q["record_outcomes"], {
        "ids": [o.execution_id for o in outcomes],
        "ok": [bool(o.ok) for o in outcomes],
        "final": [bool(o.final) for o in outcomes],
        "missed": [bool(o.missed) for o in outcomes],
        "retry_in": [None if o.retry_in is None else max(0.0, float(o.retry_in)) for o in outcomes],
        "backend_task_ids": [o.backend_task_id for o in outcomes],
        "errors": [o.error for o in outcomes],
    }
