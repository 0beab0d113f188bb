"""What the stores share for operations (schema version 5): checking a worker's report, a
heartbeat or a miss record before writing it, and turning the rows read back into the values
of :mod:`goatbeat.core.health`.

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
    Outcome,
    Role,
    ScheduleHealth,
    SchedulerBeat,
    SchedulerProcess,
)
from goatbeat.core.model import Miss

__all__ = [
    "MAX_ERROR_LENGTH",
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


def _utc(value: Any) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def scheduler_from_row(row: Mapping[str, Any]) -> SchedulerProcess:
    started, beat, expires = (_utc(row[c]) for c in ("started_at", "heartbeat_at", "expires_at"))
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
        last_run_at=_utc(row["last_run_at"]),
        next_run_at=_utc(row["next_run_at"]),
        last_success_at=_utc(row["last_success_at"]),
        last_failure_at=_utc(row["last_failure_at"]),
        consecutive_failures=int(row["consecutive_failures"] or 0),
        missed_count=int(row["missed_count"] or 0),
        overdue=bool(row["overdue"]),
    )
