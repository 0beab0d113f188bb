"""Misfire planning: turn "it was due at T, it is now T + 3 h" into the occurrences to claim.

:func:`plan` is a pure function of a schedule and ``now``. An occurrence is *late* when
``now - scheduled_at > misfire_grace``; on-time occurrences are claimed, late ones are handled
by the schedule's :class:`~goatbeat.core.model.MisfirePolicy`:

- ``run_once`` (default, like celery beat): if nothing on time is due, one run at the latest
  late instant; if something on time is due, that run stands for the late ones.
- ``skip``: none; resume at the next future occurrence.
- ``run_all``: every late occurrence in order, the most recent ``catch_up_limit`` of them.

``catch_up_limit`` caps every plan, whatever the policy and however long the grace: a plan
never claims more than the most recent ``catch_up_limit`` instants, on time or late (a
per-second schedule with a 10-minute grace stopped for 3 minutes claims 100, not 180). A plan
covers everything owed since the last claim (the claim moves ``next_run_at`` past ``now``), so
the cap holds per outage, across iterations and across a change of leader alike.

A paused (or disabled) schedule plans nothing. With ``jitter`` an instant is late only when
``now`` is more than ``misfire_grace + jitter`` past it: an occurrence is sent up to ``jitter``
after its instant anyway, so a scheduler that comes back within that window still owes it.

Instants before ``start_at`` or after ``end_at`` are not occurrences at all. What the policy
drops is counted (exactly when that is cheap, else as a lower bound) so the store can record it
and the scheduler can log ``occurrence.missed``.

The work is bounded whatever the outage: a per-second trigger down for a year is planned by
searching backwards from ``now`` in growing windows, never by walking 31 million instants.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.triggers import IntervalTrigger, Trigger

__all__ = ["Plan", "plan", "count_instants", "instants_between", "COUNT_CAP", "ON_TIME_CAP"]

COUNT_CAP = 20_000
"""Beyond this many dropped instants, a non-interval trigger reports a lower bound."""

ON_TIME_CAP = 10_000
"""At most this many on-time occurrences per plan (a 1 ms interval with a long grace...); the
oldest beyond it are dropped and counted as missed."""

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
    if first is None or first > now or not schedule.enabled or schedule.paused:
        return Plan(next_run_at=first)
    trigger = schedule.trigger
    end = schedule.end_at
    if schedule.start_at is not None and first < schedule.start_at:
        # start_at was moved after next_run_at was computed: nothing before it is owed.
        first = schedule.first_run_after(schedule.start_at - _TICK)
        if first is None or first > now:
            return Plan(next_run_at=first)
    if end is not None and first > end:
        return Plan(next_run_at=None)
    # Instants strictly before cutoff are late.
    cutoff = _minus(now, schedule.misfire_grace + schedule.jitter)
    if first >= cutoff:
        nxt = _next(trigger, first, end)
        if nxt is None or nxt > now:
            # The hot path of every claim: exactly one instant due, and it is on time.
            # One next_after call; nothing lies between first and nxt, so nxt is also the
            # first instant after now.
            return Plan(run_at=[first], next_run_at=nxt)
    horizon = now + _TICK  # on-time instants are <= now

    keep = 0
    cap = schedule.catch_up_limit
    on_first = first if first >= cutoff else _first_at_or_after(trigger, cutoff, end)
    on_time = _Tail.empty()
    if on_first is not None and on_first < horizon:
        on_time = _tail(trigger, on_first, horizon, min(cap, ON_TIME_CAP), end)
    if first < cutoff:
        if schedule.misfire is MisfirePolicy.RUN_ALL:
            keep = cap - len(on_time.kept)  # the cap counts the on-time runs too
        elif schedule.misfire is MisfirePolicy.RUN_ONCE and not on_time.kept:
            keep = 1
        late = _tail(trigger, first, cutoff, keep, end)
    else:
        late = _Tail.empty()

    missed = late.dropped + on_time.dropped
    return Plan(
        run_at=late.kept + on_time.kept,
        next_run_at=_next(trigger, now, end),
        missed=missed,
        missed_is_lower_bound=missed > 0 and (late.lower_bound or on_time.lower_bound),
        missed_first=late.dropped_first or on_time.dropped_first,
        missed_last=on_time.dropped_last or late.dropped_last,
    )


def count_instants(schedule: Schedule, first: datetime, until: datetime) -> tuple[int, bool]:
    """How many instants of ``schedule`` lie in ``[first, until]`` (``first`` is one of them,
    or the first after it is), within ``start_at``/``end_at``: (count, is_lower_bound). What a
    pause skipped, counted at ``resume``. Bounded like :func:`plan`."""
    if schedule.start_at is not None and first < schedule.start_at:
        nxt = schedule.first_run_after(schedule.start_at - _TICK)
        if nxt is None:
            return 0, False
        first = nxt
    if first > until or (schedule.end_at is not None and first > schedule.end_at):
        return 0, False
    return _count(schedule.trigger, first, until + _TICK, schedule.end_at)


def instants_between(
    schedule: Schedule, start: datetime, end: datetime, *, limit: int
) -> list[datetime]:
    """The instants of ``schedule`` in ``[start, end)`` within its ``start_at``/``end_at``,
    oldest first: what a backfill of that range submits. Stops after ``limit + 1`` instants,
    so a caller can tell that the range holds more than ``limit``."""
    out: list[datetime] = []
    t = schedule.first_run_after(start - _TICK)
    while t is not None and t < end and len(out) <= limit:
        out.append(t)
        t = schedule.first_run_after(t)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tail:
    """The instants of one window ``[a, hi)``: the latest ``keep`` and a summary of the rest."""

    kept: list[datetime]
    dropped: int
    lower_bound: bool
    dropped_first: datetime | None
    dropped_last: datetime | None

    @classmethod
    def empty(cls) -> _Tail:
        return cls(kept=[], dropped=0, lower_bound=False, dropped_first=None, dropped_last=None)


def _tail(trigger: Trigger, a: datetime, hi: datetime, keep: int, end: datetime | None) -> _Tail:
    """Split the instants ``a, next(a), ...`` below ``hi`` (``a < hi`` is one of them) into the
    latest ``keep`` and the dropped rest."""
    # One more than we keep, so the latest dropped instant is known too.
    last = _last_before(trigger, a, hi, keep + 1, end)
    kept = last[max(0, len(last) - keep) :] if keep else []
    total, lower_bound = _count(trigger, a, hi, end)
    dropped = max(total, len(last)) - len(kept)
    if dropped <= 0:
        return _Tail(kept=kept, dropped=0, lower_bound=False, dropped_first=None, dropped_last=None)
    return _Tail(
        kept=kept,
        dropped=dropped,
        lower_bound=lower_bound,
        dropped_first=a,
        dropped_last=last[len(last) - len(kept) - 1],
    )


def _minus(now: datetime, grace: timedelta) -> datetime:
    try:
        return now - grace
    except OverflowError:
        # A grace reaching back before year 1: nothing is ever late.
        return datetime.min.replace(tzinfo=UTC)


def _next(trigger: Trigger, after: datetime, end: datetime | None) -> datetime | None:
    nxt = trigger.next_after(after)
    if nxt is None or (end is not None and nxt > end):
        return None
    return nxt


def _first_at_or_after(
    trigger: Trigger, instant: datetime, end: datetime | None
) -> datetime | None:
    return _next(trigger, instant - _TICK, end)


def _last_before(
    trigger: Trigger, first: datetime, cutoff: datetime, k: int, end: datetime | None
) -> list[datetime]:
    """The last ``k`` instants in ``[first, cutoff)``, searching backwards in growing windows,
    so the work follows ``k`` and not the length of the outage."""
    if isinstance(trigger, IntervalTrigger):
        return _last_on_grid(trigger, first, cutoff, k, end)
    window = timedelta(minutes=2)
    while True:
        start = first if cutoff - first <= window else cutoff - window
        found: deque[datetime] = deque(maxlen=k)
        t: datetime | None = start if start == first else _first_at_or_after(trigger, start, end)
        while t is not None and t < cutoff:
            found.append(t)
            t = _next(trigger, t, end)
        if len(found) >= k or start == first:
            return list(found)
        window *= 4


def _last_on_grid(
    trigger: IntervalTrigger, first: datetime, cutoff: datetime, k: int, end: datetime | None
) -> list[datetime]:
    # The instants are first, then b + i*every: index them instead of searching.
    if k <= 0 or first >= cutoff:
        return []
    total, _ = _count(trigger, first, cutoff, end)
    b = _next(trigger, first, end)
    return [
        first if i == 0 or b is None else b + (i - 1) * trigger.every
        for i in range(max(0, total - k), total)
    ]


def _count(trigger: Trigger, a: datetime, hi: datetime, end: datetime | None) -> tuple[int, bool]:
    """How many instants ``a, next(a), ...`` lie below ``hi`` (``a < hi``); (count, is_lower_bound)."""
    if isinstance(trigger, IntervalTrigger):
        # After ``a`` (which may sit off the grid if the trigger was edited) the instants are
        # b + k*every, so count them by division.
        b = _next(trigger, a, end)
        if b is None or b >= hi:
            return 1, False
        limit = hi if end is None or end >= hi else end + _TICK
        return 2 + (limit - b - _TICK) // trigger.every, False
    count = 0
    t: datetime | None = a
    while t is not None and t < hi:
        count += 1
        if count >= COUNT_CAP:
            return count, True
        t = _next(trigger, t, end)
    return count, False
