"""goatbeat's schedules back to celery beat: ``beat_schedule`` code or django-celery-beat rows.

The inverse of the importers, for a rollback after schedules were edited in goatbeat: each
goatbeat schedule becomes what the importer reads back as the same schedule. That is checked,
not assumed: every exported entry (the rendered Python code, executed; the row, as the
importer reads rows) is imported again in memory and compared with the goatbeat schedule on
every field both sides have (:func:`differences`). A schedule that does not come back equal
is refused by name and field (:class:`Refusal`), never exported as something else:

* goatbeat-only settings: ``jitter``, ``overlap``, ``max_runtime``, ``pause_on_failure``, a
  ``misfire`` policy other than ``run_once``, a ``misfire_grace`` or ``catch_up_limit`` that
  is neither goatbeat's default nor what an import sets;
* a cron expression celery's ``crontab`` cannot say (seconds, ``L``, ``W``, ``#``, both day
  fields restricted: cron ORs them, celery ANDs), a fixed-time field written as a full range
  (celery reads it as ``*``, a wildcard for the DST rules), a sub-second interval;
* for ``beat_schedule``: a crontab in a zone other than the app's, a start time, an end with a
  message expiry as well (both are ``options.expires``), a one-off, a once-at trigger;
* for django-celery-beat: what its columns cannot hold (a priority outside 0-255, an expiry
  that is not whole seconds, a coordinate with more than 6 decimals), and a one-off that has
  not run whose phase or start would need a ``last_run_at`` (an interval without a start
  time still to come, a crontab or solar row with a start time), which a one-off row reads as
  its run.

Phase. celery counts an interval from its last run, so an interval's phase is handed over as
a last run on goatbeat's grid: the grid instant before goatbeat's next one
(:func:`interval_last_run`), in the row's ``last_run_at`` or in the last runs JSON for stock
beat's ``celerybeat-schedule``. A crontab or solar schedule gets goatbeat's last run (the later
of it and the row's), so celery runs nothing goatbeat ran, or, when it never ran, a second
before goatbeat's next instant (:func:`before_next`), so celery runs an instant goatbeat still
owes (at once, as goatbeat would) and starts a start_time row with its first instant.

Pure planning here (:func:`plan_beat_schedule`, :func:`plan_django_celery_beat`); the writes to
django-celery-beat's tables are :func:`write_django_celery_beat`; the command is
:mod:`goatbeat.cli.export`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from goatbeat.conversion import describe_exception
from goatbeat.core.cron import CronTrigger, parse_cron
from goatbeat.core.durations import format_duration
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE_GRACE,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    Source,
    StoredSchedule,
)
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
)
from goatbeat.importers import kombu_json
from goatbeat.importers.comparison import BEAT_FIELDS, DCB_FIELDS, differences, headers_of
from goatbeat.importers.entries import SourceEntry, celery_misfire_grace
from goatbeat.importers.grid import late_on_grid
from goatbeat.importers.pysource import read_beat_schedule_source

__all__ = [
    "BeatEntry",
    "BeatSchedulePlan",
    "DcbPlan",
    "DcbRow",
    "Refusal",
    "differences",
    "before_next",
    "interval_last_run",
    "plan_beat_schedule",
    "plan_django_celery_beat",
    "read_rows",
    "render_beat_schedule",
    "write_django_celery_beat",
]

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


def _goatbeat_only(sched: Schedule) -> list[Refusal]:
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

_CRON_ORDER = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_FULL = {
    "minute": set(range(60)),
    "hour": set(range(24)),
    "day_of_month": set(range(1, 32)),
    "month_of_year": set(range(1, 13)),
    "day_of_week": set(range(7)),
}


def _ranges(values: Iterable[int]) -> str:
    ordered = sorted(set(values))
    parts: list[str] = []
    start = prev = ordered[0]
    for v in ordered[1:]:
        if v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = v
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def crontab_fields(sched: Schedule) -> dict[str, str] | Refusal:
    """celery ``crontab`` keyword arguments with the meaning of the schedule's cron trigger,
    or why there are none. A star field stays ``*`` (or ``*/k``): the star matters to the
    DST rules and to how the day fields combine."""
    trigger = sched.trigger
    assert isinstance(trigger, (CronTrigger, CeleryCrontabTrigger))
    texts = dict(zip(_CRON_ORDER, trigger.expression.split(), strict=False))
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
    for key in _CRON_ORDER:
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
            out[key] = _ranges(sets[key])
    return out


def _crontab(fields: Mapping[str, str]) -> Any:
    from celery.schedules import crontab

    return crontab(**fields)


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


def _period(every: timedelta) -> tuple[int, str]:
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


# -- beat_schedule ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeatEntry:
    """One exported ``beat_schedule`` entry: its Python source and what it is."""

    name: str
    code: str
    """``"name": {...},`` as it goes in the dict (indented by four spaces)."""
    disabled: bool = False
    """Left out of the dict (celery beat has no enabled flag): written as a comment."""
    last_run_at: datetime | None = None
    comments: tuple[str, ...] = ()
    imports: frozenset[str] = frozenset()
    """What its code needs imported (``datetime``, ``crontab``...)."""
    read_back: SourceEntry | None = None
    """The entry as the importer reads the code back (its celery schedule object included)."""


@dataclass(slots=True)
class BeatSchedulePlan:
    entries: list[BeatEntry] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    timezone: str = "UTC"
    imports: set[str] = field(default_factory=set)

    @property
    def last_runs(self) -> dict[str, datetime]:
        """Each exported entry's last run (intervals: on goatbeat's grid), for stock beat's
        ``celerybeat-schedule`` (docs/migration/celery-beat-schedule.md)."""
        return {
            e.name: e.last_run_at
            for e in self.entries
            if e.last_run_at is not None and not e.disabled
        }


class _Py:
    """Python source of a kombu-JSON value, and the imports it needs."""

    def __init__(self) -> None:
        self.imports: set[str] = set()

    def __call__(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return repr(value)
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self(v) for v in value) + "]"
        if isinstance(value, Mapping):
            return "{" + ", ".join(f"{self(k)}: {self(v)}" for k, v in value.items()) + "}"
        if isinstance(value, datetime):
            self.imports.add("datetime")
            return f"datetime.datetime.fromisoformat({value.isoformat()!r})"
        if isinstance(value, date):
            self.imports.add("datetime")
            return f"datetime.date.fromisoformat({value.isoformat()!r})"
        if isinstance(value, time):
            self.imports.add("datetime")
            return f"datetime.time.fromisoformat({value.isoformat()!r})"
        if isinstance(value, Decimal):
            self.imports.add("decimal")
            return f"decimal.Decimal({str(value)!r})"
        if isinstance(value, UUID):
            self.imports.add("uuid")
            return f"uuid.UUID({str(value)!r})"
        raise TypeError(f"{type(value).__name__} has no Python literal here")


def _beat_schedule_call(sched: Schedule, zone: str, py: _Py) -> str | Refusal:
    trigger = sched.trigger
    if isinstance(trigger, (CronTrigger, CeleryCrontabTrigger)):
        if trigger.timezone != zone:
            return Refusal(
                sched.name,
                "timezone",
                f"{trigger.timezone!r}: a beat_schedule crontab runs in the app's zone "
                f"({zone!r}, --timezone); celery has no per-entry zone (django-celery-beat "
                "rows do)",
            )
        fields = crontab_fields(sched)
        if isinstance(fields, Refusal):
            return fields
        py.imports.add("crontab")
        args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return f"crontab({args})"
    if isinstance(trigger, IntervalTrigger):
        if trigger.every < timedelta(seconds=1):
            return Refusal(
                sched.name, "trigger", f"{trigger.describe()}: celery beat runs at most every 1 s"
            )
        py.imports.update({"schedule", "datetime"})
        micros = trigger.every // timedelta(microseconds=1)
        if micros % 1_000_000 == 0:
            every = f"datetime.timedelta(seconds={micros // 1_000_000})"
        else:
            every = f"datetime.timedelta(microseconds={micros})"
        return f"schedule(run_every={every})"
    if isinstance(trigger, SolarTrigger):
        py.imports.add("solar")
        return f"solar({trigger.event!r}, {trigger.latitude!r}, {trigger.longitude!r})"
    if isinstance(trigger, OnceTrigger):
        return Refusal(
            sched.name,
            "trigger",
            f"{trigger.describe()}: a beat_schedule has no run-once entry (django-celery-beat's "
            "clocked rows do: --to django-celery-beat)",
        )
    return Refusal(sched.name, "trigger", f"{trigger.describe()}: celery beat has no equivalent")


def _beat_options(sched: Schedule, py: _Py) -> dict[str, str] | Refusal:
    r = sched.routing
    options: dict[str, str] = {}
    for key in ("queue", "exchange", "routing_key", "priority"):
        value = getattr(r, key)
        if value is not None:
            options[key] = repr(value)
    if sched.end_at is not None:
        if r.expires is not None:
            return Refusal(
                sched.name,
                "end_at",
                f"{sched.end_at.isoformat()}: a beat_schedule says an end only as "
                f"options.expires (an instant), which already holds the message expiry "
                f"({r.expires:g} s)",
            )
        options["expires"] = py(sched.end_at)
    elif r.expires is not None:
        options["expires"] = repr(r.expires)
    headers = kombu_json.decode(dict(r.headers))
    if headers:
        options["headers"] = py(headers)
    return options


def _beat_entry(
    sched: Schedule, zone: str, now: datetime
) -> tuple[BeatEntry | None, list[Refusal]]:
    refused = _goatbeat_only(sched)
    if sched.start_at is not None:
        refused.append(
            Refusal(
                sched.name,
                "start_at",
                f"{sched.start_at.isoformat()}: a beat_schedule entry has no start time "
                "(django-celery-beat rows do)",
            )
        )
    if sched.one_off and not isinstance(sched.trigger, OnceTrigger):
        refused.append(Refusal(sched.name, "one_off", "a beat_schedule entry cannot run only once"))
    py = _Py()
    call = _beat_schedule_call(sched, zone, py)
    if isinstance(call, Refusal):
        refused.append(call)
    options = _beat_options(sched, py)
    if isinstance(options, Refusal):
        refused.append(options)
    if refused:
        return None, refused
    assert isinstance(call, str) and isinstance(options, dict)
    try:
        lines = [f"    {sched.name!r}: {{", f"        'task': {sched.task!r},"]
        lines.append(f"        'schedule': {call},")
        if sched.args:
            lines.append(f"        'args': {py(kombu_json.decode(list(sched.args)))},")
        if sched.kwargs:
            lines.append(f"        'kwargs': {py(kombu_json.decode(dict(sched.kwargs)))},")
        if options:
            body = ", ".join(f"{k!r}: {v}" for k, v in options.items())
            lines.append(f"        'options': {{{body}}},")
        lines.append("    },")
    except TypeError as exc:
        return None, [Refusal(sched.name, "args", str(exc))]
    comments: list[str] = []
    if sched.description:
        comments.append(f"{sched.name}: {' '.join(sched.description.split())}")
    last = (
        interval_last_run(sched, now)
        if isinstance(sched.trigger, IntervalTrigger)
        else ran_at(sched) or before_next(sched, now)
    )
    entry = BeatEntry(
        name=sched.name,
        code="\n".join(lines),
        disabled=not sched.enabled or sched.paused,
        last_run_at=last,
        comments=tuple(comments),
        imports=frozenset(py.imports),
    )
    read = _read_back_beat(entry, zone)
    if isinstance(read, Refusal):
        return None, [read]
    assert read.schedule is not None
    diffs = differences(sched, read.schedule, now=now, fields=BEAT_FIELDS)
    if diffs:
        return None, [_unequal(sched.name, diffs)]
    return replace(entry, read_back=read), []


def _unequal(name: str, diffs: list[tuple[str, Any, Any]]) -> Refusal:
    key, ours, back = diffs[0]
    more = f" (and {', '.join(d[0] for d in diffs[1:])})" if len(diffs) > 1 else ""
    return Refusal(
        name, key, f"goatbeat has {ours!r}, celery's side would read back {back!r}{more}"
    )


def _imports(names: Collection[str]) -> list[str]:
    out = [f"import {m}" for m in ("datetime", "decimal", "uuid") if m in names]
    celery = sorted(n for n in ("crontab", "schedule", "solar") if n in names)
    if celery:
        out += ["", f"from celery.schedules import {', '.join(celery)}"]
    return out


def _read_back_beat(entry: BeatEntry, zone: str) -> SourceEntry | Refusal:
    """The entry's code read back (parsed, never executed: :mod:`.pysource`), and read by
    the importer (``celery_beat.read_entry``)."""
    from goatbeat.importers.celery_beat import read_entry

    source = "\n".join([*_imports(entry.imports), "", "beat_schedule = {", entry.code, "}"])
    try:
        value = read_beat_schedule_source(source)[entry.name]
    except Exception as exc:  # our own rendering failed: refuse rather than write it
        return Refusal(entry.name, "schedule", f"cannot be written: {describe_exception(exc)}")
    read = read_entry(entry.name, value, timezone=zone, last_run_at=entry.last_run_at)
    if read.schedule is None:
        return Refusal(entry.name, "schedule", f"celery's side would refuse it: {read.problem}")
    return read


def plan_beat_schedule(
    schedules: Sequence[StoredSchedule], *, timezone: str, now: datetime
) -> BeatSchedulePlan:
    """The ``beat_schedule`` entries of ``schedules`` (damaged rows refused), each checked by
    reading it back; ``timezone``: the Celery app's (``app.conf.timezone``)."""
    zone = get_zone(timezone, "timezone").key or timezone
    plan = BeatSchedulePlan(timezone=zone)
    for sched in sorted(schedules, key=lambda s: s.name):
        if not isinstance(sched, Schedule):
            plan.refused.append(Refusal(sched.name, "row", f"damaged: {sched.describe()}"))
            continue
        if sched.name == BACKEND_CLEANUP and sched.source is Source.CELERY:
            plan.notes.append(
                (sched.name, "left out: celery beat adds it itself (results that expire)")
            )
            continue
        entry, refused = _beat_entry(sched, zone, now)
        plan.refused.extend(refused)
        if entry is None:
            continue
        plan.entries.append(entry)
        plan.imports |= entry.imports
        if entry.disabled:
            state = "paused" if sched.paused else "disabled"
            plan.notes.append(
                (
                    sched.name,
                    f"{state} in goatbeat: written as a comment (a beat_schedule has no "
                    "enabled flag, and an entry there runs); uncomment it to run it",
                )
            )
        if sched.description:
            plan.notes.append(
                (sched.name, "its description is written as a comment (an entry has no field)")
            )
    return plan


