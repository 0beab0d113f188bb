"""SQLiteStore: the embedded default, on the standard library's sqlite3.

Safe for several processes on one host: WAL mode, a busy timeout, and every write transaction
starts with ``BEGIN IMMEDIATE`` so writers queue for the lock instead of failing to upgrade it.
A claim reads and plans outside the write lock, then checks the lease and writes with
compare-and-set inside one ``BEGIN IMMEDIATE`` transaction, so an edit made meanwhile wins,
exactly as with PostgreSQL.

The lease and due-ness use the store clock (an injectable :class:`~goatbeat.core.clock.Clock`,
the host clock by default): processes on one host share it. SQLite has no LISTEN/NOTIFY;
``notify()`` bumps a counter row and ``wait()`` polls ``PRAGMA data_version`` (free when
nothing changed) to notice it from other processes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import ConflictError, InvalidSchedule, ScheduleNotFound, StoreError
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
from goatbeat.core.store import BackfillResult, PublishResult, ResumeResult
from goatbeat.stores import _operations as ops
from goatbeat.stores import schema
from goatbeat.stores.arguments import check_execution_ids, check_positive, executions_query
from goatbeat.stores.claims import Planner, occurrence_for, plan_batch, run_states
from goatbeat.stores.control import (
    ABANDONED_ERROR,
    PAUSE_WITHDRAWN,
    backfill_instants,
    check_pause,
    failure_pause,
    pause_after_failures,
    pause_values,
    resume_values,
)
from goatbeat.stores.definitions import (
    edited,
    first_run,
    schedule_to_row,
    validate_batch,
    validate_schedule,
)
from goatbeat.stores.payloads import check_payload, lease_payload
from goatbeat.stores.publication import enabled_values, orphans, plan_publish, update_values
from goatbeat.stores.rows import (
    ScheduleCache,
    buffer_ready_at,
    decode_due,
    decode_pending,
    execution_from_row,
    read_schedule,
    schedule_from_row,
)

__all__ = ["SQLiteStore"]

_POLL_STEP = 0.05  # seconds between two looks at PRAGMA data_version while waiting

_JSON_COLUMNS = ("trigger", "args", "kwargs", "headers")
_TIME_COLUMNS = (
    "start_at",
    "end_at",
    "next_run_at",
    "last_run_at",
    "created_at",
    "updated_at",
    "scheduled_at",
    "claimed_at",
    "submitted_at",
    "finished_at",
    "expires_at",
    "paused_at",
    "run_submitted_at",
    "run_claimed_at",
    "buffered_at",
    # Schema version 5.
    "started_at",
    "last_success_at",
    "last_failure_at",
    "heartbeat_at",
)


def encode_time(value: datetime | None) -> str | None:
    """Fixed-width UTC text: text order is time order (years 1000-9999)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def decode_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value).astimezone(UTC)


def _lenient(decode: Any, value: Any) -> Any:
    # A value damaged by hand stays as stored: decoding the row then names its column
    # (goatbeat.stores.rows) instead of failing the whole query.
    try:
        return decode(value)
    except (TypeError, ValueError, OverflowError):
        return value


