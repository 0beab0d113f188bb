"""How a schedule read back from an export compares with goatbeat's own (:func:`differences`).

Used by the export to refuse what would not come back as itself, and by the importers
(:mod:`.entries`) to know a schedule made in goatbeat that the source now holds as exported.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from goatbeat.core.cron import CronTrigger, parse_cron
from goatbeat.core.model import Schedule
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)
from goatbeat.importers import kombu_json
from goatbeat.importers.grid import late_on_grid

__all__ = ["differences", "headers_of", "BEAT_FIELDS", "DCB_FIELDS"]

_ALL_DAYS = set(range(1, 32))
_ALL_WEEKDAYS = set(range(7))


def _trigger_key(trigger: Trigger) -> Any:
    """What a trigger means, for comparing an exported one with the one read back."""
    if isinstance(trigger, (CronTrigger, CeleryCrontabTrigger)):
        f = parse_cron(trigger.expression)
        days_and = isinstance(trigger, CeleryCrontabTrigger) or f.days_and
        dom, dow = set(f.days), set(f.weekdays)
        if not days_and and (dom == _ALL_DAYS or dow == _ALL_WEEKDAYS):
            days_and, dom, dow = True, _ALL_DAYS, _ALL_WEEKDAYS
        return (
            "cron",
            trigger.timezone,
            f.seconds,
            f.minutes,
            f.hours,
            f.months,
            days_and,
            frozenset(dom),
            frozenset(dow),
            f.fixed_time,
            (f.last_day, f.last_weekday, f.nearest_weekdays),
            (f.last_weekdays_of_month, f.nth_weekdays),
        )
    if isinstance(trigger, IntervalTrigger):
        return ("interval", trigger.every)
    if isinstance(trigger, SolarTrigger):
        return ("solar", trigger.event, trigger.latitude, trigger.longitude)
    if isinstance(trigger, OnceTrigger):
        return ("once", trigger.at)
    return (type(trigger).__name__, trigger.to_spec())


def _next_instants(sched: Schedule, after: datetime, count: int = 3) -> list[datetime]:
    out: list[datetime] = []
    t: datetime | None = after
    while t is not None and len(out) < count:
        t = sched.first_run_after(t)
        if t is not None:
            out.append(t)
    return out


def headers_of(sched: Schedule, *, strip_name: bool) -> dict[str, Any]:
    headers = dict(kombu_json.decode(dict(sched.routing.headers)))
    if strip_name and headers.get("periodic_task_name") == sched.name:
        del headers["periodic_task_name"]  # django-celery-beat adds it to every message
    return headers


def differences(
    ours: Schedule,
    back: Schedule,
    *,
    now: datetime,
    fields: Collection[str],
    dcb: bool = False,
) -> list[tuple[str, Any, Any]]:
    """(field, goatbeat's, read back) for each of ``fields`` where the schedule read back from
    an export differs from goatbeat's. ``trigger`` compares meaning, and for an interval the
    grid too (the next instants after ``now``); ``dcb``: the importer adds the header
    ``periodic_task_name``, which django-celery-beat sends with every run."""
    out: list[tuple[str, Any, Any]] = []

    def check(name: str, a: Any, b: Any) -> None:
        if name in fields and a != b:
            out.append((name, a, b))

    check("task", ours.task, back.task)
    if "trigger" in fields:
        if _trigger_key(ours.trigger) != _trigger_key(back.trigger):
            out.append(("trigger", ours.trigger.describe(), back.trigger.describe()))
        elif isinstance(ours.trigger, IntervalTrigger):
            a, b = _next_instants(ours, now), _next_instants(back, now)
            ok = a == b or (
                len(a) == len(b)
                and bool(a)
                and isinstance(back.trigger, IntervalTrigger)
                and all(
                    y >= x and late_on_grid(y, ours.trigger.every, x)
                    for x, y in zip(a, b, strict=True)
                )
            )
            if not ok:
                out.append(
                    (
                        "trigger",
                        f"{ours.trigger.describe()}, next {[i.isoformat() for i in a]}",
                        f"{back.trigger.describe()}, next {[i.isoformat() for i in b]}",
                    )
                )
    check("args", kombu_json.decode(list(ours.args)), kombu_json.decode(list(back.args)))
    check("kwargs", kombu_json.decode(dict(ours.kwargs)), kombu_json.decode(dict(back.kwargs)))
    for key in ("queue", "exchange", "routing_key", "priority", "expires"):
        check(key, getattr(ours.routing, key), getattr(back.routing, key))
    check("headers", headers_of(ours, strip_name=dcb), headers_of(back, strip_name=dcb))
    check("start_at", ours.start_at, back.start_at)
    check("end_at", ours.end_at, back.end_at)
    once = isinstance(ours.trigger, OnceTrigger)  # runs once whatever one_off says
    check("one_off", ours.one_off or once, back.one_off or once)
    check("enabled", ours.enabled and not ours.paused, back.enabled)
    check("description", ours.description, back.description)
    return out


BEAT_FIELDS = frozenset(
    "task trigger args kwargs queue exchange routing_key priority expires headers end_at".split()
)
"""The fields a ``beat_schedule`` entry has (start_at, one_off, enabled and description it
lacks: refused, left out, or written as a comment)."""
DCB_FIELDS = BEAT_FIELDS | {"start_at", "one_off", "enabled", "description"}
