"""The comparison behind ``goatbeat diff``: do the old (celery) and the new (goatbeat) schedules
fire at the same instants?

The old side is computed AS CELERY COMPUTES IT: each entry's own celery schedule object
(``crontab``, ``schedule``, ``solar``; django-celery-beat's rows rebuilt the way its
``DatabaseScheduler`` builds them) is stepped with its own ``remaining_estimate``, exactly as
celery beat does after each run (``last_run_at = now``). The new side steps the goatbeat
triggers stored in the database. For every schedule on either side the report gives: present on
one side only; differences in task, args, kwargs, routing and enabled; and the first instants
over the horizon where the fire times differ, with the reason when it is known (a DST rule, a
celery bug, see :data:`goatbeat.compat.CELERY_BUGS`).

:func:`compute_diff` is pure: entries and schedules in, a :class:`DiffReport` out. The command
that reads the sources and prints the report is :func:`goatbeat.cli.migration.diff`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.conversion import CELERY_BUGS
from goatbeat.core.durations import format_duration
from goatbeat.core.model import DamagedSchedule, Schedule, StoredSchedule
from goatbeat.core.timeutil import get_zone, iso_z
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.importers import kombu_json
from goatbeat.importers.entries import SourceEntry

__all__ = [
    "DiffReport",
    "FireDifference",
    "ScheduleDiff",
    "celery_fire_times",
    "compute_diff",
    "goatbeat_fire_times",
]

MAX_FIRES = 100_000
"""Fire times computed per schedule and side; beyond, the comparison stops (and says so)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FireDifference:
    at: datetime
    old: bool  # celery fires at ``at``
    new: bool  # goatbeat fires at ``at``
    reason: str | None = None
    known: bool = False  # the reason is a known celery bug / DST rule, not a real change

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": iso_z(self.at),
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
            "known": self.known,
        }


@dataclass(slots=True, kw_only=True)
class ScheduleDiff:
    name: str
    status: str  # "equal", "different", "only_old", "only_new", "damaged"
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    fire_times: list[FireDifference] = field(default_factory=list)
    fire_difference_count: int = 0
    notes: list[str] = field(default_factory=list)

    def differs(self, *, accept_known: bool = False) -> bool:
        if self.status in ("only_old", "only_new", "damaged") or self.fields:
            return True
        if accept_known:
            return any(not f.known for f in self.fire_times)
        return self.fire_difference_count > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "fields": {
                k: {"old": _jsonable(o), "new": _jsonable(n)} for k, (o, n) in self.fields.items()
            },
            "fire_times": [f.to_dict() for f in self.fire_times],
            "fire_difference_count": self.fire_difference_count,
            "notes": self.notes,
        }


@dataclass(slots=True, kw_only=True)
class DiffReport:
    start: datetime
    horizon: timedelta
    schedules: list[ScheduleDiff]
    accept_known: bool = False

    @property
    def equal(self) -> bool:
        return not any(s.differs(accept_known=self.accept_known) for s in self.schedules)

    def to_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "start": iso_z(self.start),
            "horizon": format_duration(self.horizon),
            "schedules": [s.to_dict() for s in self.schedules],
        }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


# -- fire times -----------------------------------------------------------------------------