def _encode(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in _JSON_COLUMNS:
            out[key] = json.dumps(value, sort_keys=True, allow_nan=False)
        elif isinstance(value, datetime):
            out[key] = encode_time(value)
        elif isinstance(value, bool):
            out[key] = int(value)
        else:
            out[key] = value
    return out


def _decode(row: sqlite3.Row, *, json_columns: bool = True) -> dict[str, Any]:
    out = dict(row)
    if json_columns:  # the claim path leaves them as text for the schedule cache
        for key in out.keys() & set(_JSON_COLUMNS):
            if out[key] is not None:
                out[key] = _lenient(json.loads, out[key])
    for key in out.keys() & set(_TIME_COLUMNS):
        out[key] = _lenient(decode_time, out[key])
    return out


class SQLiteStore:
    """A ScheduleStore in one SQLite file. ``path`` may be ``":memory:"`` (single process)."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock | None = None,
        *,
        busy_timeout: float = 30.0,
        planner: Planner | None = None,
    ) -> None:
        self.path = str(path)
        self.clock: Clock = clock or SystemClock()
        self.planner: Planner = planner or default_plan
        self.busy_timeout = busy_timeout
        self._q = schema.queries("sqlite")
        self._lock = threading.RLock()
        self._local = threading.Condition(threading.Lock())
        self._local_notified = 0
        self._conn: sqlite3.Connection | None = None
        self._data_version: int | None = None
        self._cache = ScheduleCache()
        self._seen_counter: int | None = None
        with self._lock:
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
                check_same_thread=False,  # guarded by self._lock
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
    def _session(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the store lock, with sqlite errors turned into StoreError."""
        with self._lock:
            conn = self._connect()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the database's write lock up front."""
        with self._session() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _now_text(self) -> str:
        text = encode_time(self.now())
        assert text is not None
        return text

    def _read_counter(self) -> int | None:
        assert self._conn is not None
        try:
            row = self._conn.execute(self._q["notify_counter"]).fetchone()
        except sqlite3.OperationalError:
            return None  # not migrated yet
        return None if row is None else int(row[0])

    # -- lifecycle -------------------------------------------------------------------------

    def migrate(self) -> None:
        with self._write() as conn:
            for statement in schema.split_statements(schema.version_table_sql("sqlite")):
                conn.execute(statement)
            applied = {int(r[0]) for r in conn.execute(self._q["applied_versions"])}
            for version in schema.migration_versions("sqlite"):
                if version in applied:
                    continue
                for statement in schema.split_statements(schema.sqlite_migration_sql(version)):
                    conn.execute(statement)
        with self._lock:
            if self._seen_counter is None:
                self._seen_counter = self._read_counter()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def now(self) -> datetime:
        return self.clock.now().astimezone(UTC)

    def info(self) -> dict[str, Any]:
        with self._session() as conn:
            try:
                versions = [int(r[0]) for r in conn.execute(self._q["applied_versions"])]
            except sqlite3.OperationalError:
                versions = []
        return {"kind": "sqlite", "database": self.path, "schema_version": max(versions, default=0)}

    # -- schedules -------------------------------------------------------------------------

    def _row_by_name(self, conn: sqlite3.Connection, name: str) -> dict[str, Any] | None:
        row = conn.execute(self._q["schedule_by_name"], {"name": name}).fetchone()
        return None if row is None else _decode(row)

    def _required(self, conn: sqlite3.Connection, name: str) -> dict[str, Any]:
        row = self._row_by_name(conn, name)
        if row is None:
            raise ScheduleNotFound(name)
        return row

    def _insert(self, conn: sqlite3.Connection, row: Mapping[str, Any], now: str) -> int:
        params = _encode(row)
        params["now"] = now
        cur = conn.execute(self._q["schedule_insert"], params)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def publish(
        self,
        schedules: Sequence[Schedule],
        *,
        source: Source = Source.CODE,
        follow_last_run: bool = False,
        dry_run: bool = False,
    ) -> PublishResult:
        schedules = list(schedules)
        definitions = validate_batch(schedules)
        with self._write() as conn:
            now = self.now()
            now_text = encode_time(now)
            assert now_text is not None
            existing: dict[str, dict[str, Any]] = {}
            if len(schedules) > 200:
                # One scan beats thousands of lookups when a whole code base is published.
                wanted = {s.name for s in schedules}
                for r in conn.execute(self._q["schedules_all"]):
                    if r["name"] in wanted:
                        existing[r["name"]] = _decode(r)
            else:
                for s in schedules:
                    row = self._row_by_name(conn, s.name)
                    if row is not None:
                        existing[s.name] = row
            actions = plan_publish(
                schedules,
                existing,
                source=source,
                now=now,
                definitions=definitions,
                follow_last_run=follow_last_run,
            )
            orphaned: list[str] = []
            if Source(source) is Source.CODE:
                candidates = conn.execute(
                    self._q["prune_candidates"], {"source": Source.CODE.value}
                )
                orphaned = orphans((r["name"] for r in candidates), schedules, source=source)
            if dry_run:
                return actions.result(orphaned=orphaned, dry_run=True)
            for new in actions.inserts:
                self._insert(conn, new, now_text)
            for rep in actions.replaces:
                params = _encode(rep.values)
                params.update(id=rep.id, version=rep.version, now=now_text)
                if conn.execute(self._q["schedule_replace"], params).rowcount != 1:
                    raise ConflictError(f"schedule id {rep.id} changed while publishing")
            for sid, printed in actions.fingerprints:
                conn.execute(
                    self._q["schedule_set_fingerprint"],
                    {"id": sid, "published_fingerprint": printed},
                )
            if actions.changed:
                self._bump(conn, "schedule:0")
        if actions.changed:
            self._wake_local()
        return actions.result(orphaned=orphaned)

    def edited_since_publish(self, names: Collection[str]) -> set[str]:
        found: set[str] = set()
        with self._session() as conn:
            for name in set(names):
                row = self._row_by_name(conn, name)
                if row is not None and edited(row):
                    found.add(name)
        return found

    def prune(self, keep: Collection[str], *, source: Source = Source.CODE) -> list[str]:
        keep_set = set(keep)
        src = Source(source).value
        pruned: list[str] = []
        with self._write() as conn:
            now = self._now_text()
            for (name,) in conn.execute(self._q["prune_candidates"], {"source": src}).fetchall():
                if name in keep_set:
                    continue
                conn.execute(self._q["prune_one"], {"source": src, "name": name, "now": now})
                pruned.append(name)
            if pruned:
                self._bump(conn, "schedule:0")
        if pruned:
            self._wake_local()
        return pruned

    def create(self, schedule: Schedule) -> Schedule:
        definition = validate_schedule(schedule)
        with self._write() as conn:
            if self._row_by_name(conn, schedule.name) is not None:
                raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} already exists")
            now = self.now()
            row = schedule_to_row(
                schedule,
                source=schedule.source,
                enabled=schedule.enabled,
                next_run_at=first_run(schedule, schedule.last_run_at or now),
                definition=definition,
            )
            now_text = encode_time(now)
            assert now_text is not None
            sid = self._insert(conn, row, now_text)
            self._bump(conn, f"schedule:{sid}")
            result = schedule_from_row(self._required(conn, schedule.name))
        self._wake_local()
        return result

    def update(self, schedule: Schedule, *, expected_version: int | None = None) -> Schedule:
        definition = validate_schedule(schedule)
        with self._write() as conn:
            row = self._required(conn, schedule.name)
            if expected_version is not None and row["version"] != expected_version:
                raise ConflictError(
                    f"schedule {schedule.name!r} is at version {row['version']}, "
                    f"not {expected_version}"
                )
            now = self.now()
            params = _encode(update_values(schedule, row, now=now, definition=definition))
            params.update(id=row["id"], version=row["version"], now=encode_time(now))
            conn.execute(self._q["schedule_replace"], params)
            self._bump(conn, f"schedule:{row['id']}")
            result = schedule_from_row(self._required(conn, schedule.name))
        self._wake_local()
        return result

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        with self._write() as conn:
            row = self._required(conn, name)
            now = self.now()
            values = enabled_values(row, enabled, now=now)
            if values is None:
                return read_schedule(row)
            conn.execute(
                self._q["schedule_set_enabled"],
                {
                    "enabled": int(values["enabled"]),
                    "next_run_at": encode_time(values["next_run_at"]),
                    "last_status": values["last_status"],
                    "id": row["id"],
                    "version": row["version"],
                    "now": encode_time(now),
                },
            )
            self._bump(conn, f"schedule:{row['id']}")
            result = read_schedule(self._required(conn, name))
        self._wake_local()
        return result

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        note, by = check_pause(note, by)
        with self._write() as conn:
            row = self._required(conn, name)
            now = self.now()
            withdrawn = conn.execute(
                self._q["pause_withdraw"],
                {"id": row["id"], "error": PAUSE_WITHDRAWN, "now": encode_time(now)},
            ).rowcount
            values = pause_values(row, note=note, by=by, now=now)
            conn.execute(
                self._q["pause"],
                {
                    "id": row["id"],
                    "paused_at": encode_time(values["paused_at"]),
                    "paused_by": values["paused_by"],
                    "pause_note": values["pause_note"],
                    "withdrawn": withdrawn,
                    "now": encode_time(now),
                },
            )
            self._bump(conn, f"schedule:{row['id']}")
            result = read_schedule(self._required(conn, name))
        self._wake_local()
        return result

    def resume(
        self, name: str, *, catch_up: bool = False, now: datetime | None = None
    ) -> ResumeResult:
        with self._write() as conn:
            row = self._required(conn, name)
            at = (now or self.now()).astimezone(UTC)
            planned = resume_values(row, catch_up=catch_up, now=at)
            if planned is None:
                return ResumeResult(schedule=read_schedule(row), was_paused=False)
            conn.execute(
                self._q["resume"],
                {
                    "id": row["id"],
                    "version": row["version"],
                    "next_run_at": encode_time(planned.values["next_run_at"]),
                    "skipped_count": planned.values["skipped_count"],
                    "now": self._now_text(),
                },
            )
            self._bump(conn, f"schedule:{row['id']}")
            stored = read_schedule(self._required(conn, name))
        self._wake_local()
        return planned.result(stored, catch_up=catch_up)

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
        with self._write() as conn:
            row = self._required(conn, name)
            at = (now or self.now()).astimezone(UTC)
            instants = backfill_instants(row, start=start, end=end, limit=limit, now=at)
            keys = {idempotency_key(name, t): t for t in instants}
            found = conn.execute(self._q["statuses_by_keys"], {"keys": json.dumps(list(keys))})
            existing = {keys[r["idempotency_key"]]: r["status"] for r in found.fetchall()}
            created = [t for t in instants if t not in existing]
            if not dry_run and created:
                now_text = self._now_text()
                for t in created:
                    conn.execute(
                        self._q["backfill_insert"],
                        {
                            "schedule_id": row["id"],
                            "name": name,
                            "at": encode_time(t),
                            "key": idempotency_key(name, t),
                            "now": now_text,
                        },
                    )
                self._bump(conn, f"schedule:{row['id']}")
        if created and not dry_run:
            self._wake_local()
        return BackfillResult(
            name=name, instants=instants, created=created, existing=existing, dry_run=dry_run
        )

    def delete(self, name: str) -> None:
        with self._write() as conn:
            row = self._required(conn, name)
            conn.execute(self._q["abandon_claimed"], {"id": row["id"], "error": ABANDONED_ERROR})
            conn.execute(self._q["schedule_delete"], {"id": row["id"]})
            self._bump(conn, f"schedule:{row['id']}")
        self._wake_local()

    def get(self, name: str) -> StoredSchedule:
        with self._session() as conn:
            return read_schedule(self._required(conn, name))

    def list_schedules(self, *, source: Source | None = None) -> list[StoredSchedule]:
        with self._session() as conn:
            if source is None:
                rows = conn.execute(self._q["schedules_all"]).fetchall()
            else:
                rows = conn.execute(
                    self._q["schedules_by_source"], {"source": Source(source).value}
                ).fetchall()
            return [read_schedule(_decode(r)) for r in rows]

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self._write() as conn:
            now = self.now()
            row = conn.execute(
                self._q["lease_acquire"],
                {
                    "name": name,
                    "holder": holder,
                    "now": encode_time(now),
                    "expires_at": encode_time(now + ttl),
                },
            ).fetchone()
        if row is None:
            return None
        expires_at = decode_time(row["expires_at"])
        assert expires_at is not None
        return LeaseGrant(name=name, holder=holder, token=int(row["token"]), expires_at=expires_at)

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        payload = lease_payload(name)
        with self._write() as conn:
            released = (
                conn.execute(
                    self._q["lease_release"],
                    {"name": name, "holder": holder, "token": token, "now": self._now_text()},
                ).rowcount
                == 1
            )
            if released and payload is not None:
                self._bump(conn, payload)
        if released:
            self._wake_local()
        return released

    def read_lease(self, name: str) -> tuple[str, int, datetime, bool] | None:
        with self._session() as conn:
            row = conn.execute(self._q["lease_read"], {"name": name}).fetchone()
        if row is None:
            return None
        expires_at = decode_time(row["expires_at"])
        assert expires_at is not None
        return (row["holder"], int(row["token"]), expires_at, expires_at <= self.now())

    def _lease_ok(self, conn: sqlite3.Connection, lease: LeaseGrant) -> bool:
        params = {
            "name": lease.name,
            "holder": lease.holder,
            "token": lease.token,
            "now": self._now_text(),
        }
        return conn.execute(self._q["lease_check"], params).fetchone() is not None

    # -- claiming --------------------------------------------------------------------------

    def next_due_at(self) -> datetime | None:
        with self._session() as conn:
            row = conn.execute(self._q["next_due_at"]).fetchone()
            due = [decode_time(row[0])] if row is not None and row[0] is not None else []
            due += [
                at
                for r in conn.execute(self._q["buffered_runs"]).fetchall()
                if (at := buffer_ready_at(_decode(r))) is not None
            ]
        return min((d for d in due if d is not None), default=None)

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
        if record:
            self.record_outcomes(record)
        at = (now or self.now()).astimezone(UTC)
        with self._session() as conn:
            if not self._lease_ok(conn, lease):
                return ClaimResult(occurrences=[], refused=True)
            rows = conn.execute(
                self._q["claim_select_due"], {"now": encode_time(at), "limit": limit}
            ).fetchall()
            waiting = conn.execute(self._q["buffered_runs"]).fetchone() is not None
        decoded = [_decode(r, json_columns=False) for r in rows]
        seen, damaged = decode_due(decoded, self._cache.from_row)
        # Planning happens outside the write lock: other processes keep claiming and editing,
        # and the compare-and-set below settles any race.
        batch = plan_batch(seen, at, self.planner, run_states(decoded, at))
        batch.schedules_seen = len(rows)
        if not batch.advances and not damaged and not waiting:
            return ClaimResult(occurrences=[], schedules_seen=batch.schedules_seen)
        occurrences: list[Occurrence] = []
        deferred = buffered = 0
        with self._write() as conn:
            if not self._lease_ok(conn, lease):
                return ClaimResult(occurrences=[], refused=True)
            quarantined = self._quarantine(conn, damaged)
            claimed_at = self._now_text()
            advanced: set[int] = set()
            for adv in batch.advances:
                assert adv.schedule.id is not None
                cur = conn.execute(
                    self._q["claim_advance"],
                    {
                        "id": adv.schedule.id,
                        "version": adv.schedule.version,
                        "next_run_at": encode_time(adv.plan.next_run_at),
                        "last_run_at": encode_time(adv.last_run_at),
                        "last_status": adv.last_status,
                        "runs": len(adv.starts),
                        "missed": adv.plan.missed,
                        "skipped": len(adv.skips),
                        "disable": int(adv.disable),
                    },
                )
                if cur.rowcount == 1:
                    advanced.add(adv.schedule.id)
            for planned in batch.executions_for(advanced):
                schedule = planned.schedule
                wait = planned.due_at is not None and planned.due_at > at
                inserted = conn.execute(
                    self._q["claim_insert_execution"],
                    {
                        "schedule_id": schedule.id,
                        "schedule_name": schedule.name,
                        "scheduled_at": encode_time(planned.scheduled_at),
                        "key": planned.key,
                        "status": planned.status,
                        "token": lease.token,
                        "scheduler_id": scheduler_id,
                        "now": claimed_at,
                        "retry_at": encode_time(planned.due_at) if wait else None,
                    },
                ).fetchone()
                if inserted is None:
                    continue
                if planned.status == ExecutionStatus.BUFFERED.value:
                    buffered += 1
                if planned.status != ExecutionStatus.CLAIMED.value:
                    continue
                if schedule.overlap is not OverlapPolicy.ALLOW:
                    conn.execute(
                        self._q["started_run"],
                        {"id": schedule.id, "execution_id": inserted[0], "runs": 0, "status": None},
                    )
                if wait:
                    deferred += 1
                    continue
                occurrences.append(
                    occurrence_for(
                        schedule,
                        execution_id=int(inserted[0]),
                        scheduled_at=planned.scheduled_at,
                        key=planned.key,
                        token=lease.token,
                        due_at=planned.due_at,
                    )
                )
            occurrences += self._promote_buffered(conn, lease, scheduler_id, claimed_at)
        # Committed: only now may the cache believe the rows are at their new versions.
        if advanced:
            self._cache.advanced_all(
                a.schedule for a in batch.advances if a.schedule.id in advanced
            )
        return ClaimResult(
            occurrences=occurrences,
            conflicts=len(batch.advances) - len(advanced),
            missed=batch.missed_for(advanced),
            misses=batch.misses_for(advanced),
            schedules_seen=batch.schedules_seen,
            quarantined=quarantined,
            skipped=batch.skipped_for(advanced),
            buffered=buffered,
            deferred=deferred,
        )

    def _promote_buffered(
        self, conn: sqlite3.Connection, lease: LeaseGrant, scheduler_id: str, now: str
    ) -> list[Occurrence]:
        """Buffered occurrences whose schedule's run ended (or expired) start now: they
        become this claim's, and the run their schedule waits for next."""
        at = decode_time(now)
        assert at is not None
        rows = [_decode(r) for r in conn.execute(self._q["buffered_runs"]).fetchall()]
        joined: list[dict[str, Any]] = []
        for row in rows:
            ready = buffer_ready_at(row)
            if ready is None or ready > at:
                continue
            promoted = conn.execute(
                self._q["promote_buffered"],
                {
                    "id": row["buffered_id"],
                    "token": lease.token,
                    "scheduler_id": scheduler_id,
                    "now": now,
                },
            ).fetchone()
            if promoted is None or promoted["schedule_id"] is None:
                continue
            conn.execute(
                self._q["started_run"],
                {
                    "id": promoted["schedule_id"],
                    "execution_id": row["buffered_id"],
                    "runs": 1,
                    "status": ExecutionStatus.CLAIMED.value,
                },
            )
            found = conn.execute(self._q["promoted_pending"], {"id": row["buffered_id"]})
            joined += [_decode(r) for r in found.fetchall()]
        occurrences, failed = decode_pending(joined)
        for execution_id, error in failed:  # nothing can submit them
            conn.execute(self._q["abandon_damaged"], {"id": execution_id, "error": error})
        return occurrences

    def _quarantine(
        self, conn: sqlite3.Connection, damaged: list[DamagedSchedule]
    ) -> list[DamagedSchedule]:
        """Take damaged due rows out of scheduling (compare-and-set: a repair wins)."""
        written: list[DamagedSchedule] = []
        for d in damaged:
            params = {"id": d.id, "version": d.version, "status": SCHEDULE_INVALID}
            if conn.execute(self._q["claim_quarantine"], params).rowcount == 1:
                written.append(d)
        return written

    def pending(self, *, limit: int, exclude: Collection[int] = ()) -> list[Occurrence]:
        check_positive("limit", limit)
        skip = json.dumps(check_execution_ids("exclude", exclude))
        with self._session() as conn:
            rows = conn.execute(
                self._q["pending"], {"limit": limit, "exclude": skip, "now": self._now_text()}
            ).fetchall()
        occurrences, failed = decode_pending([_decode(r) for r in rows])
        if failed:
            with self._write() as conn:
                for execution_id, error in failed:
                    conn.execute(self._q["abandon_damaged"], {"id": execution_id, "error": error})
        return occurrences

    def next_retry_at(self) -> datetime | None:
        with self._session() as conn:
            row = conn.execute(self._q["next_retry_at"]).fetchone()
        return None if row is None else decode_time(row["at"])

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        if not outcomes:
            return
        with self._write() as conn:
            at = self.now()
            now = encode_time(at)
            latest: dict[int, tuple[str, str]] = {}
            missed: dict[int, int] = {}
            for outcome in outcomes:
                retry_at = None
                if outcome.retry_in is not None:
                    retry_at = encode_time(
                        at + timedelta(seconds=max(0.0, float(outcome.retry_in)))
                    )
                row = conn.execute(
                    self._q["record_outcome"],
                    {
                        "id": outcome.execution_id,
                        "ok": int(outcome.ok),
                        "final": int(outcome.final),
                        "backend_task_id": outcome.backend_task_id,
                        "error": outcome.error,
                        "now": now,
                        "retry_at": retry_at,
                    },
                ).fetchone()
                if row is None or row["schedule_id"] is None:
                    continue
                sid = int(row["schedule_id"])
                status = row["status"]
                if not outcome.ok and outcome.final and outcome.missed:
                    missed[sid] = missed.get(sid, 0) + 1
                    status = "missed"
                if sid not in latest or latest[sid][0] <= row["scheduled_at"]:
                    latest[sid] = (row["scheduled_at"], status)
            for sid, (_, status) in latest.items():
                conn.execute(
                    self._q["schedule_last_status"],
                    {"id": sid, "status": status, "missed": missed.get(sid, 0)},
                )

    def refuse(self, schedule_id: int, task: str, *, reason: str) -> bool:
        with self._write() as conn:
            target = conn.execute(
                self._q["refuse_target"], {"id": int(schedule_id), "task": task}
            ).fetchone()
            if target is None:
                return False
            conn.execute(self._q["refuse_executions"], {"id": int(schedule_id), "reason": reason})
            conn.execute(
                self._q["refuse"],
                {
                    "id": int(schedule_id),
                    "park": int(bool(target["park"])),
                    "now": self._now_text(),
                },
            )
        return True

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        wanted = check_execution_ids("execution_ids", execution_ids)
        claimed: list[int] = []
        if not wanted:
            return claimed
        with self._write() as conn:
            if not self._lease_ok(conn, lease):
                return claimed
            for execution_id in wanted:
                row = conn.execute(
                    self._q["claim_manual_run"],
                    {
                        "id": execution_id,
                        "scheduler_id": scheduler_id,
                        "token": lease.token,
                        "now": self._now_text(),
                    },
                ).fetchone()
                if row is None:
                    continue
                claimed.append(execution_id)
                if row["schedule_id"] is not None:
                    conn.execute(
                        self._q["manual_run"],
                        {"schedule_id": row["schedule_id"], "at": row["scheduled_at"]},
                    )
        return claimed

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.FAILED
        return self.record_completion(idempotency_key, outcome=outcome, error=error)

    def record_started(self, idempotency_key: str, *, worker: str | None = None) -> bool:
        key = ops.check_key(idempotency_key)
        worker = ops.check_worker(worker)
        with self._write() as conn:
            row = conn.execute(self._q["execution_for_report"], {"key": key}).fetchone()
            if row is None:
                return False
            now = self._now_text()
            conn.execute(self._q["record_started"], {"id": row["id"], "now": now, "worker": worker})
            self._report_to_schedule(conn, row, ExecutionStatus.RUNNING.value, now, False)
            return True

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
        with self._write() as conn:
            row = conn.execute(self._q["execution_for_report"], {"key": report.key}).fetchone()
            if row is None:
                return False
            now = self.now()
            seconds = report.runtime
            started = _lenient(decode_time, row["started_at"])
            if seconds is None and isinstance(started, datetime):
                seconds = (now - started).total_seconds()
            now_text = encode_time(now)
            conn.execute(
                self._q["record_completion"],
                {
                    "id": row["id"],
                    "outcome": report.outcome.value,
                    "now": now_text,
                    "error": report.error,
                    "runtime": seconds,
                    "worker": report.worker,
                },
            )
            counts = row["status"] != ExecutionStatus.FAILED.value
            self._report_to_schedule(conn, row, report.outcome.value, now_text, counts)
            sid = row["schedule_id"]
            waiting = (
                report.outcome in (Outcome.SUCCEEDED, Outcome.FAILED)
                and sid is not None
                and conn.execute(self._q["has_buffered"], {"id": sid}).fetchone() is not None
            )
            if waiting:  # the run ended: the leader starts the buffered one
                self._bump(conn, f"schedule:{sid}")
            state = (
                conn.execute(self._q["failure_state"], {"id": sid}).fetchone()
                if sid is not None and report.outcome is Outcome.FAILED
                else None
            )
        if waiting:
            self._wake_local()
        pause = failure_pause(report.outcome.value, None if state is None else dict(state))
        if pause is not None:
            pause_after_failures(self, *pause)
        return True

    def _report_to_schedule(
        self,
        conn: sqlite3.Connection,
        row: sqlite3.Row,
        status: str,
        now: str | None,
        counts_failure: bool,
    ) -> None:
        if row["schedule_id"] is None:
            return
        conn.execute(
            self._q["schedule_report"],
            {
                "id": row["schedule_id"],
                "scheduled_at": row["scheduled_at"],
                "status": status,
                "now": now,
                "counts_failure": int(counts_failure),
            },
        )

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        with self._write() as conn:
            schedule = self._required(conn, name)
            schedule_from_row(schedule)  # a damaged schedule cannot run: DamagedRow
            at = (now or self.now()).astimezone(UTC)
            key = manual_key(name, at)
            conn.execute(
                self._q["request_run"],
                {
                    "schedule_id": schedule["id"],
                    "name": name,
                    "at": encode_time(at),
                    "key": key,
                    "now": self._now_text(),
                },
            )
            row = conn.execute(self._q["execution_by_key"], {"key": key}).fetchone()
            execution = execution_from_row(_decode(row))
            self._bump(conn, f"run:{execution.id}")
        self._wake_local()
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
            rows = conn.execute(self._q[query], params).fetchall()
        return [execution_from_row(_decode(r)) for r in rows]

    # -- operations --------------------------------------------------------------------------

    def heartbeat(self, beat: SchedulerBeat) -> None:
        beat = ops.check_beat(beat)
        now = self.now()
        with self._write() as conn:
            conn.execute(
                self._q["heartbeat"],
                {
                    "scheduler_id": beat.scheduler_id,
                    "role": beat.role.value,
                    "lease": beat.lease,
                    "fencing_token": beat.fencing_token,
                    "hostname": beat.hostname,
                    "pid": beat.pid,
                    "version": beat.version,
                    "now": encode_time(now),
                    "expires_at": encode_time(now + beat.ttl),
                },
            )
            conn.execute(
                self._q["scheduler_cleanup"], {"before": encode_time(now - STALE_RETENTION)}
            )

    def remove_scheduler(self, scheduler_id: str) -> None:
        with self._write() as conn:
            conn.execute(self._q["scheduler_remove"], {"scheduler_id": scheduler_id})

    def record_misses(self, misses: Sequence[Miss], *, scheduler_id: str) -> None:
        checked = ops.check_misses(misses)
        if not checked:
            return
        now = self.now()
        with self._write() as conn:
            for miss in checked:
                conn.execute(
                    self._q["record_miss"],
                    {
                        "schedule_id": miss.schedule_id,
                        "schedule_name": miss.schedule_name,
                        "missed": miss.count,
                        "first_at": encode_time(miss.first_at),
                        "last_at": encode_time(miss.last_at),
                        "scheduler_id": scheduler_id,
                        "now": encode_time(now),
                    },
                )
            conn.execute(self._q["miss_prune"], {"before": encode_time(now - MISS_RETENTION)})

    def status(
        self,
        *,
        lease_name: str = "scheduler",
        window: timedelta = STATUS_WINDOW,
        now: datetime | None = None,
    ) -> StatusSnapshot:
        window = ops.check_window(window)
        store_now = self.now()
        at = (now or store_now).astimezone(UTC)
        params = {"now": encode_time(at), "since": encode_time(at - window)}
        with self._session() as conn:
            conn.execute("BEGIN")  # one snapshot for every read
            try:
                counts = conn.execute(self._q["status_counts"], params).fetchone()
                oldest = conn.execute(self._q["status_oldest"], params).fetchone()
                lease = conn.execute(self._q["lease_read"], {"name": lease_name}).fetchone()
                rows = conn.execute(
                    self._q["schedulers"], {"now": encode_time(store_now)}
                ).fetchall()
            finally:
                conn.execute("COMMIT")
        lease_state = None
        if lease is not None:
            expires = decode_time(lease["expires_at"])
            assert expires is not None
            lease_state = LeaseState(
                name=lease_name,
                holder=lease["holder"],
                token=int(lease["token"]),
                expires_at=expires,
                valid=expires > store_now,
            )
        return StatusSnapshot(
            now=at,
            lease=lease_state,
            schedulers=[ops.scheduler_from_row(_decode(r)) for r in rows],
            due=int(counts["due"]),
            pending=int(counts["pending"]),
            oldest_due_at=None if oldest is None else decode_time(oldest["at"]),
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
        late = ops.late_instant((now or self.now()).astimezone(UTC), overdue_after)
        with self._session() as conn:
            rows = conn.execute(
                self._q["schedule_health"],
                {"late": encode_time(late), "limit": -1 if limit is None else limit},
            ).fetchall()
        return [ops.health_from_row(_decode(r)) for r in rows]

    # -- wake-ups --------------------------------------------------------------------------

    def _bump(self, conn: sqlite3.Connection, payload: str) -> None:
        conn.execute(self._q["notify"], {"payload": payload})
        # Our own commits do not move PRAGMA data_version: force the next wait() to look.
        self._data_version = None

    def _wake_local(self) -> None:
        with self._local:
            self._local_notified += 1
            self._local.notify_all()

    def notify(self, payload: str) -> None:
        check_payload(payload)
        with self._write() as conn:
            self._bump(conn, payload)
        self._wake_local()

    def _counter_moved(self) -> bool:
        """Whether the notify counter moved since we last reported it. Reads the counter only
        when PRAGMA data_version says another connection committed (or we did)."""
        with self._session() as conn:
            version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version and self._seen_counter is not None:
                return False
            self._data_version = version
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
