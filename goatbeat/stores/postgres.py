"""PostgresStore: the production store, on psycopg 3.

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
It logs ``store.frozen`` (with ``monotonic``, this host's monotonic clock) just before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import (
    ConflictError,
    InvalidSchedule,
    InvalidValue,
    ScheduleNotFound,
    StoreError,
)
from goatbeat.core.health import (
    MISS_RETENTION,
    STALE_RETENTION,
    STATUS_WINDOW,
    LeaseState,
    Outcome,
    ScheduleHealth,
    SchedulerBeat,
    StatusSnapshot,
)
from goatbeat.core.misfire import plan as default_plan
from goatbeat.core.model import (
    SCHEDULE_INVALID,
    ClaimResult,
    DamagedSchedule,
    Execution,
    ExecutionStatus,
    LeaseGrant,
    Miss,
    Occurrence,
    OverlapPolicy,
    Schedule,
    Source,
    StoredSchedule,
    SubmitOutcome,
    idempotency_key,
    manual_key,
)
from goatbeat.core.observability import log_event
from goatbeat.core.shards import ALL, Shard, parse_lease_name
from goatbeat.core.store import NOTIFY_CHANNEL, BackfillResult, PublishResult, ResumeResult
from goatbeat.stores import _operations as ops
from goatbeat.stores import schema
from goatbeat.stores.arguments import check_execution_ids, check_positive, executions_query
from goatbeat.stores.claims import Planner, occurrence_for, plan_batch, run_states
from goatbeat.stores.control import (
    ABANDONED_ERROR,
    PAUSE_WITHDRAWN,
    backfill_instants,
    check_pause,
    pause_after_failures,
    pause_values,
    resume_values,
)
from goatbeat.stores.definitions import (
    Comparison,
    definition_json,
    edited,
    first_run,
    schedule_to_row,
    validate_schedule,
)
from goatbeat.stores.payloads import check_payload, lease_payload, validate_payload
from goatbeat.stores.publication import enabled_values, plan_publish, update_values
from goatbeat.stores.rows import (
    ScheduleCache,
    buffer_ready_at,
    decode_due,
    decode_pending,
    execution_from_row,
    read_schedule,
    schedule_from_row,
)

__all__ = ["PostgresStore", "ConnectionProvider", "DsnConnectionProvider", "FREEZE_ENV"]

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

    def get(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                self.discard()
            conn = psycopg.connect(
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
            self._conn = conn
        return conn

    def discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # it is already broken; closing is best effort


def _shard_params(shard: Shard) -> dict[str, Any]:
    """The shard filter's parameters: the count and the OTHER shards (see queries.sql)."""
    others = [i for i in range(shard.count) if i != shard.index]
    return {"shards": shard.count, "others": others}


class _RetryableStoreError(StoreError):
    """The transaction was rolled back by a deadlock or serialization failure."""


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


_COMPARE_CHUNK = 2500
"""Declarations per ``publish_unchanged`` statement (about 100 KB of JSON each): small enough
that the database starts comparing soon and the last chunk's wait is short (10,000 a chunk
left a 10,000-declaration start waiting for one whole comparison), large enough that the
statements' own cost does not count."""

_COPY_COLUMNS = (
    "name", "source", "task", "trigger", "timezone", "args", "kwargs", "queue", "exchange",
    "routing_key", "priority", "expires", "headers", "misfire_policy", "misfire_grace",
    "catch_up_limit", "one_off", "enabled", "start_at", "end_at", "next_run_at", "last_run_at",
    "total_run_count", "description", "published_fingerprint", "jitter", "overlap",
    "max_runtime", "pause_on_failure",
)  # fmt: skip
"""The columns of ``schedule_copy``, in its order."""


