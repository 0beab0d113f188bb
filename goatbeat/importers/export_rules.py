"""What the export holds every schedule to, whichever side it goes to: the settings only goatbeat
has, a cron expression as celery's ``crontab`` fields, an interval's phase as a last run
(:func:`interval_last_run`, :func:`before_next`), and the :class:`Refusal` of a schedule that
would not come back equal. The planning is :mod:`goatbeat.importers.export`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from goatbeat.conversion import ranges
from goatbeat.core.cron import CronTrigger, parse_cron
from goatbeat.core.durations import format_duration
from goatbeat.core.model import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE_GRACE,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    Source,
)
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
)
from goatbeat.importers.entries import celery_misfire_grace

BACKEND_CLEANUP = "celery.backend_cleanup"
"""The entry stock celery beat adds to every beat_schedule itself (the importer reads it as
one): never written into the exported code."""

BEAT_SOURCES = frozenset({Source.CELERY, Source.ADMIN})
"""What ``--to beat-schedule`` exports by default: imported from a beat_schedule, or made in
goatbeat (``schedule add``, the admin)."""
DCB_SOURCES = frozenset({Source.DJANGO_CELERY_BEAT, Source.ADMIN})
"""What ``--to django-celery-beat`` exports by default: its own rows, and schedules made in
goatbeat."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A schedule that cannot be exported: which field, and why."""

    name: str
    field: str
    reason: str

    def line(self) -> str:
        return f"{self.name}: {self.field}: {self.reason}"


# -- what both sides have -----------------------------------------------------------------


def goatbeat_only(sched: Schedule) -> list[Refusal]:
    """The settings celery beat has no equivalent for, when set to anything but a default."""
    out: list[Refusal] = []

    def refuse(field_name: str, reason: str) -> None:
        out.append(Refusal(sched.name, field_name, reason))

    if sched.jitter:
        refuse(
            "jitter",
            f"{format_duration(sched.jitter)} is goatbeat's; celery beat sends each run on time",
        )
    if sched.overlap is not OverlapPolicy.ALLOW:
        refuse(
            "overlap",
            f"{sched.overlap.value!r} is goatbeat's; celery beat always sends the next run "
            "(overlap allow)",
        )
    if sched.max_runtime is not None:
        refuse(
            "max_runtime",
            f"{format_duration(sched.max_runtime)} is goatbeat's; celery beat has no such bound",
        )
    if sched.pause_on_failure is not None:
        refuse(
            "pause_on_failure",
            f"{sched.pause_on_failure} is goatbeat's; celery beat never pauses a schedule",
        )
    if sched.misfire is not MisfirePolicy.RUN_ONCE:
        refuse(
            "misfire",
            f"{sched.misfire.value!r} is goatbeat's; celery beat runs a missed schedule once "
            "(run_once)",
        )
    if sched.misfire_grace not in (DEFAULT_MISFIRE_GRACE, celery_misfire_grace(sched.trigger)):
        refuse(
            "misfire_grace",
            f"{format_duration(sched.misfire_grace)} is goatbeat's (an import sets "
            f"{format_duration(celery_misfire_grace(sched.trigger))}); celery beat has no grace",
        )
    if sched.catch_up_limit != DEFAULT_CATCH_UP_LIMIT:
        refuse(
            "catch_up_limit",
            f"{sched.catch_up_limit} is goatbeat's; celery beat runs a missed schedule once",
        )
    return out


# -- crontab fields -----------------------------------------------------------------------

CRON_ORDER = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_FULL = {
    "minute": set(range(60)),
    "hour": set(range(24)),
    "day_of_month": set(range(1, 32)),
    "month_of_year": set(range(1, 13)),
    "day_of_week": set(range(7)),
}


