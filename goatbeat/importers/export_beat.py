"""goatbeat's schedules as celery beat ``beat_schedule`` code: planned, rendered, and read back
(parsed, never executed) to prove each entry is the same schedule."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from goatbeat.conversion import describe_exception
from goatbeat.core.cron import CronTrigger
from goatbeat.core.model import (
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
from goatbeat.importers.comparison import BEAT_FIELDS, differences
from goatbeat.importers.entries import SourceEntry
from goatbeat.importers.export_rules import (
    BACKEND_CLEANUP,
    Refusal,
    before_next,
    crontab_fields,
    goatbeat_only,
    interval_last_run,
    ran_at,
    unequal,
)
from goatbeat.importers.pysource import read_beat_schedule_source

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
    refused = goatbeat_only(sched)
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
        return None, [unequal(sched.name, diffs)]
    return replace(entry, read_back=read), []


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