def goatbeat_fire_times(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Fire instants of ``schedule`` in ``(start, end]``, honouring start/end and one_off."""
    out: list[datetime] = []
    t = start
    while len(out) < MAX_FIRES:
        nxt = schedule.first_run_after(t)
        if nxt is None or nxt > end:
            break
        out.append(nxt)
        if schedule.one_off:
            break
        t = nxt
    return out


def _celery_app(zone: str) -> Any:
    from celery import Celery

    app = Celery("goatbeat-diff", set_as_current=False)
    app.conf.timezone = zone
    return app


def celery_fire_times(
    entry: SourceEntry,
    start: datetime,
    end: datetime,
    *,
    phase: datetime | None = None,
) -> list[datetime]:
    """Fire instants in ``(start, end]`` as celery beat computes them for ``entry``.

    Steps the entry's own celery schedule object: ``next = now + remaining_estimate(last)``
    with ``last = now = the previous run``, which is what beat does after each run.
    ``phase``: where an interval counts from when celery's last run is unknown."""
    sched = entry.celery_schedule
    if sched is None:
        return []  # celery does not schedule this entry at all
    if hasattr(sched, "next_after") and hasattr(sched, "to_spec"):
        # django-celery-beat's clocked: one instant, no stepping involved
        sched_at = sched.next_after(start)
        return [sched_at] if sched_at is not None and sched_at <= end else []
    app = _celery_app(entry.celery_tz)
    zone = get_zone(entry.celery_tz)
    clock = [start]
    stepper = copy.copy(sched)
    stepper.nowfun = lambda: clock[0]
    stepper._app = app
    own_tz = vars(sched).get("tz")
    stepper.tz = own_tz if own_tz is not None else zone
    is_interval = hasattr(sched, "run_every")
    t = start
    if is_interval:
        t = entry.last_run_at or phase or start
    one_off = entry.schedule is not None and entry.schedule.one_off
    start_at = entry.schedule.start_at if entry.schedule is not None else None
    end_at = entry.schedule.end_at if entry.schedule is not None else None
    out: list[datetime] = []
    steps = 0
    while len(out) < MAX_FIRES and steps < 10 * MAX_FIRES:
        steps += 1
        local = t.astimezone(zone)  # beat stamps last_run_at with app.now(), in the app zone
        clock[0] = local
        # remaining_estimate is elapsed time: add it in UTC, never to a local wall time.
        nxt = t.astimezone(UTC) + stepper.remaining_estimate(local)
        if nxt <= t:
            nxt = t + timedelta(seconds=1)  # celery would spin; keep the walk finite
        if nxt > end:
            break
        t = nxt
        if nxt <= start or (start_at is not None and nxt < start_at):
            continue
        if end_at is not None and nxt > end_at:
            break
        out.append(nxt)
        if one_off:
            break
    return out


# -- comparison -----------------------------------------------------------------------------


def _dst_reason(at: datetime, zone_name: str, old: bool) -> tuple[str, bool] | None:
    zone = get_zone(zone_name)
    before = (at - timedelta(hours=3)).astimezone(zone).utcoffset()
    after = (at + timedelta(hours=3)).astimezone(zone).utcoffset()
    if before is None or after is None or before == after:
        return None
    day = at.astimezone(zone).date().isoformat()
    side = "celery" if old else "goatbeat"
    if after > before:
        return (
            f"DST spring-forward in {zone_name} on {day} ({side} only): {CELERY_BUGS['dst_gap']}",
            True,
        )
    return (
        f"DST fall-back in {zone_name} on {day} ({side} only): {CELERY_BUGS['dst_repeat']}",
        True,
    )


def _compare_fields(entry: SourceEntry, new: Schedule) -> dict[str, tuple[Any, Any]]:
    out: dict[str, tuple[Any, Any]] = {}
    if entry.task != new.task:
        out["task"] = (entry.task, new.task)
    old_args = kombu_json.decode(list(entry.args or []))
    new_args = kombu_json.decode(list(new.args))
    if old_args != new_args:
        out["args"] = (entry.args, list(new.args))
    old_kwargs = kombu_json.decode(dict(entry.kwargs or {}))
    new_kwargs = kombu_json.decode(dict(new.kwargs))
    if old_kwargs != new_kwargs:
        out["kwargs"] = (entry.kwargs, dict(new.kwargs))
    new_routing = new.routing.to_dict()
    for key in ("queue", "exchange", "routing_key", "priority", "expires"):
        if entry.routing.get(key) != new_routing.get(key):
            out[key] = (entry.routing.get(key), new_routing.get(key))
    old_headers = kombu_json.decode(dict(entry.routing.get("headers") or {}))
    if old_headers != kombu_json.decode(dict(new_routing.get("headers") or {})):
        out["headers"] = (entry.routing.get("headers"), new_routing.get("headers"))
    if entry.enabled != new.enabled:
        out["enabled"] = (entry.enabled, new.enabled)
    return out


def _compare_one(
    entry: SourceEntry,
    new: Schedule,
    start: datetime,
    end: datetime,
    max_instants: int,
) -> ScheduleDiff:
    result = ScheduleDiff(name=entry.name, status="equal", fields=_compare_fields(entry, new))
    if entry.problem is not None:
        result.notes.append(f"the importer cannot convert it: {entry.problem}")
    phase = None
    if isinstance(new.trigger, IntervalTrigger):
        # The grid point just before ``start``: celery stepping from it lands on goatbeat's grid.
        first = new.trigger.next_after(start)
        phase = None if first is None else first - new.trigger.every
        if entry.last_run_at is None and entry.celery_schedule is not None:
            result.notes.append(
                "celery's last run is unknown (beat keeps it in its schedule file): the "
                "interval is compared from goatbeat's phase"
            )
    try:
        old_times = celery_fire_times(entry, start, end, phase=phase)
    except Exception as exc:  # celery itself fails on this entry: that is the finding
        result.notes.append(f"celery cannot compute this schedule: {type(exc).__name__}: {exc}")
        old_times = []
    new_times = goatbeat_fire_times(new, start, end)
    if len(old_times) >= MAX_FIRES or len(new_times) >= MAX_FIRES:
        result.notes.append(f"compared the first {MAX_FIRES} fire times only")
    old_set, new_set = set(old_times), set(new_times)
    differing = sorted(old_set ^ new_set)
    result.fire_difference_count = len(differing)
    zone = entry.celery_tz if entry.celery_tz != "UTC" else new.timezone
    for at in differing:
        in_old = at in old_set
        reason: str | None = None
        known = False
        if "dow_7" in entry.bugs:
            reason, known = CELERY_BUGS["dow_7"], True
        else:
            dst = _dst_reason(at, zone, in_old)
            if dst is not None:
                reason, known = dst
            elif entry.celery_schedule is None:
                reason = "celery never schedules this entry"
        if reason is None:
            reason = f"the schedules differ: celery {entry.celery_schedule!r}, goatbeat {new.trigger.describe()}"
        difference = FireDifference(at=at, old=in_old, new=not in_old, reason=reason, known=known)
        if len(result.fire_times) < max_instants:
            result.fire_times.append(difference)
        elif not known:
            # Past the cap, still show the first difference no known bug explains.
            if all(f.known for f in result.fire_times):
                result.fire_times.append(difference)
            break
    if result.fields or result.fire_difference_count:
        result.status = "different"
    return result


def compute_diff(
    old: Sequence[SourceEntry],
    new: Sequence[StoredSchedule],
    *,
    start: datetime,
    horizon: timedelta = timedelta(days=30),
    max_instants: int = 5,
    accept_known: bool = False,
) -> DiffReport:
    """Compare celery's entries (``old``) with goatbeat's schedules (``new``) over
    ``(start, start + horizon]``. A goatbeat row that cannot be decoded is ``damaged``."""
    end = start + horizon
    by_name = {s.name: s for s in new}
    seen: set[str] = set()
    diffs: list[ScheduleDiff] = []
    for entry in old:
        seen.add(entry.name)
        target = by_name.get(entry.name)
        if target is None:
            d = ScheduleDiff(name=entry.name, status="only_old")
            if entry.problem:
                d.notes.append(f"the importer cannot convert it: {entry.problem}")
            diffs.append(d)
            continue
        if isinstance(target, DamagedSchedule):
            d = ScheduleDiff(name=entry.name, status="damaged")
            d.notes.append(f"goatbeat's stored row is damaged: {target.describe()}")
            diffs.append(d)
            continue
        diffs.append(_compare_one(entry, target, start, end, max_instants))
    for sched in new:
        if sched.name not in seen:
            diffs.append(ScheduleDiff(name=sched.name, status="only_new"))
    diffs.sort(key=lambda d: d.name)
    return DiffReport(start=start, horizon=horizon, schedules=diffs, accept_known=accept_known)