def crontab_fields(sched: Schedule) -> dict[str, str] | Refusal:
    """celery ``crontab`` keyword arguments with the meaning of the schedule's cron trigger,
    or why there are none. A star field stays ``*`` (or ``*/k``): the star matters to the
    DST rules and to how the day fields combine."""
    trigger = sched.trigger
    assert isinstance(trigger, (CronTrigger, CeleryCrontabTrigger))
    texts = dict(zip(CRON_ORDER, trigger.expression.split(), strict=False))
    if len(texts) != 5:
        return Refusal(
            sched.name,
            "trigger",
            f"{trigger.describe()}: celery's crontab has five fields (no seconds)",
        )
    fields = parse_cron(trigger.expression)
    extensions = [
        what
        for what, present in (
            ("L", fields.last_day or bool(fields.last_weekdays_of_month)),
            ("LW", fields.last_weekday),
            ("W", bool(fields.nearest_weekdays)),
            ("#", bool(fields.nth_weekdays)),
        )
        if present
    ]
    if extensions:
        return Refusal(
            sched.name,
            "trigger",
            f"{trigger.describe()}: celery's crontab has no {'/'.join(extensions)}",
        )
    if isinstance(trigger, CronTrigger) and not fields.days_and:
        return Refusal(
            sched.name,
            "trigger",
            f"{trigger.describe()}: cron runs it when EITHER day field matches (both are "
            "restricted), celery's crontab only when both do; split it into two schedules, one "
            "per day field",
        )
    sets = {
        "minute": set(fields.minutes),
        "hour": set(fields.hours),
        "day_of_month": set(fields.days),
        "month_of_year": set(fields.months),
        "day_of_week": set(fields.weekdays),
    }
    out: dict[str, str] = {}
    for key in CRON_ORDER:
        text = texts[key]
        if text in ("*", "?"):
            out[key] = "*"
        elif text.startswith("*/") and text[2:].isdigit():
            out[key] = text  # conversion._render_field keeps it when the sets agree
        elif sets[key] == _FULL[key] and key in ("minute", "hour"):
            return Refusal(
                sched.name,
                "trigger",
                f"{trigger.describe()}: the {key} field {text!r} covers every value without a "
                "star; celery's crontab reads it as '*', a wildcard for the DST rules "
                "(Debian cron's), which changes the runs at a DST change: write '*'",
            )
        else:
            out[key] = ranges(sets[key])
    return out


# -- intervals ------------------------------------------------------------------------------


def ran_at(sched: Schedule) -> datetime | None:
    """The schedule's last run, when there was one: goatbeat's own (``last_status`` set), or
    celery's that an import brought (a run count). An import also stores, for a row that never
    ran, the instant celery counts from; that is no run, and handing it back as one would
    finish a one-off."""
    if sched.last_status is not None or sched.total_run_count > 0:
        return sched.last_run_at
    return None


def before_next(sched: Schedule, now: datetime) -> datetime | None:
    """The last run to hand celery for a crontab or solar schedule that never ran: a second
    before goatbeat's next instant (the one the store planned, even if past: then celery
    runs it at once, as goatbeat would; else the first after ``now``). Without one, celery
    would count a new entry from when it starts, skipping an instant owed since, and
    django-celery-beat a row with a start_time from 30 years back, running it at once."""
    nxt = sched.next_run_at or sched.first_run_after(now)
    return None if nxt is None else nxt - timedelta(seconds=1)


def interval_last_run(sched: Schedule, now: datetime) -> datetime | None:
    """The last run to hand celery for an interval, so that it counts goatbeat's grid: the
    grid instant before goatbeat's next one (the one the store planned, even if past: then
    celery runs it at once, as goatbeat would; else the next after ``now``). Before a
    ``start_at`` still to come, the schedule's last run (if any): django-celery-beat counts
    from its start_time then."""
    trigger = sched.trigger
    assert isinstance(trigger, IntervalTrigger)
    nxt = sched.next_run_at
    if nxt is None:
        after = now if sched.last_run_at is None else max(now, sched.last_run_at)
        nxt = sched.first_run_after(after)
    if nxt is None:
        return ran_at(sched)
    last = nxt - trigger.every
    if sched.start_at is not None and last < sched.start_at:
        return ran_at(sched)
    return last


def celery_period(every: timedelta) -> tuple[int, str]:
    micros = every // timedelta(microseconds=1)
    for unit, size in (
        ("days", 86_400_000_000),
        ("hours", 3_600_000_000),
        ("minutes", 60_000_000),
        ("seconds", 1_000_000),
    ):
        if micros % size == 0:
            return micros // size, unit
    return micros, "microseconds"


def unequal(name: str, diffs: list[tuple[str, Any, Any]]) -> Refusal:
    key, ours, back = diffs[0]
    more = f" (and {', '.join(d[0] for d in diffs[1:])})" if len(diffs) > 1 else ""
    return Refusal(
        name, key, f"goatbeat has {ours!r}, celery's side would read back {back!r}{more}"
    )