def render_beat_schedule(
    plan: BeatSchedulePlan, *, origin: str, now: datetime, producer: str = "goatbeat"
) -> str:
    """The Python module: imports, then ``beat_schedule = {...}``."""
    stamp = now.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    lines = [
        f'"""celery beat\'s beat_schedule, exported by {producer} from {origin} at {stamp}.',
        "",
        "Set it as app.conf.beat_schedule (Django: CELERY_BEAT_SCHEDULE). Crontabs run in the",
        f"app's timezone, which must be {plan.timezone!r} (app.conf.timezone / CELERY_TIMEZONE).",
        '"""',
        "",
        *_imports(plan.imports),
        "",
        "beat_schedule = {",
    ]
    for entry in plan.entries:
        for comment in entry.comments:
            lines.append(f"    # {comment}")
        if entry.disabled:
            lines.append("    # disabled in goatbeat (a beat_schedule has no enabled flag):")
            lines.extend("    # " + line[4:] for line in entry.code.splitlines())
        else:
            lines.append(entry.code)
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- django-celery-beat ---------------------------------------------------------------------

TASKS = "django_celery_beat_periodictask"
CHANGES = "django_celery_beat_periodictasks"
_SCHEDULE_TABLES = {
    "interval": ("django_celery_beat_intervalschedule", ("every", "period")),
    "crontab": (
        "django_celery_beat_crontabschedule",
        ("minute", "hour", "day_of_week", "day_of_month", "month_of_year", "timezone"),
    ),
    "solar": ("django_celery_beat_solarschedule", ("event", "latitude", "longitude")),
    "clocked": ("django_celery_beat_clockedschedule", ("clocked_time",)),
}
_ROW_COLUMNS = (
    "task args kwargs queue exchange routing_key priority headers expires expire_seconds "
    "enabled one_off start_time description last_run_at total_run_count"
).split()
_NAME_LENGTH = 200
_DECIMALS = 6


