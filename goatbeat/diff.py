"""The comparison behind ``goatbeat diff``: do the old (celery) and the new (goatbeat) schedules
fire at the same instants?

The old side is computed AS CELERY COMPUTES IT: each entry's own celery schedule object
(``crontab``, ``schedule``, ``solar``; django-celery-beat's rows rebuilt the way its
``DatabaseScheduler`` builds them, its ``clocked`` rows as it runs them) is stepped with its own
``remaining_estimate``, exactly as celery beat does after each run (``last_run_at = now``),
from the later of celery's last run and goatbeat's (what either already ran is not owed). The
new side steps the goatbeat triggers stored in the database. A run that is due at ``start``
already (celery's catch-up after a stop; goatbeat's ``next_run_at`` in the past, the gap of a
cutover) counts as a fire *at once*, at ``start``, on either side.

For every schedule on either side the report gives: present on one side only; differences in
task, args, kwargs, routing and enabled; and the first instants over the horizon where the fire
times differ, with the reason when it is known (a DST rule naming the actual shift, a celery
bug, see :data:`goatbeat.compat.CELERY_BUGS`). Solar instants match within
:data:`SOLAR_TOLERANCE` (celery uses ephem, goatbeat its own equations) and the largest
deviation is reported. Each side computes at most :data:`MAX_FIRES` instants; when a side
reaches that cap the comparison stops at the earlier last instant, so a cap never creates a
difference.

:func:`compute_diff` is pure: entries and schedules in, a :class:`DiffReport` out. The command
that reads the sources and prints the report is :func:`goatbeat.cli.diff.diff`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.conversion import CELERY_BUGS, describe_exception, plain_repr
from goatbeat.core.durations import format_duration
from goatbeat.core.errors import InvalidValue
from goatbeat.core.model import DamagedSchedule, Schedule, Source, StoredSchedule
from goatbeat.core.timeutil import get_zone, iso_z
from goatbeat.core.triggers import IntervalTrigger, SolarTrigger
from goatbeat.importers import kombu_json
from goatbeat.importers.django_celery_beat import ClockedSchedule
from goatbeat.importers.entries import SourceEntry
from goatbeat.importers.grid import celery_lateness, grid_offset, late_on_grid

__all__ = [
    "DiffReport",
    "FireDifference",
    "MAX_FIRES",
    "SOLAR_TOLERANCE",
    "ScheduleDiff",
    "celery_fire_times",
    "compute_diff",
    "goatbeat_fire_times",
]

MAX_FIRES = 1_100_000
"""Fire times computed per schedule and side; beyond, the comparison stops (and says so). A
year of every-30-seconds instants fits (1,054,080)."""

SOLAR_TOLERANCE = timedelta(seconds=60)
"""Solar instants of the two sides closer than this are the same occurrence: celery (ephem)
and goatbeat (NOAA equations) differ by milliseconds to about a second at |latitude| <= 60."""


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
    status: str  # "equal", "different", "only_old", "only_new", "damaged", "refused"
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    fire_times: list[FireDifference] = field(default_factory=list)
    fire_difference_count: int = 0
    notes: list[str] = field(default_factory=list)
    solar_max_deviation: timedelta | None = None
    """Solar schedules: the largest gap between matched celery and goatbeat instants."""
    refused: str | None = None
    """Why the importer refuses the entry (celery runs it, goatbeat cannot as celery does)."""
    accepted: bool = False
    """The operator accepted the refusal (``--accept-refused NAME``): no difference."""

    def differs(self, *, accept_known: bool = False) -> bool:
        if self.refused is not None:
            return not self.accepted
        if self.status in ("only_old", "only_new", "damaged", "refused") or self.fields:
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
            "solar_max_deviation_seconds": (
                None
                if self.solar_max_deviation is None
                else self.solar_max_deviation.total_seconds()
            ),
            "refused": self.refused,
            "accepted": self.accepted,
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

    @property
    def accepted_refused(self) -> list[str]:
        """The refused entries the operator accepted (``--accept-refused``), by name."""
        return [s.name for s in self.schedules if s.refused is not None and s.accepted]

    def to_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "start": iso_z(self.start),
            "horizon": format_duration(self.horizon),
            "schedules": [s.to_dict() for s in self.schedules],
            "accepted_refused": self.accepted_refused,
        }


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


# -- fire times -----------------------------------------------------------------------------


def goatbeat_fire_times(
    schedule: Schedule, start: datetime, end: datetime, *, at_once: bool = True
) -> list[datetime]:
    """Fire instants of ``schedule`` in ``(start, end]``, honouring start/end and one_off;
    first ``start`` itself when the stored ``next_run_at`` is already due then (a run the
    scheduler makes at once: the occurrence owed since the last run). ``at_once`` False (a
    window that starts in the future, with both schedulers running until then): no such run,
    only the instants after ``start``."""
    out: list[datetime] = []
    if at_once and schedule.next_run_at is not None and schedule.next_run_at <= start:
        out.append(start)
        if schedule.one_off:
            return out
    t = start
    if schedule.last_run_at is not None and schedule.last_run_at > start:
        # A running scheduler claimed an instant ahead of time (claim-ahead): that one has run,
        # as celery's side counts it (its last run is goatbeat's), and is no fire to come.
        t = schedule.last_run_at
    every = schedule.trigger.every if isinstance(schedule.trigger, IntervalTrigger) else None
    nxt = schedule.first_run_after(t)
    while len(out) < MAX_FIRES:
        if nxt is None or nxt > end:
            break
        out.append(nxt)
        if schedule.one_off:
            break
        if every is not None and nxt >= (schedule.start_at or nxt):
            # On the grid past start_at, an interval's next instant is the sum.
            t, nxt = nxt, nxt + every
            if schedule.end_at is not None and nxt > schedule.end_at:
                nxt = None
        else:
            t = nxt
            nxt = schedule.first_run_after(t)
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
    last_run_at: datetime | None = None,
    at_once: bool = True,
) -> list[datetime]:
    """Fire instants in ``(start, end]`` as celery beat computes them for ``entry``, first
    ``start`` itself when celery would run it at once (due since its last run; never with
    ``at_once`` False: a window in the future, celery running until then).

    Steps the entry's own celery schedule object: ``next = now + remaining_estimate(last)``
    with ``last = now = the previous run``, which is what beat does after each run.
    ``phase``: where an interval counts from when celery's last run is unknown.
    ``last_run_at``: a later last run than the entry's (goatbeat ran it since)."""
    sched = entry.celery_schedule
    if sched is None:
        return []  # celery does not schedule this entry at all
    if isinstance(sched, ClockedSchedule):
        if not sched.pending or sched.clocked_time > end:
            return []
        return [max(sched.clocked_time, start)]  # passed but never ran: at once
    last = entry.last_run_at
    if last_run_at is not None and (last is None or last_run_at > last):
        last = last_run_at
    app = _celery_app(entry.celery_tz)
    zone = get_zone(entry.celery_tz)
    clock = [start]
    stepper = copy.copy(sched)
    stepper.nowfun = lambda: clock[0]
    stepper._app = app
    own_tz = vars(sched).get("tz")
    stepper.tz = own_tz if own_tz is not None else zone
    one_off = entry.schedule is not None and entry.schedule.one_off
    start_at = entry.schedule.start_at if entry.schedule is not None else None
    end_at = entry.schedule.end_at if entry.schedule is not None else None

    plain_every = _plain_interval(sched)

    def step(t: datetime) -> datetime:
        if plain_every is not None:
            # celery's schedule(timedelta): remaining_estimate(last) with now == last is the
            # interval itself (same instant, same offset: no DST adjustment), so stepping is
            # the sum; computed directly, a year of every-30-s instants takes a second.
            return t + plain_every
        local = t.astimezone(zone)  # beat stamps last_run_at with app.now(), in the app zone
        clock[0] = local
        # remaining_estimate is elapsed time: add it in UTC, never to a local wall time.
        nxt: datetime = t.astimezone(UTC) + stepper.remaining_estimate(local)
        return nxt if nxt > t else t + timedelta(seconds=1)  # celery would spin; stay finite

    out: list[datetime] = []
    t = start
    if hasattr(sched, "run_every"):
        every = sched.run_every
        t = last or phase or start
        if start_at is not None and t < start_at and isinstance(every, timedelta):
            # Not before start_time: the first check at or after it finds it due.
            t = start_at - every
    if not at_once:
        pass  # running until ``start``, celery is never behind then
    elif last is not None and (start_at is None or start_at <= start):
        first = step(last)
        if first <= start and (end_at is None or first <= end_at):
            out.append(start)  # due since its last run: beat runs it at once
            if one_off:
                return out
    elif (
        last is not None
        and start_at is not None
        and not hasattr(sched, "run_every")
        and start < start_at <= end
        and step(last) < start_at
    ):
        # django-celery-beat holds a row back until start_time; a crontab or solar row then
        # finds itself due (its last run predates start_time) and runs at once, off its own
        # schedule, and counts from there.
        out.append(start_at)
        t = start_at
        if one_off:
            return out
    steps = 0
    while len(out) < MAX_FIRES and steps < 10 * MAX_FIRES:
        steps += 1
        nxt = step(t)
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


