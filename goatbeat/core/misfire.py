"""Misfire planning: turn "it was due at T, it is now T + 3 h" into the occurrences to claim.

:func:`plan` is a pure function of a schedule and ``now``. An occurrence is *late* when
``now - scheduled_at > misfire_grace``; on-time occurrences are always claimed, late ones are
handled by the schedule's :class:`~goatbeat.core.model.MisfirePolicy`:

- ``run_once`` (default, like celery beat): if nothing on time is due, one run at the latest
  late instant; if something on time is due, that run stands for the late ones.
- ``skip``: none; resume at the next future occurrence.
- ``run_all``: every late occurrence in order, the most recent ``catch_up_limit`` of them.

What it drops is counted (exactly when that is cheap, else as a lower bound) so the store can
record it and the scheduler can log ``occurrence.missed``.

The work is bounded whatever the outage: a per-second trigger down for a year is planned by
searching backwards from ``now`` in growing windows, never by walking 31 million instants.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.triggers import IntervalTrigger, Trigger

__all__ = ["Plan", "plan", "COUNT_CAP", "ON_TIME_CAP"]

COUNT_CAP = 20_000
"""Beyond this many dropped instants, a non-interval trigger reports a lower bound."""

ON_TIME_CAP = 10_000
"""At most this many on-time occurrences per plan (a 1 ms interval with a long grace...)."""

_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    run_at: list[datetime] = field(default_factory=list)
    """Instants to claim, oldest first."""
    next_run_at: datetime | None = None
    """The schedule's new ``next_run_at``: the first instant after ``now`` (None: never again)."""
    missed: int = 0
    missed_is_lower_bound: bool = False
    missed_first: datetime | None = None
    missed_last: datetime | None = None

    @property
    def due(self) -> bool:
        return bool(self.run_at) or self.missed > 0


def plan(schedule: Schedule, now: datetime) -> Plan:
    """What to claim for ``schedule`` at ``now`` (aware). Nothing due: an empty plan that
    keeps ``next_run_at``."""
    first = schedule.next_run_at
    if first is None or first > now or not schedule.enabled:
        return Plan(next_run_at=first)
    trigger = schedule.trigger
    end = schedule.end_at
    cutoff = now - schedule.misfire_grace  # instants strictly before cutoff are late

    on_time: list[datetime] = []
    t: datetime | None = first if first >= cutoff else _first_at_or_after(trigger, cutoff, end)
    while t is not None and t <= now:
        on_time.append(t)
        t = _next(trigger, t, end)
    if len(on_time) > ON_TIME_CAP:
        on_time = on_time[-ON_TIME_CAP:]

    keep = 0
    if first < cutoff:
        if schedule.misfire is MisfirePolicy.RUN_ALL:
            keep = schedule.catch_up_limit
        elif schedule.misfire is MisfirePolicy.RUN_ONCE and not on_time:
            keep = 1
    late_kept, late_total, lower_bound, missed_first, missed_last = _late(
        schedule, first, cutoff, keep
    )
    missed = late_total - len(late_kept)
    if missed <= 0:
        missed_first = missed_last = None
    next_run_at = t if t is not None and t > now else _next(trigger, now, end)
    return Plan(
        run_at=late_kept + on_time,
        next_run_at=next_run_at,
        missed=max(missed, 0),
        missed_is_lower_bound=lower_bound and missed > 0,
        missed_first=missed_first,
        missed_last=missed_last,
    )


def _next(trigger: Trigger, after: datetime, end: datetime | None) -> datetime | None:
    nxt = trigger.next_after(after)
    if nxt is None or (end is not None and nxt > end):
        return None
    return nxt


def _first_at_or_after(trigger: Trigger, instant: datetime, end: datetime | None) -> datetime | None:
    return _next(trigger, instant - _TICK, end)


def _late(
    schedule: Schedule, first: datetime, cutoff: datetime, keep: int
) -> tuple[list[datetime], int, bool, datetime | None, datetime | None]:
    """Late instants in ``[first, cutoff)``: (the last ``keep`` of them, how many in all,
    whether that count is a lower bound, first dropped, last dropped)."""
    if first >= cutoff:
        return [], 0, False, None, None
    trigger = schedule.trigger
    end = schedule.end_at
    # One more than we keep, so the latest dropped instant is known too.
    last = _last_before(trigger, first, cutoff, keep + 1, end)
    kept = last[max(0, len(last) - keep) :] if keep else []
    dropped = last[: len(last) - len(kept)]
    total, lower_bound = _count(trigger, first, cutoff, end)
    total = max(total, len(last))
    missed_first = first if dropped else None
    missed_last = dropped[-1] if dropped else None
    return kept, total, lower_bound, missed_first, missed_last


def _last_before(
    trigger: Trigger, first: datetime, cutoff: datetime, k: int, end: datetime | None
) -> list[datetime]:
    """The last ``k`` instants in ``[first, cutoff)``, searching backwards in growing windows."""
    window = _initial_window(trigger)
    while True:
        start = max(first, cutoff - window)
        found: deque[datetime] = deque(maxlen=k)
        t: datetime | None = start if start == first else _first_at_or_after(trigger, start, end)
        steps = 0
        while t is not None and t < cutoff:
            found.append(t)
            t = _next(trigger, t, end)
            steps += 1
        if len(found) >= k or start == first:
            return list(found)
        window *= 4 if steps < 4 * k else 2


def _initial_window(trigger: Trigger) -> timedelta:
    if isinstance(trigger, IntervalTrigger):
        return trigger.every * 2
    return timedelta(minutes=2)


def _count(
    trigger: Trigger, first: datetime, cutoff: datetime, end: datetime | None
) -> tuple[int, bool]:
    """How many instants in ``[first, cutoff)``; (count, is_lower_bound)."""
    if isinstance(trigger, IntervalTrigger):
        # first is on the grid: instants first + k*every < min(cutoff, end + tick).
        limit = cutoff if end is None else min(cutoff, end + _TICK)
        if limit <= first:
            return 0, False
        span = limit - first - _TICK
        return span // trigger.every + 1, False
    count = 0
    t: datetime | None = first
    while t is not None and t < cutoff:
        count += 1
        if count >= COUNT_CAP:
            return count, True
        t = _next(trigger, t, end)
    return count, False