@dataclass(frozen=True, slots=True)
class DcbRow:
    """A django-celery-beat row as the export writes it."""

    name: str
    kind: str  # interval, crontab, solar, clocked
    schedule: dict[str, Any]  # the schedule table's columns
    values: dict[str, Any]  # the periodic task's columns (instants aware, UTC)


@dataclass(slots=True)
class DcbPlan:
    create: list[DcbRow] = field(default_factory=list)
    update: list[tuple[DcbRow, list[str]]] = field(default_factory=list)
    """Rows that change, with what changes (``enabled: True -> False``...)."""
    unchanged: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    """Rows of the table goatbeat has no schedule (of the exported sources) for."""
    read_back: dict[str, SourceEntry] = field(default_factory=dict)
    """Each exported row as the importer reads it (its celery schedule object included)."""

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.update)


def _dcb_row(
    sched: Schedule, existing: Mapping[str, Any] | None, now: datetime
) -> DcbRow | list[Refusal]:
    refused = _goatbeat_only(sched)

    def refuse(field_name: str, reason: str) -> None:
        refused.append(Refusal(sched.name, field_name, reason))

    if len(sched.name) > _NAME_LENGTH:
        refuse("name", f"{len(sched.name)} characters; django-celery-beat keeps {_NAME_LENGTH}")
    for key, value in (
        ("task", sched.task),
        ("queue", sched.routing.queue),
        ("exchange", sched.routing.exchange),
        ("routing_key", sched.routing.routing_key),
    ):
        if value is not None and len(value) > _NAME_LENGTH:
            refuse(key, f"{len(value)} characters; django-celery-beat keeps {_NAME_LENGTH}")
    priority = sched.routing.priority
    if priority is not None and not 0 <= priority <= 255:
        refuse("priority", f"{priority}: django-celery-beat's priority is 0-255")
    expires = sched.routing.expires
    if expires is not None and (float(expires) != int(expires) or expires < 1):
        refuse("expires", f"{expires:g} s: django-celery-beat's expire_seconds is whole seconds")
    if sched.end_at is not None and expires is not None:
        refuse(
            "end_at",
            f"{sched.end_at.isoformat()} with a message expiry of {expires:g} s: "
            "django-celery-beat sends its expires (the end) as every message's expiry and "
            "ignores expire_seconds then",
        )
    trigger = sched.trigger
    kind: str
    columns: dict[str, Any]
    if isinstance(trigger, IntervalTrigger):
        kind = "interval"
        every, period = _period(trigger.every)
        if period == "microseconds" and trigger.every < timedelta(seconds=1):
            refuse("trigger", f"{trigger.describe()}: celery beat runs at most every 1 s")
        columns = {"every": every, "period": period}
        if sched.start_at is not None and (
            trigger.anchor is None
            or (sched.start_at - trigger.anchor) % trigger.every != timedelta(0)
        ):
            refuse(
                "trigger",
                f"{trigger.describe()} with start_at {sched.start_at.isoformat()}: "
                "django-celery-beat counts an interval with a start_time from the start_time, "
                "which is off this grid",
            )
    elif isinstance(trigger, (CronTrigger, CeleryCrontabTrigger)):
        kind = "crontab"
        fields = crontab_fields(sched)
        if isinstance(fields, Refusal):
            refused.append(fields)
            fields = {k: "*" for k in _CRON_ORDER}
        columns = {**fields, "timezone": trigger.timezone}
    elif isinstance(trigger, SolarTrigger):
        kind = "solar"
        for key in ("latitude", "longitude"):
            value = getattr(trigger, key)
            if round(value, _DECIMALS) != value:
                refuse(key, f"{value!r}: django-celery-beat keeps {_DECIMALS} decimals")
        columns = {
            "event": trigger.event,
            "latitude": Decimal(f"{trigger.latitude:.{_DECIMALS}f}"),
            "longitude": Decimal(f"{trigger.longitude:.{_DECIMALS}f}"),
        }
    elif isinstance(trigger, OnceTrigger):
        kind = "clocked"
        columns = {"clocked_time": trigger.at}
        if sched.start_at is not None and sched.start_at > trigger.at:
            refuse("start_at", "after the clocked time: it would never run")
    else:
        refuse("trigger", f"{trigger.describe()}: django-celery-beat has no equivalent")
        return refused
    theirs_last = None if existing is None else existing.get("last_run_at")
    theirs_count = 0 if existing is None else int(existing.get("total_run_count") or 0)
    if isinstance(trigger, IntervalTrigger):
        last = interval_last_run(sched, now)
        if (
            sched.next_run_at is None
            and theirs_last is not None
            and last is not None
            and theirs_last <= last
            and late_on_grid(theirs_last, trigger.every, last)
        ):
            last = theirs_last  # not planned (disabled): the row's run on this grid will do
        if sched.one_off and ran_at(sched) is None and last is not None:
            refuse(
                "one_off",
                "a one-off interval that has not run: django-celery-beat would need a "
                "last_run_at to keep its phase, and reads one as its run (give it a start_at)",
            )
    elif kind == "clocked":
        last = ran_at(sched)  # never ran: it is owed (pending), as the importer reads it
    else:
        last = ran_at(sched)
        if last is None and theirs_last is None:
            if not sched.one_off:
                last = before_next(sched, now)
            elif sched.next_run_at is not None and sched.next_run_at <= now:
                refuse(
                    "one_off",
                    f"a one-off {kind} that has not run and whose instant "
                    f"{sched.next_run_at.isoformat()} is owed: django-celery-beat would run it "
                    "at its next instant instead, unless the row has a last_run_at, which a "
                    "one-off row reads as its run",
                )
            elif sched.start_at is not None:
                # django-celery-beat dates a never-run row with a start_time 30 years back,
                # so it runs it at once at its start_time, off its schedule (CELERY_BUGS
                # start_time_catch_up), unless the row has a last run.
                refuse(
                    "one_off",
                    f"a one-off {kind} with a start_at that has not run: django-celery-beat "
                    "runs it at once at its start_time unless the row has a last_run_at, "
                    "which a one-off row reads as its run",
                )
    if theirs_last is not None and (last is None or theirs_last > last):
        last = theirs_last  # celery ran it later still: never hand back an earlier run
    if refused:
        return refused
    headers = headers_of(sched, strip_name=True)
    values: dict[str, Any] = {
        "task": sched.task,
        "args": json.dumps(list(sched.args)),
        "kwargs": json.dumps(dict(sched.kwargs)),
        "queue": sched.routing.queue,
        "exchange": sched.routing.exchange,
        "routing_key": sched.routing.routing_key,
        "priority": priority,
        "headers": json.dumps(kombu_json.encode(headers, field="headers")),
        "expires": sched.end_at,
        "expire_seconds": None if expires is None else int(expires),
        "enabled": sched.enabled and not sched.paused,
        "one_off": sched.one_off or kind == "clocked",
        "start_time": sched.start_at,
        "description": sched.description,
        "last_run_at": last,
        "total_run_count": max(theirs_count, sched.total_run_count),
    }
    return DcbRow(name=sched.name, kind=kind, schedule=columns, values=values)


