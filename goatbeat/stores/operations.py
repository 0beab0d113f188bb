"""DialectStore's operations, as a mixin it inherits (:class:`OperationsMixin`): the workers'
reports (started, finished, several at once), ending lost runs, refusals, and what the
operators read and the schedulers write about themselves (heartbeats, misses, status, schedule
health); and the checks each value passes before it is written, and the rows read back into
the values of :mod:`goatbeat.core.health` (schema version 5).

Reports come from workers, over which goatbeat has no say: a report that cannot be stored as
given raises ``InvalidValue`` naming the field, and an error text or worker name longer than
the column is cut, never refused (a report must not fail because a traceback is long).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.errors import InvalidValue, short_repr
from goatbeat.core.health import (
    LOST_LOOKBACK,
    MISS_RETENTION,
    STALE_RETENTION,
    STATUS_WINDOW,
    LeaseState,
    Outcome,
    Refusal,
    Refusals,
    Role,
    ScheduleHealth,
    SchedulerBeat,
    SchedulerProcess,
    StatusSnapshot,
    judge_open_run,
)
from goatbeat.core.model import Miss
from goatbeat.core.store import EndedRun
from goatbeat.stores.arguments import check_positive
from goatbeat.stores.control import pause_after_failures
from goatbeat.stores.definitions import utc
from goatbeat.stores.dialect import Dialect, Tx

__all__ = [
    "BOUND_REFRESH",
    "MAX_ERROR_LENGTH",
    "OperationsMixin",
    "Report",
    "check_report",
    "check_key",
    "check_worker",
    "check_beat",
    "check_misses",
    "check_window",
    "check_limit",
    "scheduler_from_row",
    "health_from_row",
    "late_instant",
]

MAX_ERROR_LENGTH = 4000
"""An error text is kept to this many characters (its end: the exception's own line)."""

_MAX_TEXT = 255


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > _MAX_TEXT:
        raise InvalidValue("idempotency_key", key, f"{short_repr(key)} is not an idempotency key")
    return key


def check_worker(worker: object) -> str | None:
    if worker is None:
        return None
    if not isinstance(worker, str):
        raise InvalidValue("worker", worker, f"{short_repr(worker)} is not a string")
    return worker[:_MAX_TEXT] or None


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A checked completion report."""

    key: str
    outcome: Outcome
    error: str | None
    runtime: float | None
    worker: str | None


def check_report(
    key: object, outcome: object, error: object, runtime: object, worker: object
) -> Report:
    try:
        checked = Outcome(str(outcome))
    except ValueError:
        raise InvalidValue(
            "outcome", outcome, f"{short_repr(outcome)} is not one of {', '.join(Outcome)}"
        ) from None
    text: str | None = None
    if error is not None:
        if not isinstance(error, str):
            raise InvalidValue("error", error, f"{short_repr(error)} is not a string")
        text = error if len(error) <= MAX_ERROR_LENGTH else "..." + error[3 - MAX_ERROR_LENGTH :]
    seconds: float | None = None
    if runtime is not None:
        if (
            isinstance(runtime, bool)
            or not isinstance(runtime, (int, float))
            or not math.isfinite(runtime)
            or runtime < 0
        ):
            raise InvalidValue("runtime", runtime, f"{short_repr(runtime)} is not seconds >= 0")
        seconds = float(runtime)
    return Report(
        key=check_key(key),
        outcome=checked,
        error=None if checked is Outcome.SUCCEEDED else text,
        runtime=seconds,
        worker=check_worker(worker),
    )


def check_beat(beat: object) -> SchedulerBeat:
    if not isinstance(beat, SchedulerBeat):
        raise InvalidValue("beat", beat, f"{short_repr(beat)} is not a SchedulerBeat")
    sid = beat.scheduler_id
    if not isinstance(sid, str) or not sid or len(sid) > _MAX_TEXT:
        raise InvalidValue("scheduler_id", sid, f"{short_repr(sid)} is not a scheduler id")
    try:
        role = Role(beat.role)
    except ValueError:
        raise InvalidValue(
            "role", beat.role, f"{short_repr(beat.role)} is not one of {', '.join(Role)}"
        ) from None
    if not isinstance(beat.ttl, timedelta) or beat.ttl <= timedelta(0):
        raise InvalidValue("ttl", beat.ttl, f"{short_repr(beat.ttl)} must be a positive duration")
    return replace(
        beat,
        role=role,
        lease=str(beat.lease)[:64],
        hostname=str(beat.hostname)[:_MAX_TEXT],
        version=str(beat.version)[:64],
    )


def check_misses(misses: Sequence[Miss]) -> list[Miss]:
    out = []
    for miss in misses:
        if not isinstance(miss, Miss):
            raise InvalidValue("misses", miss, f"{short_repr(miss)} is not a Miss")
        if isinstance(miss.count, bool) or not isinstance(miss.count, int) or miss.count < 1:
            raise InvalidValue("count", miss.count, f"{short_repr(miss.count)} is not >= 1")
        out.append(miss)
    return out


def check_window(window: object) -> timedelta:
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise InvalidValue("window", window, f"{short_repr(window)} must be a positive duration")
    return window


def check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidValue("limit", limit, f"{short_repr(limit)} is not a positive integer")
    return limit


def late_instant(now: datetime, overdue_after: object) -> datetime:
    """``now - overdue_after``: instants at or before it are overdue."""
    if not isinstance(overdue_after, timedelta) or overdue_after < timedelta(0):
        raise InvalidValue(
            "overdue_after", overdue_after, f"{short_repr(overdue_after)} must be >= 0"
        )
    return now - overdue_after


def scheduler_from_row(row: Mapping[str, Any]) -> SchedulerProcess:
    started, beat, expires = (utc(row[c]) for c in ("started_at", "heartbeat_at", "expires_at"))
    assert started is not None and beat is not None and expires is not None
    return SchedulerProcess(
        scheduler_id=str(row["scheduler_id"]),
        role=Role(row["role"]),
        lease=str(row["lease"]),
        fencing_token=None if row["fencing_token"] is None else int(row["fencing_token"]),
        hostname=str(row["hostname"] or ""),
        pid=None if row["pid"] is None else int(row["pid"]),
        version=str(row["version"] or ""),
        started_at=started,
        heartbeat_at=beat,
        expires_at=expires,
        stale=bool(row["stale"]),
    )


def health_from_row(row: Mapping[str, Any]) -> ScheduleHealth:
    return ScheduleHealth(
        name=str(row["name"]),
        enabled=bool(row["enabled"]),
        last_status=row["last_status"],
        last_run_at=utc(row["last_run_at"]),
        next_run_at=utc(row["next_run_at"]),
        last_success_at=utc(row["last_success_at"]),
        last_failure_at=utc(row["last_failure_at"]),
        consecutive_failures=int(row["consecutive_failures"] or 0),
        missed_count=int(row["missed_count"] or 0),
        overdue=bool(row["overdue"]),
    )


BOUND_REFRESH = timedelta(minutes=5)
"""How long :meth:`DialectStore.end_lost_runs` keeps the longest ``max_runtime``/``expires``
it read (a pass over the schedule table) when no change was written or notified meanwhile."""


class OperationsMixin:
    """DialectStore's operations (see the module docstring); the store gives it ``dialect``,
    ``supports_shards`` and the kept longest bound ``_bound``."""

    dialect: Dialect
    supports_shards: bool
    _bound: tuple[datetime, float] | None

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        outcome = Outcome.SUCCEEDED if succeeded else Outcome.FAILED
        return self.record_completion(idempotency_key, outcome=outcome, error=error)

    def record_started(self, idempotency_key: str, *, worker: str | None = None) -> bool:
        key = check_key(idempotency_key)
        worker = check_worker(worker)
        with self.dialect.session() as tx:
            return tx.record_started(key, worker)

    def record_completion(
        self,
        idempotency_key: str,
        *,
        outcome: Outcome,
        error: str | None = None,
        runtime: float | None = None,
        worker: str | None = None,
    ) -> bool:
        report = check_report(idempotency_key, outcome, error, runtime, worker)
        with self.dialect.session() as tx:
            done = tx.record_completion(
                report.key, report.outcome.value, report.error, report.runtime, report.worker
            )
        if done.pause is not None:
            pause_after_failures(self, *done.pause)
        return done.matched

    def record_reports(self, reports: Sequence[Mapping[str, Any]]) -> list[bool]:
        """Several worker reports, written in the order given in one transaction (one commit
        for all: what the reporter process of :mod:`goatbeat.completion.relay` writes at
        once). Each is ``{"event": "started", "key", "worker"}`` or ``{"event": "finished",
        "key", "outcome", "error", "runtime", "worker"}``; whether each matched a run, as
        :meth:`record_started` and :meth:`record_completion` say. Every report is checked
        before anything is written (``InvalidValue`` naming the field)."""
        checked: list[tuple[str, Any]] = []
        for report in reports:
            if report.get("event") == "started":
                key = check_key(report.get("key"))
                checked.append(("started", (key, check_worker(report.get("worker")))))
            else:
                fields = ("key", "outcome", "error", "runtime", "worker")
                checked.append(("finished", check_report(*map(report.get, fields))))
        matched: list[bool] = []
        pauses: list[tuple[str, int]] = []
        with self.dialect.transaction() as tx:
            for event, args in checked:
                if event == "started":
                    matched.append(tx.record_started(*args))
                    continue
                done = tx.record_completion(
                    args.key, args.outcome.value, args.error, args.runtime, args.worker
                )
                if done.pause is not None:
                    pauses.append(done.pause)
                matched.append(done.matched)
        for pause in pauses:
            pause_after_failures(self, *pause)
        return matched

    def retry_now(self) -> int:
        with self.dialect.session() as tx:
            return tx.retry_now()

    def refused_schedules(self) -> list[tuple[str, str]]:
        with self.dialect.session() as tx:
            rows = tx.refused_schedules()
        return [(str(r["name"]), str(r["task"])) for r in rows]

    def end_lost_runs(self, *, lost_after: timedelta, limit: int = 1000) -> list[EndedRun]:
        check_positive("limit", limit)
        with self.dialect.session() as tx:
            now = tx.now()
            window = max(lost_after.total_seconds(), self._longest_bound(tx, now))
            since = now - timedelta(seconds=window) - LOST_LOOKBACK
            rows = tx.open_runs(since, limit)
        ended: list[EndedRun] = []
        for row in rows:
            verdict = judge_open_run(
                status=str(row["status"]),
                submitted_at=_aware(row["submitted_at"]),
                started_at=_aware(row["started_at"]),
                finished_at=_aware(row["finished_at"]),
                max_runtime=None if row["max_runtime"] is None else float(row["max_runtime"]),
                expires=None if row["expires"] is None else float(row["expires"]),
                now=now,
                lost_after=lost_after,
            )
            if verdict is None:
                continue
            status, reason = verdict
            key = str(row["idempotency_key"])
            with self.dialect.session() as tx:
                done = tx.record_completion(key, status, reason, None, None, only_open=True)
            if done.pause is not None:
                pause_after_failures(self, *done.pause)
            if done.matched:
                ended.append(
                    EndedRun(
                        schedule_name=str(row["schedule_name"]),
                        idempotency_key=key,
                        status=status,
                        reason=reason,
                    )
                )
        return ended

    def _longest_bound(self, tx: Tx, now: datetime) -> float:
        """The longest ``max_runtime``/``expires``, read again once it is older than
        :data:`BOUND_REFRESH` or after a change. A bound too long only widens the window of
        runs looked at; one that a change made too short (in another process, heard of by no
        notification) only delays ending a run older than the old window, by at most that
        long: no run ends before its own bound, which comes with each run."""
        cached = self._bound
        if cached is not None and timedelta(0) <= now - cached[0] < BOUND_REFRESH:
            return cached[1]
        bound = float(tx.longest_bound())
        self._bound = (now, bound)
        return bound

    # -- operations ----------------------------------------------------------------------------

    def heartbeat(self, beat: SchedulerBeat) -> None:
        beat = check_beat(beat)
        with self.dialect.session() as tx:
            tx.heartbeat(beat, STALE_RETENTION)

    def remove_scheduler(self, scheduler_id: str) -> None:
        with self.dialect.session() as tx:
            tx.remove_scheduler(scheduler_id)

    def record_misses(self, misses: Sequence[Miss], *, scheduler_id: str) -> None:
        checked = check_misses(misses)
        if not checked:
            return
        with self.dialect.session() as tx:
            tx.record_misses(checked, scheduler_id, MISS_RETENTION)

    def status(
        self,
        *,
        lease_name: str = "scheduler",
        window: timedelta = STATUS_WINDOW,
        now: datetime | None = None,
    ) -> StatusSnapshot:
        window = check_window(window)
        with self.dialect.snapshot() as tx:
            # One snapshot for every read, judged at one instant of the store's clock.
            store_now = tx.now()
            at = (now or store_now).astimezone(UTC)
            counts = tx.status_counts(at, at - window)
            oldest = tx.status_oldest(at)
            leases = {r["name"]: r for r in tx.read_leases([lease_name])}
            shard_rows = tx.scheduler_leases() if self.supports_shards else []
            rows = tx.schedulers()
        lease = leases.get(lease_name)
        shards: dict[str, Any] = {}
        if self.supports_shards:
            shards["shard_leases"] = [
                _lease_state(r["name"], r) for r in shard_rows if r["name"] != "scheduler"
            ]
        return StatusSnapshot(
            now=at,
            lease=None if lease is None else _lease_state(lease_name, lease),
            schedulers=[scheduler_from_row(r) for r in rows],
            **shards,
            due=int(counts["due"]),
            pending=int(counts["pending"]),
            oldest_due_at=None if oldest is None else oldest["at"],
            oldest_due_name=None if oldest is None else oldest["name"],
            missed=int(counts["missed"]),
            failed=int(counts["failed"]),
            window=window,
        )

    def refusals(self, *, limit: int | None = None, name: str | None = None) -> Refusals:
        limit = check_limit(limit)
        with self.dialect.session() as tx:
            rows = tx.refusals(name, limit)
        return Refusals(
            total=int(rows[0]["total"]) if rows else 0,
            schedules=tuple(
                Refusal(
                    name=str(r["name"]),
                    task=str(r["task"]),
                    source=str(r["source"]),
                    reason=r["reason"],
                    since=r["refused_at"],
                )
                for r in rows
            ),
        )

    def schedule_health(
        self,
        *,
        overdue_after: timedelta,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ScheduleHealth]:
        limit = check_limit(limit)
        with self.dialect.session() as tx:
            late = late_instant((now or tx.now()).astimezone(UTC), overdue_after)
            rows = tx.schedule_health(late, limit)
        return [health_from_row(r) for r in rows]


def _lease_state(name: str, row: dict[str, Any]) -> LeaseState:
    return LeaseState(
        name=name,
        holder=row["holder"],
        token=int(row["token"]),
        expires_at=row["expires_at"],
        valid=not row["expired"],
    )


def _aware(value: Any) -> datetime | None:
    """A time column as read (an aware datetime; None, or a damaged value, as None)."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