class PostgresStore:
    """A ScheduleStore on PostgreSQL.

    ``PostgresStore("postgresql://...")`` or ``PostgresStore(connection_provider=...)``.
    ``clock`` is accepted for symmetry with the other stores, but coordination never reads it:
    the database's ``now()`` is the only clock that counts here.

    It supports shards (:class:`~goatbeat.core.store.ShardedStore`): a claim under the lease of
    shard K of N touches only that shard's schedules, and ``pending``, ``next_due_at`` and
    ``next_retry_at`` take the shard to look at."""

    supports_shards = True

    def __init__(
        self,
        dsn: str | None = None,
        *,
        connection_provider: ConnectionProvider | None = None,
        clock: Clock | None = None,
        planner: Planner | None = None,
        pooled: bool = False,
        listen_database: str | None = None,
        listen_provider: ConnectionProvider | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        if connection_provider is None:
            if not dsn:
                raise InvalidValue("database", dsn, "PostgresStore needs a DSN or a provider")
            connection_provider = DsnConnectionProvider(dsn)
        # Behind a transaction-pooling proxy: ``pooled=True``, and ``listen_database`` (a
        # direct postgresql:// URL) or ``listen_provider`` for the LISTEN connection; with
        # neither, wait() polls every ``poll_interval`` seconds. A listen database implies
        # ``pooled`` (module docstring).
        if listen_provider is None and listen_database:
            # A short connect timeout: the attempt happens inside the scheduler's sleep.
            listen_provider = DsnConnectionProvider(
                listen_database, connect_timeout=2.0, application_name="goatbeat-listen"
            )
        if not poll_interval > 0:
            raise InvalidValue("poll_interval", poll_interval, "must be above 0 seconds")
        self.dsn = dsn
        self.provider = connection_provider
        self.listen_provider = listen_provider
        """The direct connection wake-ups LISTEN on, when the main one is pooled."""
        self.pooled = pooled or listen_provider is not None
        self.poll_interval = float(poll_interval)
        self._listen_lock = threading.Lock()
        self._listen_retry_at: float | None = None
        self._next_poll: float | None = None
        self._polling_logged = False
        self.clock: Clock = clock or SystemClock()
        self.planner: Planner = planner or default_plan
        self.last_payload: str | None = None
        """The last valid payload wait() saw (for logs); invalid ones are plain wake-ups."""
        self._q = schema.queries("postgres")
        self._lock = threading.RLock()
        self._listening: psycopg.Connection[Any] | None = None
        self._cache = ScheduleCache()
        freeze = os.environ.get(FREEZE_ENV, "").strip()
        self._freeze_at = int(freeze) if freeze.isdigit() else 0
        self._advancing_claims = 0

    # -- plumbing --------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        return self.provider.get()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        # Only a store that waits LISTENs: notifications to a connection nobody reads pile up
        # in psycopg's backlog (a Django web process serving the admin never waits). A new
        # connection (first wait, or after a failure) must LISTEN again.
        if conn is not self._listening:
            conn.execute(self._q["listen"])
            self._listening = conn

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection under the store lock; connection failures discard it and become
        StoreError so the next call starts afresh."""
        with self._lock:
            try:
                yield self._connection()
            except _ROLLED_BACK as exc:
                raise _RetryableStoreError(f"postgres: {exc}") from exc
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._listening = None
                self.provider.discard()
                raise StoreError(f"postgres: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"postgres: {exc}") from exc

    def _fetch(
        self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        # An explicit server-binding cursor: a connection lent by Django may default to
        # client-side binding, which cannot send the binary arrays the claim uses.
        with psycopg.Cursor(conn, row_factory=dict_row) as cur:
            cur.execute(self._q[name], params)
            return cur.fetchall() if cur.description is not None else []

    def _fetch_one(
        self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        rows = self._fetch(conn, name, params)
        return rows[0] if rows else None

    def _notify(self, conn: psycopg.Connection[Any], payload: str) -> None:
        # Inside a transaction the notification goes out at commit, with the change.
        conn.execute(self._q["notify"], {"payload": check_payload(payload)})

    # -- lifecycle -------------------------------------------------------------------------

    def migrate(self) -> None:
        with self._session() as conn, conn.transaction():
            conn.execute(self._q["migrate_lock"])
            conn.execute(schema.version_table_sql("postgres"))
            applied = {int(r["version"]) for r in self._fetch(conn, "applied_versions")}
            for version in schema.migration_versions("postgres"):
                if version not in applied:
                    conn.execute(schema.postgres_migration_sql(version))

    def close(self) -> None:
        with self._lock:
            self._listening = None
            self.provider.discard()
        if self.listen_provider is not None:
            with self._listen_lock:
                self._listening = None
                self.listen_provider.discard()

    def now(self) -> datetime:
        with self._session() as conn:
            row = self._fetch_one(conn, "now")
        assert row is not None
        return row["now"].astimezone(UTC)  # type: ignore[no-any-return]

    def info(self) -> dict[str, Any]:
        with self._session() as conn:
            try:
                with conn.transaction():
                    versions = [int(r["version"]) for r in self._fetch(conn, "applied_versions")]
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

    # -- schedules -------------------------------------------------------------------------

    def _required(self, conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
        row = self._fetch_one(conn, "schedule_by_name", {"name": name})
        if row is None:
            raise ScheduleNotFound(name)
        return row

    def _db_now(self, conn: psycopg.Connection[Any]) -> datetime:
        row = self._fetch_one(conn, "now")
        assert row is not None
        return row["now"].astimezone(UTC)  # type: ignore[no-any-return]

    def publish(
        self,
        schedules: Sequence[Schedule],
        *,
        source: Source = Source.CODE,
        follow_last_run: bool = False,
        dry_run: bool = False,
    ) -> PublishResult:
        schedules = list(schedules)
        names = [s.name for s in schedules]
        with self._session() as conn, conn.transaction():
            conn.execute(self._q["publish_lock"])
            now = self._db_now(conn)
            # Validated before anything is written (a refusal rolls the whole publication back).
            definitions, unchanged = self._validate_and_compare(
                conn, schedules, source, follow_last_run
            )
            rest = [name for name in names if name not in unchanged]
            existing = (
                {r["name"]: r for r in self._fetch(conn, "schedules_by_names", {"names": rest})}
                if rest
                else {}
            )
            actions = plan_publish(
                schedules,
                existing,
                source=source,
                now=now,
                definitions=definitions,
                follow_last_run=follow_last_run,
                unchanged=unchanged,
            )
            orphaned: list[str] = []
            if Source(source) is Source.CODE:
                rows = self._fetch(
                    conn, "orphans", {"source": Source.CODE.value, "names": json.dumps(names)}
                )
                orphaned = [r["name"] for r in rows]
            if dry_run:
                return actions.result(orphaned=orphaned, dry_run=True)
            with psycopg.Cursor(conn) as cur:
                if actions.inserts:
                    self._copy_in(cur, actions.inserts)
                if actions.replaces:
                    params = []
                    for rep in actions.replaces:
                        p = _params(rep.values)
                        p.update(id=rep.id, version=rep.version)
                        params.append(p)
                    cur.executemany(self._q["schedule_replace"], params)
                    if cur.rowcount != len(params):
                        raise ConflictError("a schedule changed while it was being published")
                if actions.fingerprints:
                    cur.executemany(
                        self._q["schedule_set_fingerprint"],
                        [
                            {"id": sid, "published_fingerprint": printed}
                            for sid, printed in actions.fingerprints
                        ],
                    )
            if actions.changed:
                self._notify(conn, "schedule:0")
        return actions.result(orphaned=orphaned)

    def _validate_and_compare(
        self,
        conn: psycopg.Connection[Any],
        schedules: Sequence[Schedule],
        source: Source,
        follow_last_run: bool,
    ) -> tuple[list[dict[str, Any] | None], set[str]]:
        """Each declaration validated (:func:`~goatbeat.stores.definitions.validate_batch`'s
        checks, in its order) and its definition, and the names stored exactly as declared,
        found by ``publish_unchanged``: one statement per chunk carrying the chunk's
        declarations as JSON (:class:`~goatbeat.stores.definitions.Comparison`: each one's own
        columns, and the columns they share once per distinct combination) and returning names
        only. The statements are pipelined, so the database compares one chunk while the next
        is validated. A declaration that may move the last run forward (``follow_last_run``)
        is left to the full comparison. The definition of a declaration found unchanged may
        be None: it is not needed."""
        found: list[dict[str, Any] | None] = []
        seen: set[str] = set()
        unchanged: set[str] = set()
        compare = bool(self._fetch(conn, "source_has_rows", {"source": Source(source).value}))
        pipelined = compare and psycopg.Pipeline.is_supported()
        cursors: list[psycopg.Cursor[Any]] = []
        chunk: list[list[Any]] = []
        comparison = Comparison()
        local: dict[int, int] = {}
        shared: list[list[Any]] = []

        def send() -> None:
            cur = psycopg.Cursor(conn)
            cursors.append(cur)
            cur.execute(
                self._q["publish_unchanged"],
                {
                    "declared": json.dumps(chunk, separators=(",", ":")),
                    "shared": definition_json(shared),
                    "source": Source(source).value,
                },
            )
            chunk.clear()
            local.clear()
            shared.clear()
            if not pipelined:
                collect()

        def collect() -> None:
            while cursors:
                with cursors.pop(0) as cur:
                    unchanged.update(row[0] for row in cur.fetchall())

        with conn.pipeline() if pipelined else contextlib.nullcontext():
            try:
                for schedule in schedules:
                    if not compare or (follow_last_run and schedule.last_run_at is not None):
                        definition: dict[str, Any] | None = validate_schedule(schedule)
                        part = None
                    else:
                        part, definition = comparison.add(schedule)
                    if schedule.name in seen:
                        raise InvalidSchedule(
                            "name", schedule.name, f"{schedule.name!r} is declared twice"
                        )
                    seen.add(schedule.name)
                    found.append(definition)
                    if part is None:
                        continue
                    # The chunk carries the combinations its declarations use, renumbered.
                    k = local.get(part[4])
                    if k is None:
                        k = local[part[4]] = len(shared)
                        shared.append(comparison.shared[part[4]])
                    part[4] = k
                    chunk.append(part)
                    if len(chunk) == _COMPARE_CHUNK:
                        send()
                if chunk:
                    send()
                collect()
            finally:
                for cur in cursors:
                    cur.close()
        for i, schedule in enumerate(schedules):
            if found[i] is None and schedule.name not in unchanged:
                found[i] = validate_schedule(schedule)
        return found, unchanged

    def _copy_in(self, cur: psycopg.Cursor[Any], rows: Sequence[Mapping[str, Any]]) -> None:
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

        with cur.copy(self._q["schedule_copy"]) as copy:
            for row in rows:
                copy.write_row(
                    [
                        as_json(column, row[column]) if column in _JSON_COLUMNS else row[column]
                        for column in _COPY_COLUMNS
                    ]
                )

    def edited_since_publish(self, names: Collection[str]) -> set[str]:
        with self._session() as conn, conn.transaction():
            rows = self._fetch(conn, "schedules_by_names", {"names": sorted(set(names))})
        return {r["name"] for r in rows if edited(r)}

    def prune(self, keep: Collection[str], *, source: Source = Source.CODE) -> list[str]:
        with self._session() as conn, conn.transaction():
            rows = self._fetch(
                conn, "prune", {"source": Source(source).value, "keep": sorted(set(keep))}
            )
            if rows:
                self._notify(conn, "schedule:0")
        return sorted(r["name"] for r in rows)

    def create(self, schedule: Schedule) -> Schedule:
        definition = validate_schedule(schedule)
        try:
            with self._session() as conn, conn.transaction():
                if self._fetch_one(conn, "schedule_by_name", {"name": schedule.name}) is not None:
                    raise InvalidSchedule(
                        "name", schedule.name, f"{schedule.name!r} already exists"
                    )
                now = self._db_now(conn)
                row = schedule_to_row(
                    schedule,
                    source=schedule.source,
                    enabled=schedule.enabled,
                    next_run_at=first_run(schedule, schedule.last_run_at or now),
                    definition=definition,
                )
                stored = self._fetch_one(conn, "schedule_insert", _params(row))
                assert stored is not None
                self._notify(conn, f"schedule:{stored['id']}")
        except StoreError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):  # lost a race for the name
                raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} already exists")
            raise
        return schedule_from_row(stored)

    def update(self, schedule: Schedule, *, expected_version: int | None = None) -> Schedule:
        definition = validate_schedule(schedule)
        with self._session() as conn, conn.transaction():
            row = self._required(conn, schedule.name)
            if expected_version is not None and row["version"] != expected_version:
                raise ConflictError(
                    f"schedule {schedule.name!r} is at version {row['version']}, "
                    f"not {expected_version}"
                )
            params = _params(
                update_values(schedule, row, now=self._db_now(conn), definition=definition)
            )
            params.update(id=row["id"], version=row["version"])
            stored = self._fetch_one(conn, "schedule_replace", params)
            if stored is None:
                raise ConflictError(f"schedule {schedule.name!r} changed while being updated")
            self._notify(conn, f"schedule:{stored['id']}")
        return schedule_from_row(stored)

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        with self._session() as conn, conn.transaction():
            row = self._required(conn, name)
            values = enabled_values(row, enabled, now=self._db_now(conn))
            if values is None:
                return read_schedule(row)
            stored = self._fetch_one(
                conn,
                "schedule_set_enabled",
                {**values, "id": row["id"], "version": row["version"]},
            )
            if stored is None:
                raise ConflictError(f"schedule {name!r} changed while being toggled")
            self._notify(conn, f"schedule:{stored['id']}")
        return read_schedule(stored)

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        note, by = check_pause(note, by)
        with self._session() as conn, conn.transaction():
            row = self._required(conn, name)
            with psycopg.Cursor(conn) as cur:
                cur.execute(self._q["pause_withdraw"], {"id": row["id"], "error": PAUSE_WITHDRAWN})
                withdrawn = max(0, cur.rowcount)
            values = pause_values(row, note=note, by=by, now=self._db_now(conn))
            stored = self._fetch_one(
                conn, "pause", {**values, "id": row["id"], "withdrawn": withdrawn}
            )
            assert stored is not None
            self._notify(conn, f"schedule:{stored['id']}")
        return read_schedule(stored)

    def resume(
        self, name: str, *, catch_up: bool = False, now: datetime | None = None
    ) -> ResumeResult:
        with self._session() as conn, conn.transaction():
            row = self._required(conn, name)
            at = (now or self._db_now(conn)).astimezone(UTC)
            planned = resume_values(row, catch_up=catch_up, now=at)
            if planned is None:
                return ResumeResult(schedule=read_schedule(row), was_paused=False)
            stored = self._fetch_one(
                conn,
                "resume",
                {
                    "id": row["id"],
                    "version": row["version"],
                    "next_run_at": planned.values["next_run_at"],
                    "skipped_count": planned.values["skipped_count"],
                },
            )
            if stored is None:
                raise ConflictError(f"schedule {name!r} changed while being resumed")
            self._notify(conn, f"schedule:{stored['id']}")
        return planned.result(read_schedule(stored), catch_up=catch_up)

    def backfill(
        self,
        name: str,
        *,
        start: datetime,
        end: datetime,
        limit: int,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> BackfillResult:
        with self._session() as conn, conn.transaction():
            row = self._required(conn, name)
            at = (now or self._db_now(conn)).astimezone(UTC)
            instants = backfill_instants(row, start=start, end=end, limit=limit, now=at)
            keys = [idempotency_key(name, t) for t in instants]
            by_key = dict(zip(keys, instants, strict=True))
            found = self._fetch(conn, "backfill_existing", {"keys": keys})
            existing = {by_key[r["idempotency_key"]]: str(r["status"]) for r in found}
            created = [t for t in instants if t not in existing]
            if created and not dry_run:
                wanted = [idempotency_key(name, t) for t in created]
                written = self._fetch(
                    conn,
                    "backfill_insert",
                    {"schedule_id": row["id"], "name": name, "instants": created, "keys": wanted},
                )
                # A concurrent writer may have taken an instant between the read and the write.
                landed = {r["scheduled_at"].astimezone(UTC) for r in written}
                for t in created:
                    if t not in landed:
                        existing[t] = ExecutionStatus.CLAIMED.value
                created = [t for t in created if t in landed]
                if created:
                    self._notify(conn, f"schedule:{row['id']}")
        return BackfillResult(
            name=name, instants=instants, created=created, existing=existing, dry_run=dry_run
        )

    def delete(self, name: str) -> None:
        with self._session() as conn, conn.transaction():
            with psycopg.Cursor(conn) as cur:
                cur.execute(self._q["abandon_claimed"], {"name": name, "error": ABANDONED_ERROR})
            row = self._fetch_one(conn, "schedule_delete", {"name": name})
            if row is None:
                raise ScheduleNotFound(name)
            self._notify(conn, f"schedule:{row['id']}")

    def get(self, name: str) -> StoredSchedule:
        with self._session() as conn:
            return read_schedule(self._required(conn, name))

    def list_schedules(self, *, source: Source | None = None) -> list[StoredSchedule]:
        with self._session() as conn:
            rows = self._fetch(
                conn, "list_schedules", {"source": None if source is None else Source(source).value}
            )
        return [read_schedule(r) for r in rows]

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self._session() as conn:
            row = self._fetch_one(
                conn, "lease_acquire", {"name": name, "holder": holder, "ttl": ttl}
            )
        if row is None:
            return None
        return LeaseGrant(
            name=row["name"],
            holder=row["holder"],
            token=int(row["token"]),
            expires_at=row["expires_at"].astimezone(UTC),
        )

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        params = {
            "name": name,
            "holder": holder,
            "token": token,
            "payload": lease_payload(name),
        }
        with self._session() as conn:
            return self._fetch_one(conn, "lease_release", params) is not None

    def read_lease(self, name: str) -> tuple[str, int, datetime, bool] | None:
        with self._session() as conn:
            row = self._fetch_one(conn, "lease_read", {"name": name})
        if row is None:
            return None
        return (
            row["holder"],
            int(row["token"]),
            row["expires_at"].astimezone(UTC),
            bool(row["expired"]),
        )

    def read_leases(self, names: Sequence[str]) -> dict[str, tuple[str, int, datetime, bool]]:
        with self._session() as conn:
            rows = self._fetch(conn, "lease_read_many", {"names": list(names)})
        return {
            r["name"]: (
                r["holder"],
                int(r["token"]),
                r["expires_at"].astimezone(UTC),
                bool(r["expired"]),
            )
            for r in rows
        }

    def live_schedulers(self, within: timedelta, *, shards: int) -> list[str]:
        with self._session() as conn:
            rows = self._fetch(conn, "live_schedulers", {"within": within, "shards": shards})
        return [str(r["scheduler_id"]) for r in rows]

    # -- claiming --------------------------------------------------------------------------

    def next_due_at(self, *, shard: Shard = ALL) -> datetime | None:
        with self._session() as conn:
            row = self._fetch_one(conn, "next_due_at", _shard_params(shard))
        value = None if row is None else row["next_due_at"]
        return None if value is None else value.astimezone(UTC)

    def claim_due(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None = None,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        check_positive("limit", limit)
        for attempt in range(1, _CLAIM_ATTEMPTS + 1):
            try:
                return self._claim_once(
                    lease, scheduler_id=scheduler_id, limit=limit, now=now, record=record
                )
            except _RetryableStoreError:
                # Rolled back as a whole, so nothing was written: safe to run again.
                if attempt == _CLAIM_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _claim_once(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None,
        record: Sequence[SubmitOutcome],
    ) -> ClaimResult:
        with self._session() as conn, conn.transaction() as tx:
            check = self._fetch_one(
                conn,
                "claim_check_lease",
                {
                    "name": lease.name,
                    "holder": lease.holder,
                    "token": lease.token,
                    # Our own transaction, not a savepoint in a caller's: only then may the
                    # check cap it (see the query).
                    "own": not tx.savepoint_name,
                },
            )
            if check is None:
                with self._recording(conn, record):
                    pass
                return ClaimResult(occurrences=[], refused=True)
            at = (now or check["now"]).astimezone(UTC)
            shard = _shard_params(parse_lease_name(lease.name))
            rows = self._fetch(conn, "claim_select_due", {"now": at, "limit": limit, **shard})
            # The earlier batch's outcomes are written while the rows are decoded and planned.
            with self._recording(conn, record):
                schedules, damaged = decode_due(rows, self._cache.from_row)
                batch = plan_batch(schedules, at, self.planner, run_states(rows, at))
            batch.schedules_seen = len(rows)
            quarantined = self._quarantine(conn, damaged) if damaged else []
            advs = batch.advances
            advanced: set[int] = set()
            occurrences: list[Occurrence] = []
            deferred = buffered = 0
            if advs:
                advanced = {
                    int(r["id"])
                    for r in self._fetch(
                        conn,
                        "claim_advance",
                        {
                            "ids": [a.schedule.id for a in advs],
                            "versions": [a.schedule.version for a in advs],
                            "next_run_at": [a.plan.next_run_at for a in advs],
                            "last_run_at": [a.last_run_at for a in advs],
                            **_last_statuses([a.last_status for a in advs]),
                            "runs": _unless_all([len(a.starts) for a in advs], 1),
                            "missed": _unless_all([a.plan.missed for a in advs], 0),
                            "skipped": _unless_all([len(a.skips) for a in advs], 0),
                            "disable": _unless_all([a.disable for a in advs], False),
                        },
                    )
                }
            if advanced and self._freeze_at:
                self._maybe_freeze(lease)
            planned = batch.executions_for(advanced)
            if planned:
                waits = [p.due_at is not None and p.due_at > at for p in planned]
                inserted = {
                    r["idempotency_key"]: int(r["id"])
                    for r in self._fetch(
                        conn,
                        "claim_insert_executions",
                        {
                            "token": lease.token,
                            "scheduler_id": scheduler_id,
                            "schedule_ids": [p.schedule.id for p in planned],
                            "names": [p.schedule.name for p in planned],
                            "scheduled_at": [p.scheduled_at for p in planned],
                            "keys": [p.key for p in planned],
                            "statuses": _unless_all(
                                [p.status for p in planned], ExecutionStatus.CLAIMED.value
                            ),
                            "retry_at": _unless_all(
                                [
                                    p.due_at if wait else None
                                    for p, wait in zip(planned, waits, strict=True)
                                ],
                                None,
                            ),
                        },
                    )
                }
                started: dict[int, int] = {}
                for p, wait in zip(planned, waits, strict=True):
                    execution_id = inserted.get(p.key)
                    if execution_id is None:
                        continue
                    if p.status == ExecutionStatus.BUFFERED.value:
                        buffered += 1
                    if p.status != ExecutionStatus.CLAIMED.value:
                        continue
                    if p.schedule.overlap is not OverlapPolicy.ALLOW:
                        assert p.schedule.id is not None
                        started[p.schedule.id] = execution_id
                    if wait:
                        deferred += 1
                        continue
                    occurrences.append(
                        occurrence_for(
                            p.schedule,
                            execution_id=execution_id,
                            scheduled_at=p.scheduled_at,
                            key=p.key,
                            token=lease.token,
                            due_at=p.due_at,
                        )
                    )
                if started:
                    with psycopg.Cursor(conn) as cur:
                        cur.execute(
                            self._q["started_runs"],
                            {"ids": list(started), "execution_ids": list(started.values())},
                        )
            if check["buffered"]:
                occurrences += self._promote_buffered(
                    conn, lease, scheduler_id, check["now"], shard
                )
        # Committed: only now may the cache believe the rows are at their new versions.
        if advanced:
            self._cache.advanced_all(a.schedule for a in advs if a.schedule.id in advanced)
        return ClaimResult(
            occurrences=occurrences,
            conflicts=len(advs) - len(advanced),
            missed=batch.missed_for(advanced),
            misses=batch.misses_for(advanced),
            schedules_seen=batch.schedules_seen,
            quarantined=quarantined,
            skipped=batch.skipped_for(advanced),
            buffered=buffered,
            deferred=deferred,
        )

    def _promote_buffered(
        self,
        conn: psycopg.Connection[Any],
        lease: LeaseGrant,
        scheduler_id: str,
        now: datetime,
        shard: Mapping[str, Any],
    ) -> list[Occurrence]:
        """Buffered occurrences (of the lease's shard) whose schedule's run ended (or expired
        by ``max_runtime``) start now: they become this claim's, and the run their schedule
        waits for next."""
        rows = self._fetch(conn, "buffered_runs", shard)
        if not rows:
            return []
        ready = [
            int(r["buffered_id"])
            for r in rows
            if (at := buffer_ready_at(r)) is not None and at <= now
        ]
        if not ready:
            return []
        promoted = self._fetch(
            conn,
            "promote_buffered",
            {"ids": ready, "token": lease.token, "scheduler_id": scheduler_id},
        )
        occurrences, failed = decode_pending(promoted)
        if failed:
            with psycopg.Cursor(conn) as cur:
                cur.execute(
                    self._q["abandon_damaged"],
                    {"ids": [i for i, _ in failed], "errors": [e for _, e in failed]},
                )
        return occurrences

    def _maybe_freeze(self, lease: LeaseGrant) -> None:
        """The test hook of the module docstring."""
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

    def _quarantine(
        self, conn: psycopg.Connection[Any], damaged: list[DamagedSchedule]
    ) -> list[DamagedSchedule]:
        """Take the damaged due rows out of scheduling; returns those written (a row repaired
        meanwhile is left alone: it is due again, and the next claim reads it afresh)."""
        written = {
            int(r["id"])
            for r in self._fetch(
                conn,
                "claim_quarantine",
                {
                    "ids": [d.id for d in damaged],
                    "versions": [d.version for d in damaged],
                    "status": SCHEDULE_INVALID,
                },
            )
        }
        return [d for d in damaged if d.id in written]

    def pending(
        self, *, limit: int, exclude: Collection[int] = (), shard: Shard = ALL
    ) -> list[Occurrence]:
        check_positive("limit", limit)
        skip = check_execution_ids("exclude", exclude)
        params = {"limit": limit, "exclude": skip, **_shard_params(shard)}
        with self._session() as conn:
            rows = self._fetch(conn, "pending", params)
            occurrences, failed = decode_pending(rows)
            if failed:
                with psycopg.Cursor(conn) as cur:
                    cur.execute(
                        self._q["abandon_damaged"],
                        {"ids": [i for i, _ in failed], "errors": [e for _, e in failed]},
                    )
        return occurrences

    def next_retry_at(self, *, shard: Shard = ALL) -> datetime | None:
        with self._session() as conn:
            row = self._fetch_one(conn, "next_retry_at", _shard_params(shard))
        at = None if row is None else row["at"]
        return None if at is None else at.astimezone(UTC)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        if not outcomes:
            return
        query, params = self._record_statement(outcomes)
        with self._session() as conn, psycopg.Cursor(conn) as cur:
            cur.execute(query, params)

    def _record_statement(self, outcomes: Sequence[SubmitOutcome]) -> tuple[str, dict[str, Any]]:
        """record_outcomes' statement and parameters: the lean one when all are successes."""
        if all(o.ok for o in outcomes):
            return self._q["record_submitted"], {
                "ids": [o.execution_id for o in outcomes],
                "backend_task_ids": [o.backend_task_id for o in outcomes],
            }
        return self._q["record_outcomes"], {
            "ids": [o.execution_id for o in outcomes],
            "ok": [bool(o.ok) for o in outcomes],
            "final": [bool(o.final) for o in outcomes],
            "missed": [bool(o.missed) for o in outcomes],
            "retry_in": [
                None if o.retry_in is None else max(0.0, float(o.retry_in)) for o in outcomes
            ],
            "backend_task_ids": [o.backend_task_id for o in outcomes],
            "errors": [o.error for o in outcomes],
        }

    @contextmanager
    def _recording(
        self, conn: psycopg.Connection[Any], outcomes: Sequence[SubmitOutcome]
    ) -> Iterator[None]:
        """Write ``outcomes`` (record_outcomes' statement, in the open transaction) while the
        block runs. In pipeline mode the statement goes out at once and the block's work (the
        client decoding the due rows) overlaps the server's; leaving the block waits for the
        write and raises its error. The block must not use the connection."""
        if not outcomes:
            yield
            return
        query, params = self._record_statement(outcomes)
        with psycopg.Cursor(conn) as cur:
            if not psycopg.Pipeline.is_supported():
                cur.execute(query, params)
                yield
                return
            with conn.pipeline():
                cur.execute(query, params)
                yield

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        wanted = check_execution_ids("execution_ids", execution_ids)
        if not wanted:
            return []
        with self._session() as conn, conn.transaction():
            rows = self._fetch(
                conn,
                "claim_manual_runs",
                {
                    "name": lease.name,
                    "holder": lease.holder,
                    "token": lease.token,
                    "scheduler_id": scheduler_id,
                    "ids": wanted,
                    **_shard_params(parse_lease_name(lease.name)),
                },
            )
        return sorted(int(r["id"]) for r in rows)

    def refuse(self, schedule_id: int, task: str, *, reason: str) -> bool:
        with self._session() as conn:
            row = self._fetch_one(
                conn, "refuse", {"id": int(schedule_id), "task": task, "reason": reason}
            )
        return row is not None and int(row["matched"]) > 0

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.FAILED
        return self.record_completion(idempotency_key, outcome=outcome, error=error)

    def record_started(self, idempotency_key: str, *, worker: str | None = None) -> bool:
        key = ops.check_key(idempotency_key)
        worker = ops.check_worker(worker)
        with self._session() as conn:
            row = self._fetch_one(conn, "record_started", {"key": key, "worker": worker})
        return row is not None and int(row["matched"]) > 0

    def record_completion(
        self,
        idempotency_key: str,
        *,
        outcome: Outcome,
        error: str | None = None,
        runtime: float | None = None,
        worker: str | None = None,
    ) -> bool:
        report = ops.check_report(idempotency_key, outcome, error, runtime, worker)
        with self._session() as conn:
            row = self._fetch_one(
                conn,
                "record_completion",
                {
                    "key": report.key,
                    "outcome": report.outcome.value,
                    "error": report.error,
                    "runtime": report.runtime,
                    "worker": report.worker,
                },
            )
        if row is not None and row["pause_name"] is not None:
            # The rule of failure_pause, applied in the query.
            pause_after_failures(self, str(row["pause_name"]), int(row["failures"]))
        return row is not None and int(row["matched"]) > 0

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        with self._session() as conn, conn.transaction():
            schedule = self._required(conn, name)
            schedule_from_row(schedule)  # a damaged schedule cannot run: DamagedRow
            at = (now or self._db_now(conn)).astimezone(UTC)
            key = manual_key(name, at)
            row = self._fetch_one(
                conn,
                "request_run",
                {"schedule_id": schedule["id"], "name": name, "at": at, "key": key},
            )
            if row is None:  # a concurrent identical request committed between our reads
                raise ConflictError(f"run of {name!r} at {at.isoformat()} is being requested")
            execution = execution_from_row(row)
            self._notify(conn, f"run:{execution.id}")
        return execution

    def executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[Execution]:
        query, params = executions_query(name, status, limit)
        with self._session() as conn:
            rows = self._fetch(conn, query, params)
        return [execution_from_row(r) for r in rows]

    # -- operations --------------------------------------------------------------------------

    def heartbeat(self, beat: SchedulerBeat) -> None:
        beat = ops.check_beat(beat)
        with self._session() as conn, conn.transaction():
            self._fetch(
                conn,
                "heartbeat",
                {
                    "scheduler_id": beat.scheduler_id,
                    "role": beat.role.value,
                    "lease": beat.lease,
                    "fencing_token": beat.fencing_token,
                    "hostname": beat.hostname,
                    "pid": beat.pid,
                    "version": beat.version,
                    "ttl": beat.ttl,
                },
            )
            self._fetch(conn, "scheduler_cleanup", {"retention": STALE_RETENTION})

    def remove_scheduler(self, scheduler_id: str) -> None:
        with self._session() as conn:
            self._fetch(conn, "scheduler_remove", {"scheduler_id": scheduler_id})

    def record_misses(self, misses: Sequence[Miss], *, scheduler_id: str) -> None:
        checked = ops.check_misses(misses)
        if not checked:
            return
        with self._session() as conn, conn.transaction(), psycopg.Cursor(conn) as cur:
            # Misses are rare (an outage, a long pause): a statement per schedule is plenty.
            cur.executemany(
                self._q["record_miss"],
                [
                    {
                        "schedule_id": m.schedule_id,
                        "schedule_name": m.schedule_name,
                        "missed": m.count,
                        "first_at": m.first_at,
                        "last_at": m.last_at,
                        "scheduler_id": scheduler_id,
                    }
                    for m in checked
                ],
            )
            cur.execute(self._q["miss_prune"], {"retention": MISS_RETENTION})

    def status(
        self,
        *,
        lease_name: str = "scheduler",
        window: timedelta = STATUS_WINDOW,
        now: datetime | None = None,
    ) -> StatusSnapshot:
        window = ops.check_window(window)
        with self._session() as conn, conn.transaction():
            # One snapshot for every read, judged at one instant of the database clock.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            store_now = self._db_now(conn)
            at = (now or store_now).astimezone(UTC)
            params = {"now": at, "since": at - window}
            counts = self._fetch_one(conn, "status_counts", params)
            oldest = self._fetch_one(conn, "status_oldest", params)
            lease = self._fetch_one(conn, "lease_read", {"name": lease_name})
            shard_rows = self._fetch(conn, "leases_like")
            rows = self._fetch(conn, "schedulers")
        assert counts is not None
        return StatusSnapshot(
            now=at,
            lease=None
            if lease is None
            else LeaseState(
                name=lease_name,
                holder=lease["holder"],
                token=int(lease["token"]),
                expires_at=lease["expires_at"].astimezone(UTC),
                valid=not lease["expired"],
            ),
            schedulers=[ops.scheduler_from_row(r) for r in rows],
            shard_leases=[
                LeaseState(
                    name=r["name"],
                    holder=r["holder"],
                    token=int(r["token"]),
                    expires_at=r["expires_at"].astimezone(UTC),
                    valid=not r["expired"],
                )
                for r in shard_rows
                if r["name"] != "scheduler"
            ],
            due=int(counts["due"]),
            pending=int(counts["pending"]),
            oldest_due_at=None if oldest is None else oldest["at"].astimezone(UTC),
            oldest_due_name=None if oldest is None else oldest["name"],
            missed=int(counts["missed"]),
            failed=int(counts["failed"]),
            window=window,
        )

    def schedule_health(
        self,
        *,
        overdue_after: timedelta,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ScheduleHealth]:
        limit = ops.check_limit(limit)
        with self._session() as conn:
            at = (now or self._db_now(conn)).astimezone(UTC)
            late = ops.late_instant(at, overdue_after)
            rows = self._fetch(conn, "schedule_health", {"late": late, "limit": limit})
        return [ops.health_from_row(r) for r in rows]

    # -- wake-ups --------------------------------------------------------------------------

    def notify(self, payload: str) -> None:
        with self._session() as conn:
            self._notify(conn, payload)

    def wait(self, timeout: float) -> bool:
        if self.listen_provider is not None:
            return self._wait_on_listen_connection(timeout)
        if self.pooled:
            return self._poll(timeout)
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            with self._session() as conn:
                self._listen(conn)
                for notification in conn.notifies(
                    timeout=min(remaining, _WAIT_SLICE), stop_after=1
                ):
                    if notification.channel != NOTIFY_CHANNEL:
                        continue
                    payload = notification.payload
                    self.last_payload = payload if validate_payload(payload) else None
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
        if self._listen_retry_at is not None:
            if time.monotonic() < self._listen_retry_at:
                return self._poll(timeout)
            self._listen_retry_at = None
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
                    self._listen_retry_at = time.monotonic() + _LISTEN_RETRY
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