def _importer_row(row: DcbRow, now: datetime) -> dict[str, Any]:
    """``row`` in the shape the importer's query returns (``django_celery_beat._entry``)."""
    out: dict[str, Any] = {"name": row.name, "date_changed": now, **row.values}
    for kind, (_, cols) in _SCHEDULE_TABLES.items():
        mine = kind == row.kind
        out[f"{kind}_id"] = 1 if mine else None
        out[f"{kind}_row"] = 1 if mine else None
        for col in cols:
            out[f"{kind}_{col}"] = row.schedule.get(col) if mine else None
    return out


def _read_back_row(row: DcbRow, now: datetime) -> SourceEntry | Refusal:
    from goatbeat.importers.django_celery_beat import read_row

    entry = read_row(_importer_row(row, now))
    if entry.schedule is None:
        return Refusal(
            row.name, "row", f"django-celery-beat's side would refuse it: {entry.problem}"
        )
    return entry


def _changes(row: DcbRow, existing: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    theirs_kind = existing.get("kind")
    if theirs_kind != row.kind or _schedule_differs(row, existing.get("schedule") or {}):
        out.append(
            f"schedule: {_describe_schedule(theirs_kind, existing.get('schedule') or {})} -> "
            f"{_describe_schedule(row.kind, row.schedule)}"
        )
    for key in _ROW_COLUMNS:
        ours, theirs = row.values[key], existing.get(key)
        if key in ("args", "kwargs", "headers"):
            same = _json(ours) == _json(theirs)
        elif key in ("enabled", "one_off"):
            same = bool(ours) == bool(theirs)
        elif key == "description":
            same = (ours or "") == (theirs or "")
        elif key in ("priority", "expire_seconds", "total_run_count"):
            same = (None if ours is None else int(ours)) == (
                None if theirs is None else int(theirs)
            )
        else:
            same = ours == theirs
        if not same:
            out.append(f"{key}: {_show(theirs)} -> {_show(ours)}")
    return out


def _json(text: Any) -> Any:
    try:
        return kombu_json.loads(None if text is None else str(text), field="json", default=None)
    except GoatbeatError:
        return text


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return repr(value)


def _schedule_differs(row: DcbRow, theirs: Mapping[str, Any]) -> bool:
    for key, ours in row.schedule.items():
        value = theirs.get(key)
        if isinstance(ours, Decimal):
            if value is None or Decimal(str(value)) != ours:
                return True
        elif key == "every":
            if value is None or int(value) != ours:
                return True
        elif ours != value:
            return True
    return False


def _describe_schedule(kind: Any, cols: Mapping[str, Any]) -> str:
    if kind is None:
        return "none"
    if kind == "interval":
        return f"every {cols.get('every')} {cols.get('period')}"
    if kind == "crontab":
        fields = " ".join(str(cols.get(k)) for k in _CRON_ORDER)
        return f"crontab {fields} ({cols.get('timezone')})"
    if kind == "solar":
        return f"solar {cols.get('event')} {cols.get('latitude')},{cols.get('longitude')}"
    return f"clocked {_show(cols.get('clocked_time'))}"


def _says_the_same(sched: Schedule, theirs: Mapping[str, Any], now: datetime) -> bool:
    """Whether the existing row, read by the importer, is ``sched`` (an earlier export)."""
    if theirs.get("kind") is None:
        return False
    values = {k: theirs.get(k) for k in _ROW_COLUMNS}
    row = DcbRow(
        name=sched.name, kind=theirs["kind"], schedule=dict(theirs["schedule"]), values=values
    )
    back = _read_back_row(row, now)
    return (
        not isinstance(back, Refusal)
        and back.schedule is not None
        and not differences(sched, back.schedule, now=now, fields=DCB_FIELDS, dcb=True)
    )


def plan_django_celery_beat(
    schedules: Sequence[StoredSchedule],
    existing: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
) -> DcbPlan:
    """What exporting ``schedules`` writes into django-celery-beat's tables.

    ``existing``: the table's rows by name (:func:`read_rows`). A goatbeat schedule imported
    from django-celery-beat updates its row (created again if it was deleted there); one made
    in goatbeat creates a row, and refuses to take over a row of that name unless that row
    already says what goatbeat has (an earlier export). Rows goatbeat has no schedule for are
    left alone. Each row is read back as the importer reads it and compared."""
    plan = DcbPlan()
    names = set()
    for sched in sorted(schedules, key=lambda s: s.name):
        names.add(sched.name)
        if not isinstance(sched, Schedule):
            plan.refused.append(Refusal(sched.name, "row", f"damaged: {sched.describe()}"))
            continue
        theirs = existing.get(sched.name)
        made = _dcb_row(sched, theirs, now)
        if isinstance(made, list):
            plan.refused.extend(made)
            continue
        read = _read_back_row(made, now)
        if isinstance(read, Refusal):
            plan.refused.append(read)
            continue
        assert read.schedule is not None
        plan.read_back[sched.name] = read
        diffs = differences(sched, read.schedule, now=now, fields=DCB_FIELDS, dcb=True)
        if diffs:
            plan.refused.append(_unequal(sched.name, diffs))
            continue
        if sched.paused:
            plan.notes.append(
                (sched.name, "paused in goatbeat: exported disabled (the pause note is not kept)")
            )
        if theirs is None:
            plan.create.append(made)
            continue
        changes = _changes(made, theirs)
        if not changes:
            plan.unchanged.append(sched.name)
        elif sched.source is not Source.DJANGO_CELERY_BEAT and not _says_the_same(
            sched, theirs, now
        ):
            plan.refused.append(
                Refusal(
                    sched.name,
                    "name",
                    f"a django-celery-beat row of that name exists and goatbeat did not import "
                    f"it (the schedule is goatbeat's, source {sched.source.value!r}): rename "
                    "one of them, or delete the row first",
                )
            )
        else:
            plan.update.append((made, changes))
    plan.left_alone.extend(sorted(set(existing) - names))
    return plan


# -- reading and writing the tables -----------------------------------------------------------


def _marker(conn: Any) -> str:
    return "?" if isinstance(conn, sqlite3.Connection) else "%s"


def _naive(conn: Any) -> bool:
    return isinstance(conn, sqlite3.Connection) or getattr(conn, "vendor", None) == "sqlite"


def _columns(cursor: Any, table: str) -> set[str]:
    try:
        cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")  # noqa: S608 - fixed names
    except Exception as exc:  # any driver: missing table
        raise StoreError(
            f"cannot read {table}: {describe_exception(exc)}; is this django-celery-beat's "
            "database (its migrations applied)?"
        ) from None
    names = {d[0] for d in cursor.description}
    cursor.fetchall()
    return names


def read_rows(conn: Any, *, naive_timezone: str = "UTC") -> dict[str, dict[str, Any]]:
    """The periodic task rows by name: their columns (instants aware, in UTC), ``kind`` and
    ``schedule`` (the columns of the schedule row they point to)."""
    from goatbeat.importers.entries import celery_instant

    cursor = conn.cursor()
    try:
        have = _columns(cursor, TASKS)
        cols = ["id", "name", *(c for c in _ROW_COLUMNS if c in have)]
        fks = [f"{k}_id" for k in _SCHEDULE_TABLES if f"{k}_id" in have]
        cursor.execute(f"SELECT {', '.join(cols + fks)} FROM {TASKS}")  # noqa: S608
        rows = [dict(zip(cols + fks, r, strict=True)) for r in cursor.fetchall()]
        schedules: dict[str, dict[Any, dict[str, Any]]] = {}
        for kind, (table, scols) in _SCHEDULE_TABLES.items():
            if f"{kind}_id" not in have:
                continue
            cursor.execute(f"SELECT id, {', '.join(scols)} FROM {table}")  # noqa: S608
            schedules[kind] = {r[0]: dict(zip(scols, r[1:], strict=True)) for r in cursor}
    finally:
        cursor.close()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        for key in ("last_run_at", "start_time", "expires"):
            if key in row:
                row[key] = celery_instant(row[key], key, naive_timezone)
        row["kind"] = None
        row["schedule"] = {}
        for kind in _SCHEDULE_TABLES:
            fk = row.get(f"{kind}_id")
            if fk is not None:
                sched = dict(schedules.get(kind, {}).get(fk, {}))
                if "clocked_time" in sched:
                    sched["clocked_time"] = celery_instant(
                        sched["clocked_time"], "clocked_time", naive_timezone
                    )
                row["kind"], row["schedule"] = kind, sched
                break
        out[str(row["name"])] = row
    return out


def _db_value(value: Any, naive: bool, naive_timezone: str) -> Any:
    if isinstance(value, datetime) and naive:
        return value.astimezone(get_zone(naive_timezone)).replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(value, Decimal) and naive:
        return str(value)
    return value


def _schedule_id(cursor: Any, row: DcbRow, marker: str, naive: bool, tz: str) -> int:
    """The id of a schedule row saying ``row.schedule``: an existing one (django-celery-beat
    shares them between tasks, so one is never changed in place), else a new one."""
    table, cols = _SCHEDULE_TABLES[row.kind]
    cursor.execute(f"SELECT id, {', '.join(cols)} FROM {table}")  # noqa: S608
    from goatbeat.importers.entries import celery_instant

    for found in cursor.fetchall():
        theirs = dict(zip(cols, found[1:], strict=True))
        if "clocked_time" in theirs:
            theirs["clocked_time"] = celery_instant(theirs["clocked_time"], "clocked_time", tz)
        if not _schedule_differs(row, theirs):
            return int(found[0])
    values = [_db_value(row.schedule[c], naive, tz) for c in cols]
    cursor.execute(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES "  # noqa: S608
        f"({', '.join(marker for _ in cols)}) RETURNING id",
        values,
    )
    (new_id,) = cursor.fetchone()
    return int(new_id)


def write_django_celery_beat(
    conn: Any,
    plan: DcbPlan,
    *,
    now: datetime,
    naive_timezone: str = "UTC",
) -> None:
    """Write the plan's rows in one transaction and move ``last_update`` of
    ``django_celery_beat_periodictasks``, so a DatabaseScheduler reads them again. Raises
    ``StoreError`` (nothing written) when the tables refuse."""
    marker, naive = _marker(conn), _naive(conn)
    django_autocommit = conn.get_autocommit() if hasattr(conn, "get_autocommit") else None
    if django_autocommit:
        conn.set_autocommit(False)
    cursor = conn.cursor()
    try:
        have = _columns(cursor, TASKS)
        rows = [*plan.create, *(r for r, _ in plan.update)]
        creating = {r.name for r in plan.create}
        for row in rows:
            sid = _schedule_id(cursor, row, marker, naive, naive_timezone)
            values = {k: v for k, v in row.values.items() if k in have}
            values["date_changed"] = now
            for kind in _SCHEDULE_TABLES:
                if f"{kind}_id" in have:
                    values[f"{kind}_id"] = sid if kind == row.kind else None
            params = [_db_value(v, naive, naive_timezone) for v in values.values()]
            if row.name in creating:
                cols = ["name", *values]
                cursor.execute(
                    f"INSERT INTO {TASKS} ({', '.join(cols)}) VALUES "  # noqa: S608
                    f"({', '.join(marker for _ in cols)})",
                    [row.name, *params],
                )
            else:
                sets = ", ".join(f"{k} = {marker}" for k in values)
                cursor.execute(
                    f"UPDATE {TASKS} SET {sets} WHERE name = {marker}",  # noqa: S608
                    [*params, row.name],
                )
        if rows:
            stamp = _db_value(now, naive, naive_timezone)
            cursor.execute(
                f"UPDATE {CHANGES} SET last_update = {marker} WHERE ident = 1",  # noqa: S608
                (stamp,),
            )
            if cursor.rowcount == 0:
                cursor.execute(
                    f"INSERT INTO {CHANGES} (ident, last_update) VALUES (1, {marker})",  # noqa: S608
                    (stamp,),
                )
    except GoatbeatError:
        conn.rollback()
        raise
    except Exception as exc:  # any driver error: the transaction is undone
        conn.rollback()
        raise StoreError(
            f"cannot write django-celery-beat's tables: {describe_exception(exc)}"
        ) from None
    else:
        conn.commit()
    finally:
        cursor.close()
        if django_autocommit:
            conn.set_autocommit(True)
