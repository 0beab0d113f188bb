"""MemoryStore: the whole ScheduleStore contract in a few dicts, for tests and demos.

Thread-safe (one lock), single process, nothing persisted. It keeps the same rows the SQL
stores keep and passes the same conformance suite, so users can test their own scheduling code
against it. Its clock is injectable (:class:`~goatbeat.core.clock.FakeClock` in tests).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import ConflictError, InvalidSchedule, ScheduleNotFound
from goatbeat.core.health import (
    MISS_RETENTION,
    STALE_RETENTION,
    STATUS_WINDOW,
    LeaseState,
    Outcome,
    ScheduleHealth,
    SchedulerBeat,
    StatusSnapshot,
    is_overdue,
)
from goatbeat.core.misfire import plan as default_plan
from goatbeat.core.model import (
    ACTIVE_STATUSES,
    SCHEDULE_INVALID,
    ClaimResult,
    Execution,
    ExecutionKind,
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
from goatbeat.core.store import SCHEMA_VERSION, BackfillResult, PublishResult, ResumeResult
from goatbeat.stores import _operations as ops
from goatbeat.stores.arguments import check_execution_ids, check_positive
from goatbeat.stores.claims import Planner, occurrence_for, plan_batch, run_active
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
    DEFINITION_COLUMNS,
    edited,
    first_run,
    schedule_to_row,
    utc,
    validate_batch,
    validate_schedule,
)
from goatbeat.stores.dialect import check_payload, lease_payload
from goatbeat.stores.publication import (
    enabled_values,
    orphans,
    plan_publish,
    update_values,
    without_kept,
)
from goatbeat.stores.rows import (
    decode_due,
    decode_pending,
    execution_from_row,
    read_schedule,
    schedule_from_row,
)

__all__ = ["MemoryStore"]

_WAITING = frozenset({ExecutionStatus.CLAIMED.value, ExecutionStatus.BUFFERED.value})
"""Statuses of an execution that was never sent and still could be."""
_REQUESTED = frozenset({ExecutionKind.MANUAL.value, ExecutionKind.BACKFILL.value})
"""Kinds of the executions the leader claims on request (:meth:`claim_manual_runs`)."""
_FAILED = frozenset({ExecutionStatus.FAILED.value, ExecutionStatus.SUBMIT_FAILED.value})
_FINAL_OUTCOMES = frozenset({Outcome.SUCCEEDED, Outcome.FAILED})
"""Reports that end a run (a retried one runs on)."""
_REPORTED = frozenset(
    s.value
    for s in (
        ExecutionStatus.RUNNING,
        ExecutionStatus.RETRIED,
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
    )
)


class MemoryStore:
    """An in-process ScheduleStore. ``migrate()`` is a no-op; ``wait()`` wakes on ``notify()``
    from any thread."""

    def __init__(self, clock: Clock | None = None, *, planner: Planner | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.planner: Planner = planner or default_plan
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(threading.Lock())
        self._notified = 0
        self._seen = 0
        self._schedules: dict[int, dict[str, Any]] = {}
        self._by_name: dict[str, int] = {}
        self._executions: dict[int, dict[str, Any]] = {}
        self._by_key: dict[str, int] = {}
        self._leases: dict[str, dict[str, Any]] = {}
        self._schedulers: dict[str, dict[str, Any]] = {}
        self._misses: list[tuple[datetime, Miss]] = []
        self._schedule_ids = itertools.count(1)
        self._execution_ids = itertools.count(1)

    # -- lifecycle -------------------------------------------------------------------------

    def migrate(self) -> None:
        return None

    def close(self) -> None:
        return None

    def now(self) -> datetime:
        return utc(self.clock.now())  # type: ignore[return-value]

    def info(self) -> dict[str, Any]:
        return {"kind": "memory", "database": None, "schema_version": SCHEMA_VERSION}

    # -- schedules -------------------------------------------------------------------------

    def _insert(self, row: dict[str, Any], now: datetime) -> dict[str, Any]:
        row = dict(row)
        row.update(
            id=next(self._schedule_ids),
            last_status=None,
            missed_count=0,
            version=1,
            created_at=now,
            updated_at=now,
            paused=False,
            paused_at=None,
            paused_by=None,
            pause_note="",
            skipped_count=0,
            active_execution_id=None,
        )
        self._schedules[row["id"]] = row
        self._by_name[row["name"]] = row["id"]
        return row

    def _row(self, name: str) -> dict[str, Any]:
        sid = self._by_name.get(name)
        if sid is None:
            raise ScheduleNotFound(name)
        return self._schedules[sid]

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
        with self._lock:
            now = self.now()
            existing = {
                s.name: self._schedules[self._by_name[s.name]]
                for s in schedules
                if s.name in self._by_name
            }
            actions = plan_publish(
                schedules,
                existing,
                source=source,
                now=now,
                definitions=definitions,
                follow_last_run=follow_last_run,
            )
            orphaned = orphans(
                (
                    row["name"]
                    for row in self._schedules.values()
                    if row["source"] == Source(source).value and row["enabled"]
                ),
                schedules,
                source=source,
            )
            if dry_run:
                return actions.result(orphaned=orphaned, dry_run=True)
            for row in actions.inserts:
                self._insert(row, now)
            for rep in actions.replaces:
                stored = self._schedules[rep.id]
                stored.update(
                    without_kept(rep.values), version=stored["version"] + 1, updated_at=now
                )
            for sid, printed in actions.fingerprints:
                self._schedules[sid]["published_fingerprint"] = printed
        if actions.changed:
            self.notify("schedule:0")
        return actions.result(orphaned=orphaned)

    def edited_since_publish(self, names: Collection[str]) -> set[str]:
        wanted = set(names)
        with self._lock:
            return {
                row["name"]
                for row in self._schedules.values()
                if row["name"] in wanted and edited(row)
            }

    def prune(self, keep: Collection[str], *, source: Source = Source.CODE) -> list[str]:
        keep_set = set(keep)
        source = Source(source)
        pruned: list[str] = []
        with self._lock:
            now = self.now()
            for row in self._schedules.values():
                if row["source"] == source.value and row["enabled"] and row["name"] not in keep_set:
                    row.update(
                        enabled=False,
                        next_run_at=None,
                        version=row["version"] + 1,
                        updated_at=now,
                    )
                    pruned.append(row["name"])
        if pruned:
            self.notify("schedule:0")
        return sorted(pruned)

    def create(self, schedule: Schedule) -> Schedule:
        definition = validate_schedule(schedule)
        with self._lock:
            if schedule.name in self._by_name:
                raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} already exists")
            now = self.now()
            row = schedule_to_row(
                schedule,
                source=schedule.source,
                enabled=schedule.enabled,
                next_run_at=first_run(schedule, schedule.last_run_at or now),
                definition=definition,
            )
            stored = self._insert(row, now)
            result = schedule_from_row(stored)
        self.notify(f"schedule:{result.id}")
        return result

    def update(self, schedule: Schedule, *, expected_version: int | None = None) -> Schedule:
        definition = validate_schedule(schedule)
        with self._lock:
            row = self._row(schedule.name)
            if expected_version is not None and row["version"] != expected_version:
                raise ConflictError(
                    f"schedule {schedule.name!r} is at version {row['version']}, "
                    f"not {expected_version}"
                )
            now = self.now()
            values = update_values(schedule, row, now=now, definition=definition)
            row.update(without_kept(values), version=row["version"] + 1, updated_at=now)
            result = schedule_from_row(row)
        self.notify(f"schedule:{result.id}")
        return result

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        with self._lock:
            row = self._row(name)
            now = self.now()
            values = enabled_values(row, enabled, now=now)
            if values is None:
                return read_schedule(row)
            row.update(values, version=row["version"] + 1, updated_at=now)
            result = read_schedule(row)
        self.notify(f"schedule:{result.id}")
        return result

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        note, by = check_pause(note, by)
        with self._lock:
            row = self._row(name)
            now = self.now()
            withdrawn = 0
            for e in self._executions.values():
                if e["schedule_id"] == row["id"] and self._waiting_to_start(e, now):
                    e.update(status=ExecutionStatus.SKIPPED.value, error=PAUSE_WITHDRAWN)
                    e["retry_at"] = None
                    withdrawn += 1
            row.update(
                pause_values(row, note=note, by=by, now=now),
                skipped_count=row["skipped_count"] + withdrawn,
                version=row["version"] + 1,
                updated_at=now,
            )
            result = read_schedule(row)
        self.notify(f"schedule:{result.id}")
        return result

    @staticmethod
    def _waiting_to_start(e: dict[str, Any], now: datetime) -> bool:
        """Buffered, or claimed and never tried, waiting for its jittered instant."""
        if e["status"] == ExecutionStatus.BUFFERED.value:
            return True
        return (
            e["status"] == ExecutionStatus.CLAIMED.value
            and e["kind"] == ExecutionKind.SCHEDULED.value
            and e["attempts"] == 0
            and e["retry_at"] is not None
            and e["retry_at"] > now
        )

    def resume(
        self, name: str, *, catch_up: bool = False, now: datetime | None = None
    ) -> ResumeResult:
        with self._lock:
            row = self._row(name)
            at = utc(now) or self.now()
            planned = resume_values(row, catch_up=catch_up, now=at)
            if planned is None:
                return ResumeResult(schedule=read_schedule(row), was_paused=False)
            row.update(planned.values, version=row["version"] + 1, updated_at=self.now())
            stored = read_schedule(row)
        self.notify(f"schedule:{stored.id}")
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
        with self._lock:
            row = self._row(name)
            at = utc(now) or self.now()
            instants = backfill_instants(row, start=start, end=end, limit=limit, now=at)
            existing: dict[datetime, str] = {}
            created: list[datetime] = []
            claimed_at = self.now()
            for instant in instants:
                key = idempotency_key(name, instant)
                found = self._by_key.get(key)
                if found is not None:
                    existing[instant] = self._executions[found]["status"]
                    continue
                created.append(instant)
                if not dry_run:
                    self._insert_execution(
                        schedule_id=row["id"],
                        schedule_name=name,
                        scheduled_at=instant,
                        key=key,
                        kind=ExecutionKind.BACKFILL,
                        token=None,
                        scheduler_id=None,
                        claimed_at=claimed_at,
                    )
        if created and not dry_run:
            self.notify(f"schedule:{row['id']}")
        return BackfillResult(
            name=name, instants=instants, created=created, existing=existing, dry_run=dry_run
        )

    def delete(self, name: str) -> None:
        with self._lock:
            row = self._row(name)
            del self._schedules[row["id"]]
            del self._by_name[name]
            for execution in self._executions.values():
                if execution["schedule_id"] == row["id"]:
                    execution["schedule_id"] = None
                    if execution["status"] in _WAITING:
                        execution["status"] = ExecutionStatus.SUBMIT_FAILED.value
                        execution["error"] = ABANDONED_ERROR
        self.notify(f"schedule:{row['id']}")

    def write_raw(self, name: str, **columns: Any) -> None:
        """Test hook: overwrite columns of the row ``name`` with raw values, unchecked and
        without bumping its version, as a hand-written SQL ``UPDATE`` would (JSON columns hold
        decoded values here, instants aware datetimes). For tests of damaged rows only."""
        with self._lock:
            row = self._row(name)
            unknown = set(columns) - set(row)
            if unknown:
                raise KeyError(f"no column(s) {sorted(unknown)}")
            row.update(columns)

    def get(self, name: str) -> StoredSchedule:
        with self._lock:
            return read_schedule(self._row(name))

    def list_schedules(self, *, source: Source | None = None) -> list[StoredSchedule]:
        with self._lock:
            rows = [
                row
                for row in self._schedules.values()
                if source is None or row["source"] == Source(source).value
            ]
            return [read_schedule(r) for r in sorted(rows, key=lambda r: r["name"])]

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self._lock:
            now = self.now()
            lease = self._leases.get(name)
            if lease is None:
                lease = {"holder": holder, "token": 1, "expires_at": now + ttl, "acquired_at": now}
                self._leases[name] = lease
            elif lease["holder"] == holder or lease["expires_at"] <= now:
                if lease["holder"] != holder:
                    lease.update(holder=holder, token=lease["token"] + 1, acquired_at=now)
                lease["expires_at"] = now + ttl
            else:
                return None
            return LeaseGrant(
                name=name, holder=holder, token=lease["token"], expires_at=lease["expires_at"]
            )

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        with self._lock:
            now = self.now()
            lease = self._leases.get(name)
            if (
                lease is None
                or lease["holder"] != holder
                or lease["token"] != token
                or lease["expires_at"] <= now
            ):
                return False
            lease["expires_at"] = now
        payload = lease_payload(name)
        if payload is not None:
            self.notify(payload)
        return True

    def read_lease(self, name: str) -> tuple[str, int, datetime, bool] | None:
        with self._lock:
            lease = self._leases.get(name)
            if lease is None:
                return None
            return (
                lease["holder"],
                lease["token"],
                lease["expires_at"],
                lease["expires_at"] <= self.now(),
            )

    def _lease_valid(self, lease: LeaseGrant) -> bool:
        row = self._leases.get(lease.name)
        return (
            row is not None
            and row["holder"] == lease.holder
            and row["token"] == lease.token
            and row["expires_at"] > self.now()
        )

    # -- claiming --------------------------------------------------------------------------

    def next_due_at(self) -> datetime | None:
        with self._lock:
            due = [
                r["next_run_at"]
                for r in self._schedules.values()
                if r["enabled"] and not r["paused"] and r["next_run_at"] is not None
            ]
            for e in self._executions.values():
                if e["status"] == ExecutionStatus.BUFFERED.value:
                    at = self._buffer_ready_at(e)
                    if at is not None:
                        due.append(at)
            return min(due, default=None)

    def _active_run(self, row: dict[str, Any], now: datetime) -> bool:
        """Whether the run the schedule's overlap policy waits for is still running."""
        e = self._executions.get(row.get("active_execution_id") or 0)
        if e is None:
            return False
        return run_active(e["status"], e["submitted_at"], e["claimed_at"], row["max_runtime"], now)

    def _buffer_ready_at(self, e: dict[str, Any]) -> datetime | None:
        """When a buffered occurrence may start: at once when its schedule's run ended, when
        that run expires (max_runtime), or unknown (None) while it waits to be sent."""
        row = self._schedules.get(e["schedule_id"])
        if row is None:
            return None
        run = self._executions.get(row.get("active_execution_id") or 0)
        if run is None or run["status"] not in ACTIVE_STATUSES:
            return e["scheduled_at"]  # type: ignore[no-any-return]
        if run["status"] == ExecutionStatus.CLAIMED.value or row["max_runtime"] is None:
            return None
        since = run["submitted_at"] or run["claimed_at"]
        return since + timedelta(seconds=float(row["max_runtime"]))  # type: ignore[no-any-return]

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
        with self._lock:
            if not self._lease_valid(lease):
                return ClaimResult(occurrences=[], refused=True)
            at = utc(now) or self.now()
            rows = heapq.nsmallest(
                limit,
                (
                    r
                    for r in self._schedules.values()
                    if r["enabled"]
                    and not r["paused"]
                    and r["next_run_at"] is not None
                    and r["next_run_at"] <= at
                ),
                key=lambda r: (r["next_run_at"], r["id"]),
            )
            seen, damaged = decode_due(rows, schedule_from_row)
            runs = {
                r["id"]: (self._active_run(r, at), self._has_buffered(r["id"]))
                for r in rows
                if r["overlap"] != "allow"
            }
        # Planned without the lock, like the SQL stores plan between their read and their
        # write: an edit that lands meanwhile must win the compare-and-set below.
        batch = plan_batch(seen, at, self.planner, runs)
        batch.schedules_seen = len(rows)
        with self._lock:
            if not self._lease_valid(lease):
                return ClaimResult(occurrences=[], refused=True)
            quarantined = []
            for d in damaged:
                assert d.id is not None
                row = self._schedules.get(d.id)
                if row is not None and row["version"] == d.version:
                    # Out of scheduling until repaired (compare-and-set: a repair wins).
                    row.update(
                        next_run_at=None, last_status=SCHEDULE_INVALID, version=d.version + 1
                    )
                    quarantined.append(d)
            claimed_at = self.now()
            advanced: set[int] = set()
            for adv in batch.advances:
                assert adv.schedule.id is not None
                row = self._schedules.get(adv.schedule.id)
                if row is None or row["version"] != adv.schedule.version:
                    continue
                advanced.add(adv.schedule.id)
                row.update(
                    next_run_at=None if adv.disable else adv.plan.next_run_at,
                    last_run_at=adv.last_run_at or row["last_run_at"],
                    last_status=adv.last_status or row["last_status"],
                    total_run_count=row["total_run_count"] + len(adv.starts),
                    missed_count=row["missed_count"] + adv.plan.missed,
                    skipped_count=row["skipped_count"] + len(adv.skips),
                    enabled=row["enabled"] and not adv.disable,
                    version=row["version"] + 1,
                )
            occurrences: list[Occurrence] = []
            deferred = 0
            buffered = 0
            for planned in batch.executions_for(advanced):
                schedule, key = planned.schedule, planned.key
                if key in self._by_key:
                    continue
                wait = planned.due_at is not None and planned.due_at > at
                execution_id = self._insert_execution(
                    schedule_id=schedule.id,
                    schedule_name=schedule.name,
                    scheduled_at=planned.scheduled_at,
                    key=key,
                    kind=ExecutionKind.SCHEDULED,
                    token=lease.token,
                    scheduler_id=scheduler_id,
                    claimed_at=claimed_at,
                    status=planned.status,
                    retry_at=planned.due_at if wait else None,
                )
                if planned.status == ExecutionStatus.BUFFERED.value:
                    buffered += 1
                if planned.status != ExecutionStatus.CLAIMED.value:
                    continue
                if schedule.overlap is not OverlapPolicy.ALLOW:
                    assert schedule.id is not None
                    self._schedules[schedule.id]["active_execution_id"] = execution_id
                if wait:
                    deferred += 1
                    continue
                occurrences.append(
                    occurrence_for(
                        schedule,
                        execution_id=execution_id,
                        scheduled_at=planned.scheduled_at,
                        key=key,
                        token=lease.token,
                        due_at=planned.due_at,
                    )
                )
            occurrences.extend(self._promote_buffered(lease, scheduler_id, claimed_at))
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

    def _has_buffered(self, schedule_id: int) -> bool:
        return any(
            e["schedule_id"] == schedule_id and e["status"] == ExecutionStatus.BUFFERED.value
            for e in self._executions.values()
        )

    def _promote_buffered(
        self, lease: LeaseGrant, scheduler_id: str, now: datetime
    ) -> list[Occurrence]:
        """Buffered occurrences whose schedule's run has ended (or expired) start now: they
        become this claim's, and their schedule's run to wait for."""
        ready = [
            e
            for e in self._executions.values()
            if e["status"] == ExecutionStatus.BUFFERED.value
            and e["schedule_id"] in self._schedules
            and not self._active_run(self._schedules[e["schedule_id"]], now)
        ]
        joined_rows = []
        for e in sorted(ready, key=lambda e: e["id"]):
            e.update(
                status=ExecutionStatus.CLAIMED.value,
                fencing_token=lease.token,
                scheduler_id=scheduler_id,
                claimed_at=now,
            )
            row = self._schedules[e["schedule_id"]]
            row.update(
                active_execution_id=e["id"],
                total_run_count=row["total_run_count"] + 1,
                last_status=ExecutionStatus.CLAIMED.value,
            )
            joined_rows.append(self._joined(e))
        out, failed = decode_pending(joined_rows)
        for execution_id, error in failed:  # nothing can submit them
            self._executions[execution_id].update(
                status=ExecutionStatus.SUBMIT_FAILED.value, error=error
            )
        return out

    def _joined(self, e: dict[str, Any]) -> dict[str, Any]:
        """An execution row with its schedule's definition columns, as pending reads it."""
        schedule = self._schedules[e["schedule_id"]]
        joined = {name: schedule[name] for name in DEFINITION_COLUMNS}
        joined.update(e, execution_id=e["id"])
        return joined

    def _insert_execution(
        self,
        *,
        schedule_id: int | None,
        schedule_name: str,
        scheduled_at: datetime,
        key: str,
        kind: ExecutionKind,
        token: int | None,
        scheduler_id: str | None,
        claimed_at: datetime,
        status: str = ExecutionStatus.CLAIMED.value,
        retry_at: datetime | None = None,
    ) -> int:
        execution_id = next(self._execution_ids)
        self._executions[execution_id] = {
            "id": execution_id,
            "schedule_id": schedule_id,
            "schedule_name": schedule_name,
            "scheduled_at": scheduled_at,
            "idempotency_key": key,
            "kind": kind.value,
            "status": status,
            "fencing_token": token,
            "scheduler_id": scheduler_id,
            "claimed_at": claimed_at,
            "submitted_at": None,
            "finished_at": None,
            "attempts": 0,
            "backend_task_id": None,
            "error": None,
            "retry_at": retry_at,
        }
        self._by_key[key] = execution_id
        return execution_id

    def pending(self, *, limit: int, exclude: Collection[int] = ()) -> list[Occurrence]:
        check_positive("limit", limit)
        skip = set(check_execution_ids("exclude", exclude))
        with self._lock:
            now = self.now()
            rows = sorted(
                (
                    e
                    for e in self._executions.values()
                    if e["status"] == ExecutionStatus.CLAIMED.value
                    and e["schedule_id"] in self._schedules
                    and e["id"] not in skip
                    and (e.get("retry_at") is None or e["retry_at"] <= now)
                ),
                key=lambda e: (e["claimed_at"], e["id"]),
            )[:limit]
            out, failed = decode_pending([self._joined(e) for e in rows])
            for execution_id, error in failed:  # nothing can submit them
                self._executions[execution_id].update(
                    status=ExecutionStatus.SUBMIT_FAILED.value, error=error
                )
            return out

    def next_retry_at(self) -> datetime | None:
        with self._lock:
            waiting = [
                e["retry_at"]
                for e in self._executions.values()
                if e["status"] == ExecutionStatus.CLAIMED.value and e.get("retry_at") is not None
            ]
        return min(waiting, default=None)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        with self._lock:
            now = self.now()
            latest: dict[int, tuple[datetime, str]] = {}
            missed: dict[int, int] = {}
            for outcome in outcomes:
                e = self._executions.get(outcome.execution_id)
                if e is None:
                    continue
                if e["status"] != ExecutionStatus.CLAIMED.value:
                    if not (outcome.ok and e["status"] in _REPORTED):
                        continue
                    # A worker reported before this bookkeeping: keep what it said.
                    e.update(submitted_at=now, backend_task_id=outcome.backend_task_id)
                elif outcome.ok:
                    e.update(
                        status=ExecutionStatus.SUBMITTED.value,
                        submitted_at=now,
                        backend_task_id=outcome.backend_task_id,
                        error=None,
                        retry_at=None,
                    )
                else:
                    status = (
                        ExecutionStatus.SUBMIT_FAILED if outcome.final else ExecutionStatus.CLAIMED
                    )
                    retry_at = None
                    if not outcome.final and outcome.retry_in is not None:
                        retry_at = now + timedelta(seconds=max(0.0, float(outcome.retry_in)))
                    e.update(status=status.value, error=outcome.error, retry_at=retry_at)
                e["attempts"] += 1
                sid = e["schedule_id"]
                if sid is None:
                    continue
                was_missed = not outcome.ok and outcome.final and outcome.missed
                if was_missed:
                    missed[sid] = missed.get(sid, 0) + 1
                shown = "missed" if was_missed else e["status"]
                if sid not in latest or latest[sid][0] <= e["scheduled_at"]:
                    latest[sid] = (e["scheduled_at"], shown)
            for sid, (_, shown) in latest.items():
                if sid in self._schedules:
                    self._schedules[sid]["last_status"] = shown
                    self._schedules[sid]["missed_count"] += missed.get(sid, 0)

    def refuse(self, schedule_id: int, task: str, *, reason: str) -> bool:
        with self._lock:
            row = self._schedules.get(int(schedule_id))
            if row is None or row["task"] != task:
                return False
            for e in self._executions.values():
                if e["schedule_id"] == row["id"] and e["status"] == ExecutionStatus.CLAIMED.value:
                    e.update(
                        status=ExecutionStatus.SUBMIT_FAILED.value, error=reason, retry_at=None
                    )
            parked = row["last_status"] == "refused" and row["next_run_at"] is None
            if row["source"] != Source.CODE.value and not parked:
                row.update(next_run_at=None, version=row["version"] + 1, updated_at=self.now())
            row["last_status"] = "refused"
        return True

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        wanted = check_execution_ids("execution_ids", execution_ids)
        claimed: list[int] = []
        with self._lock:
            if not self._lease_valid(lease):
                return claimed
            for execution_id in wanted:
                e = self._executions.get(execution_id)
                if (
                    e is None
                    or e["kind"] not in _REQUESTED
                    or e["status"] != ExecutionStatus.CLAIMED.value
                    or e["fencing_token"] is not None
                ):
                    continue
                e.update(
                    scheduler_id=scheduler_id, fencing_token=lease.token, claimed_at=self.now()
                )
                claimed.append(execution_id)
                schedule = self._schedules.get(e["schedule_id"])
                if schedule is None:
                    continue
                if schedule["last_run_at"] is None or schedule["last_run_at"] < e["scheduled_at"]:
                    schedule["last_run_at"] = e["scheduled_at"]
                schedule["total_run_count"] += 1
                schedule["last_status"] = ExecutionStatus.CLAIMED.value
        return claimed

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.FAILED
        return self.record_completion(idempotency_key, outcome=outcome, error=error)

    def record_started(self, idempotency_key: str, *, worker: str | None = None) -> bool:
        key = ops.check_key(idempotency_key)
        worker = ops.check_worker(worker)
        with self._lock:
            execution_id = self._by_key.get(key)
            if execution_id is None:
                return False
            e = self._executions[execution_id]
            e.update(status=ExecutionStatus.RUNNING.value, started_at=self.now())
            if worker is not None:
                e["worker"] = worker
            self._report_to_schedule(e, ExecutionStatus.RUNNING.value, counts_failure=False)
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
        with self._lock:
            execution_id = self._by_key.get(report.key)
            if execution_id is None:
                return False
            e = self._executions[execution_id]
            now = self.now()
            seconds = report.runtime
            if seconds is None and e.get("started_at") is not None:
                seconds = (now - e["started_at"]).total_seconds()
            previous = e["status"]
            e.update(
                status=report.outcome.value, finished_at=now, error=report.error, runtime=seconds
            )
            if report.worker is not None:
                e["worker"] = report.worker
            if report.outcome is Outcome.RETRIED:
                e["retries"] = e.get("retries", 0) + 1
            self._report_to_schedule(
                e,
                report.outcome.value,
                counts_failure=previous != ExecutionStatus.FAILED.value,
            )
            sid = e["schedule_id"]
            waiting = report.outcome in _FINAL_OUTCOMES and self._has_buffered(sid)
            pause = failure_pause(report.outcome.value, self._schedules.get(sid))
        if waiting:  # the run ended: the leader starts the buffered occurrence now
            self.notify(f"schedule:{sid}")
        if pause is not None:
            pause_after_failures(self, *pause)
        return True

    def _report_to_schedule(self, e: dict[str, Any], status: str, *, counts_failure: bool) -> None:
        schedule = self._schedules.get(e["schedule_id"])
        if schedule is None:
            return
        if schedule["last_run_at"] is None or e["scheduled_at"] >= schedule["last_run_at"]:
            schedule["last_status"] = status
        if status == ExecutionStatus.SUCCEEDED.value:
            schedule.update(last_success_at=self.now(), consecutive_failures=0)
        elif status == ExecutionStatus.FAILED.value:
            schedule["last_failure_at"] = self.now()
            if counts_failure:
                schedule["consecutive_failures"] = schedule.get("consecutive_failures", 0) + 1

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        with self._lock:
            row = self._row(name)
            schedule_from_row(row)  # a damaged schedule cannot run: DamagedRow
            at = utc(now) or self.now()
            key = manual_key(name, at)
            execution_id = self._by_key.get(key)
            if execution_id is None:
                execution_id = self._insert_execution(
                    schedule_id=row["id"],
                    schedule_name=name,
                    scheduled_at=at,
                    key=key,
                    kind=ExecutionKind.MANUAL,
                    token=None,
                    scheduler_id=None,
                    claimed_at=self.now(),
                )
            execution = execution_from_row(self._executions[execution_id])
        self.notify(f"run:{execution.id}")
        return execution

    def executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[Execution]:
        check_positive("limit", limit)
        wanted = None if status is None else ExecutionStatus(status).value
        with self._lock:
            rows = [
                e
                for e in self._executions.values()
                if (name is None or e["schedule_name"] == name)
                and (wanted is None or e["status"] == wanted)
            ]
            rows.sort(key=lambda e: (e["scheduled_at"], e["id"]), reverse=True)
            return [execution_from_row(e) for e in rows[:limit]]

    # -- operations --------------------------------------------------------------------------

    def heartbeat(self, beat: SchedulerBeat) -> None:
        beat = ops.check_beat(beat)
        with self._lock:
            now = self.now()
            row = self._schedulers.get(beat.scheduler_id)
            self._schedulers[beat.scheduler_id] = {
                "scheduler_id": beat.scheduler_id,
                "role": beat.role.value,
                "lease": beat.lease,
                "fencing_token": beat.fencing_token,
                "hostname": beat.hostname,
                "pid": beat.pid,
                "version": beat.version,
                "started_at": now if row is None else row["started_at"],
                "heartbeat_at": now,
                "expires_at": now + beat.ttl,
            }
            before = now - STALE_RETENTION
            for sid in [s for s, r in self._schedulers.items() if r["expires_at"] < before]:
                del self._schedulers[sid]

    def remove_scheduler(self, scheduler_id: str) -> None:
        with self._lock:
            self._schedulers.pop(scheduler_id, None)

    def record_misses(self, misses: Sequence[Miss], *, scheduler_id: str) -> None:
        checked = ops.check_misses(misses)
        with self._lock:
            now = self.now()
            for miss in checked:
                self._misses.append((now, miss))
            before = now - MISS_RETENTION
            self._misses = [(at, m) for at, m in self._misses if at >= before]

    def status(
        self,
        *,
        lease_name: str = "scheduler",
        window: timedelta = STATUS_WINDOW,
        now: datetime | None = None,
    ) -> StatusSnapshot:
        window = ops.check_window(window)
        with self._lock:
            store_now = self.now()
            at = utc(now) or store_now
            lease = self._leases.get(lease_name)
            lease_state = (
                None
                if lease is None
                else LeaseState(
                    name=lease_name,
                    holder=lease["holder"],
                    token=lease["token"],
                    expires_at=lease["expires_at"],
                    valid=lease["expires_at"] > store_now,
                )
            )
            schedulers = [
                ops.scheduler_from_row({**r, "stale": r["expires_at"] <= store_now})
                for r in sorted(
                    self._schedulers.values(), key=lambda r: (r["role"], r["scheduler_id"])
                )
            ]
            due = [
                (r["next_run_at"], r["name"])
                for r in self._schedules.values()
                if r["enabled"]
                and not r["paused"]
                and r["next_run_at"] is not None
                and r["next_run_at"] <= at
            ]
            pending = [
                (e["scheduled_at"], e["schedule_name"])
                for e in self._executions.values()
                if e["status"] == ExecutionStatus.CLAIMED.value and e["scheduled_at"] <= at
            ]
            since = at - window
            failed = sum(
                1
                for e in self._executions.values()
                if e["status"] in _FAILED and since < e["scheduled_at"] <= at
            )
            missed = sum(m.count for t, m in self._misses if t > since)
        oldest = min(due + pending, default=None)
        return StatusSnapshot(
            now=at,
            lease=lease_state,
            schedulers=schedulers,
            due=len(due),
            pending=len(pending),
            oldest_due_at=None if oldest is None else oldest[0],
            oldest_due_name=None if oldest is None else oldest[1],
            missed=missed,
            failed=failed,
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
        with self._lock:
            at = utc(now) or self.now()
            late = ops.late_instant(at, overdue_after)
            found = []
            for r in self._schedules.values():
                values = {
                    "enabled": bool(r["enabled"]),
                    "next_run_at": r["next_run_at"],
                    "last_run_at": r["last_run_at"],
                    "last_success_at": r.get("last_success_at"),
                    "last_failure_at": r.get("last_failure_at"),
                }
                # A paused schedule owes nothing while paused, as a disabled one.
                active = bool(r["enabled"]) and not r["paused"]
                overdue = is_overdue(
                    **{**values, "enabled": active}, now=at, overdue_after=overdue_after
                )
                reports = values["last_success_at"] or values["last_failure_at"]
                late_due = active and r["next_run_at"] is not None
                late_due = late_due and r["next_run_at"] <= late
                if not (reports or r["missed_count"] > 0 or late_due):
                    continue
                found.append(
                    ops.health_from_row(
                        {
                            **values,
                            "name": r["name"],
                            "last_status": r["last_status"],
                            "consecutive_failures": r.get("consecutive_failures", 0),
                            "missed_count": r["missed_count"],
                            "overdue": overdue,
                        }
                    )
                )
        found.sort(key=lambda h: (not h.overdue, -h.consecutive_failures, h.name))
        return found if limit is None else found[:limit]

    # -- wake-ups --------------------------------------------------------------------------

    def notify(self, payload: str) -> None:
        check_payload(payload)
        with self._wakeup:
            self._notified += 1
            self._wakeup.notify_all()

    def wait(self, timeout: float) -> bool:
        # A notification sent while nobody waited is not lost: like a LISTENing connection,
        # the store remembers what it has already reported.
        with self._wakeup:
            arrived = self._wakeup.wait_for(
                lambda: self._notified != self._seen, timeout=max(0.0, timeout)
            )
            self._seen = self._notified
            return arrived