def _plain_interval(sched: Any) -> timedelta | None:
    """The interval of celery's own ``schedule(timedelta)`` (not relative, not a subclass);
    None for anything else."""
    cls = type(sched)
    if (cls.__module__, cls.__name__) != ("celery.schedules", "schedule"):
        return None
    every = getattr(sched, "run_every", None)
    if getattr(sched, "relative", False) or not isinstance(every, timedelta):
        return None
    return every if every > timedelta(0) else None


# -- comparison -----------------------------------------------------------------------------


def _transition(at: datetime, zone_name: str) -> tuple[datetime, timedelta, timedelta] | None:
    """The UTC-offset change of ``zone_name`` within three hours of ``at``: (the instant, the
    offset before, the offset after), to the second; None when there is none."""
    zone = get_zone(zone_name)
    lo, hi = at - timedelta(hours=3), at + timedelta(hours=3)
    before, after = lo.astimezone(zone).utcoffset(), hi.astimezone(zone).utcoffset()
    if before is None or after is None or before == after:
        return None
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi.replace(microsecond=0), before, after


def _span(delta: timedelta) -> str:
    minutes = int(abs(delta).total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    parts = ([f"{hours} hour{'s' if hours > 1 else ''}"] if hours else []) + (
        [f"{minutes} minutes"] if minutes else []
    )
    return " ".join(parts) or "less than a minute"


def _dst_reason(at: datetime, zone_name: str, old: bool) -> tuple[str, bool] | None:
    found = _transition(at, zone_name)
    if found is None:
        return None
    instant, before, after = found
    zone = get_zone(zone_name)
    day = instant.astimezone(zone).date().isoformat()
    wall_before = (instant + before).strftime("%H:%M")
    wall_after = (instant + after).strftime("%H:%M")
    side = "celery" if old else "goatbeat"
    local = at.astimezone(zone).strftime("%H:%M")
    if after > before:
        return (
            f"DST spring-forward in {zone_name} on {day}: the clocks jump {_span(after - before)}"
            f" forward, from {wall_before} to {wall_after}, so the local times in between do "
            f"not exist; only {side} fires at {local} local. {CELERY_BUGS['dst_gap']}",
            True,
        )
    return (
        f"DST fall-back in {zone_name} on {day}: the clocks go back {_span(before - after)}, "
        f"from {wall_before} to {wall_after}, so those local times happen twice; only {side} "
        f"fires at {local} local ({'first' if at < instant else 'second'} pass). "
        f"{CELERY_BUGS['dst_repeat']}",
        True,
    )


def _match_within(
    old: list[datetime], new: list[datetime], tolerance: timedelta
) -> tuple[list[datetime], list[datetime], timedelta | None]:
    """Pair sorted instants of the two sides that lie within ``tolerance`` of each other;
    returns (old unmatched, new unmatched, the largest deviation of a matched pair)."""
    i = j = 0
    old_left: list[datetime] = []
    new_left: list[datetime] = []
    worst: timedelta | None = None
    while i < len(old) and j < len(new):
        gap = new[j] - old[i]
        if abs(gap) <= tolerance:
            worst = abs(gap) if worst is None or abs(gap) > worst else worst
            i += 1
            j += 1
        elif gap > timedelta(0):
            old_left.append(old[i])
            i += 1
        else:
            new_left.append(new[j])
            j += 1
    return old_left + old[i:], new_left + new[j:], worst


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


def _as_reimported(entry: SourceEntry, new: Schedule) -> Schedule | None:
    """``new`` as the next import leaves it when celery ran the entry after goatbeat's last
    run (the rehearsal: celery keeps running, and a slot passed since the import): its
    ``next_run_at`` follows celery's run, as :meth:`ScheduleStore.publish` with
    ``follow_last_run`` moves it (never backwards). None when celery did not run it since."""
    theirs, ours = entry.last_run_at, new.last_run_at
    if theirs is None or (ours is not None and theirs <= ours) or not new.enabled:
        return None
    nxt = new.first_run_after(theirs)
    if nxt is not None and new.next_run_at is not None and new.next_run_at > nxt:
        nxt = new.next_run_at
    return replace(new, next_run_at=nxt, last_run_at=theirs)


def _compare_one(
    entry: SourceEntry,
    new: Schedule,
    start: datetime,
    end: datetime,
    max_instants: int,
    at_once: bool = True,
) -> ScheduleDiff:
    result = ScheduleDiff(name=entry.name, status="equal", fields=_compare_fields(entry, new))
    followed = _as_reimported(entry, new)
    if followed is not None:
        result.notes.append(
            "celery ran it after goatbeat's last run (the old scheduler still runs): compared "
            "as the cutover import leaves it, its next run after celery's; re-run "
            "import_celery_beat after stopping the old scheduler"
        )
        new = followed
    phase = None
    if isinstance(new.trigger, IntervalTrigger):
        # The grid point just before ``start``: celery stepping from it lands on goatbeat's grid.
        first = new.trigger.next_after(start)
        phase = None if first is None else first - new.trigger.every
        if entry.last_run_at is None and new.last_run_at is None and entry.celery_schedule:
            result.notes.append(
                "celery's last run is unknown (beat keeps it in its schedule file): the "
                "interval is compared from goatbeat's phase"
            )
    # A disabled side fires nothing (celery skips a disabled row, goatbeat never claims one):
    # the enabled difference, when there is one, is reported as a field.
    try:
        old_times = (
            celery_fire_times(
                entry, start, end, phase=phase, last_run_at=new.last_run_at, at_once=at_once
            )
            if entry.enabled
            else []
        )
    except Exception as exc:  # celery itself fails on this entry: that is the finding
        result.notes.append(f"celery cannot compute this schedule: {describe_exception(exc)}")
        old_times = []
    new_times = goatbeat_fire_times(new, start, end, at_once=at_once) if new.enabled else []
    capped = [times[-1] for times in (old_times, new_times) if len(times) >= MAX_FIRES]
    if capped:
        # Past the last instant of a capped side the other side would look different.
        cutoff = min(capped)
        old_times = [t for t in old_times if t <= cutoff]
        new_times = [t for t in new_times if t <= cutoff]
        result.notes.append(
            f"compared up to {iso_z(cutoff)} only ({MAX_FIRES} fire times per side at most)"
        )
    if isinstance(new.trigger, SolarTrigger):
        only_old, only_new, worst = _match_within(
            sorted(set(old_times)), sorted(set(new_times)), SOLAR_TOLERANCE
        )
        old_set, new_set = set(only_old), set(only_new)
        result.solar_max_deviation = worst
        if worst is not None:
            result.notes.append(
                f"solar: celery (ephem) and goatbeat agree within {worst.total_seconds():.3f} s "
                f"(largest deviation; instants within {format_duration(SOLAR_TOLERANCE)} "
                "are the same occurrence)"
            )
    elif (late := _late_on_goatbeats_grid(entry, new)) is not None:
        # celery counts from its last run, dated a little after the instant it ran; goatbeat
        # kept its grid (importers.entries.late_on_grid): the same occurrences, each celery
        # would run ``late`` after goatbeat does.
        only_old, only_new, _ = _match_within(sorted(set(old_times)), sorted(set(new_times)), late)
        # At the ends of the window one of a pair may fall outside it.
        old_set = {t for t in only_old if t - late > start}
        new_set = {t for t in only_new if t + late <= end}
        result.notes.append(
            f"interval: celery's last run is dated {late.total_seconds():.6f} s after an "
            "instant of goatbeat's grid (celery's lateness); goatbeat keeps its grid, so each "
            "run comes that much earlier than celery would send it"
        )
    elif old_times == new_times:
        old_set, new_set = set(), set()  # the common case, without hashing a million instants
    else:
        old_set, new_set = set(old_times), set(new_times)
    differing = sorted(old_set ^ new_set)
    if capped:
        # The cut may split a pair matched within a tolerance (solar, celery's lateness):
        # an instant that close to it proves nothing.
        differing = [t for t in differing if t <= cutoff - SOLAR_TOLERANCE]
    result.fire_difference_count = len(differing)
    zone = entry.celery_tz if entry.celery_tz != "UTC" else new.timezone
    for at in differing:
        in_old = at in old_set
        reason: str | None = None
        known = False
        start_at = new.start_at
        if "dow_7" in entry.bugs:
            reason, known = CELERY_BUGS["dow_7"], True
        elif in_old and start_at is not None and at == start_at and at != start:
            reason, known = CELERY_BUGS["start_time_catch_up"], True
        else:
            dst = _dst_reason(at, zone, in_old)
            if dst is not None:
                reason, known = dst
            elif entry.celery_schedule is None:
                reason = "celery never schedules this entry"
        if reason is None and at != start and _keeps_start_time_phase(entry, new):
            reason, known = CELERY_BUGS["start_time_phase"], True
        if reason is None and at == start:
            side = "celery" if in_old else "goatbeat"
            reason = (
                f"only {side} runs it at once (due since its last run): the last runs differ; "
                "re-run import_celery_beat after stopping the old scheduler"
            )
        if reason is None:
            reason = (
                f"the schedules differ: celery {plain_repr(entry.celery_schedule)}, "
                f"goatbeat {new.trigger.describe()}"
            )
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


def _refused(entry: SourceEntry, target: StoredSchedule | None, *, accepted: bool) -> ScheduleDiff:
    d = ScheduleDiff(
        name=entry.name,
        status="only_old" if target is None else "refused",
        refused=entry.problem,
        accepted=accepted,
    )
    d.notes.append(f"the importer refuses it: {entry.problem}")
    if target is None:
        d.notes.append("celery runs it; goatbeat has no schedule of that name")
    else:
        if isinstance(target, Schedule):
            what = target.trigger.describe() + ("" if target.enabled else ", disabled")
        else:
            what = f"damaged: {target.describe()}"
        d.notes.append(
            f"goatbeat has a schedule of that name ({what}), whose fire times cannot be "
            "compared with celery's: celery follows the entry's own rules"
        )
    if accepted:
        d.notes.append("accepted with --accept-refused: counted as no difference")
        if isinstance(target, Schedule) and target.enabled:
            d.notes.append(
                "goatbeat's schedule of that name is enabled: it runs after the cutover as "
                "goatbeat has it, not as celery ran the entry"
            )
    else:
        d.notes.append(f"to accept it (it stays on celery beat): --accept-refused {entry.name}")
    return d


def _keeps_start_time_phase(entry: SourceEntry, new: Schedule) -> bool:
    """A django-celery-beat interval that runs on its start_time's grid in goatbeat, while
    celery counts from a last run off that grid (importers.django_celery_beat)."""
    trigger = new.trigger
    return (
        isinstance(trigger, IntervalTrigger)
        and new.start_at is not None
        and trigger.anchor == new.start_at
        and entry.celery_schedule is not None
        and hasattr(entry.celery_schedule, "run_every")
        and entry.source is Source.DJANGO_CELERY_BEAT
    )


def _late_on_goatbeats_grid(entry: SourceEntry, new: Schedule) -> timedelta | None:
    """How far after an instant of goatbeat's interval grid celery's last run is dated, when
    that is celery's lateness (more than nothing, at most :func:`celery_lateness`)."""
    trigger = new.trigger
    last = max((t for t in (entry.last_run_at, new.last_run_at) if t is not None), default=None)
    if not isinstance(trigger, IntervalTrigger) or last is None:
        return None
    late = grid_offset(last, trigger.every, trigger.anchor)
    if late == timedelta(0) or not late_on_grid(last, trigger.every, trigger.anchor):
        return None
    assert late <= celery_lateness(trigger.every)
    return late


def compute_diff(
    old: Sequence[SourceEntry],
    new: Sequence[StoredSchedule],
    *,
    start: datetime,
    horizon: timedelta = timedelta(days=30),
    max_instants: int = 5,
    accept_known: bool = False,
    accept_refused: Collection[str] = (),
    now: datetime | None = None,
) -> DiffReport:
    """Compare celery's entries (``old``) with goatbeat's schedules (``new``) over
    ``(start, start + horizon]``. A goatbeat row that cannot be decoded is ``damaged``.

    An entry the importer refuses (``problem``: a custom schedule class, an option goatbeat
    has no equivalent for...) is a difference: celery runs it, and goatbeat cannot run it as
    celery does, so its fire times are not compared. ``accept_refused`` names the ones the
    operator accepts (the entry stays on celery beat, or a goatbeat schedule of theirs
    replaces it): listed, no difference. A name there that is not refused raises
    ``InvalidValue``.

    ``now``: when the comparison is made (default: ``start``). A ``start`` after it is a
    window in the future, with both schedulers assumed running until then: neither side runs
    anything *at once* at ``start``, only the instants after it."""
    end = start + horizon
    at_once = now is None or start <= now
    by_name = {s.name: s for s in new}
    refused = {e.name for e in old if e.problem is not None}
    unknown = sorted(set(accept_refused) - refused)
    if unknown:
        raise InvalidValue(
            "accept_refused",
            unknown,
            f"--accept-refused {', '.join(unknown)}: no entry of that name is refused by the "
            f"importer (refused: {', '.join(sorted(refused)) or 'none'})",
        )
    seen: set[str] = set()
    diffs: list[ScheduleDiff] = []
    for entry in old:
        seen.add(entry.name)
        target = by_name.get(entry.name)
        if entry.problem is not None:
            diffs.append(_refused(entry, target, accepted=entry.name in accept_refused))
            continue
        if target is None:
            diffs.append(ScheduleDiff(name=entry.name, status="only_old"))
            continue
        if isinstance(target, DamagedSchedule):
            d = ScheduleDiff(name=entry.name, status="damaged")
            d.notes.append(f"goatbeat's stored row is damaged: {target.describe()}")
            diffs.append(d)
            continue
        diffs.append(_compare_one(entry, target, start, end, max_instants, at_once))
    for sched in new:
        if sched.name not in seen:
            diffs.append(ScheduleDiff(name=sched.name, status="only_new"))
    diffs.sort(key=lambda d: d.name)
    return DiffReport(start=start, horizon=horizon, schedules=diffs, accept_known=accept_known)
