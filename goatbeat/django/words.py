"""Schedules and instants in words, for the admin.

A cron expression is described by cron-descriptor, the maintained library django-celery-beat
uses ("At 09:00, Monday through Friday"), with goatbeat's meaning where the two could be read
differently: when both day fields are restricted, cron fires on either (Vixie cron, goatbeat's
``cron``) unless one of them starts with ``*`` or the schedule is celery's crontab, which need
both. An expression cron-descriptor cannot describe (or a project without it) falls back on
goatbeat's own description (``cron 0 9 * * * (UTC)``).

Every instant is written with its zone: ``2026-12-01 09:00 Europe/Paris (08:00 UTC)``, with
the seconds where the schedule fires off whole minutes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.cron import MACROS
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)

__all__ = ["cron_in_words", "duration_in_words", "in_words", "instant", "shows_seconds"]

_ANY = ("*", "?")


def cron_in_words(expression: str, *, both_days: bool = False) -> str | None:
    """``"At 09:00, Monday through Friday"``; None when it cannot be described.

    ``both_days``: the day-of-month and day-of-week fields are ANDed (celery's crontab)."""
    text = expression.strip()
    parts = MACROS.get(text.lower(), text).split()
    if len(parts) not in (5, 6):
        return None
    words = _described(parts)
    if words is None:
        return None
    dom, dow = parts[-3], parts[-1]
    if dom in _ANY or dow in _ANY:
        return words
    if both_days or dom.startswith("*") or dow.startswith("*"):
        return words.replace(", or on ", ", on ") + ", when both days match"
    if ", or on " in words:
        return words
    # cron-descriptor says "or" only for some day-of-week shapes: say it for all of them,
    # from the two halves ("At 09:00, on day 1 of the month" | "At 09:00, Monday through
    # Friday" -> "At 09:00, on day 1 of the month, or Monday through Friday").
    by_dom = _described([*parts[:-1], "*"])
    by_dow = _described([*parts[:-3], "*", parts[-2], dow])
    if by_dom is None or by_dow is None:
        return words + ", on either day"
    a, b = by_dom.split(", "), by_dow.split(", ")
    head = 0
    while head < min(len(a), len(b)) - 1 and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head - 1 and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    return ", ".join([*a[:head], *middle_a]) + ", or " + ", ".join([*middle_b, *a[len(a) - tail :]])


def _described(parts: list[str]) -> str | None:
    """cron-descriptor's words for goatbeat's fields; None when it cannot say."""
    # A 7th field (the year) keeps cron-descriptor from reading 6 fields' last as a year:
    # goatbeat's 6 fields put the seconds first.
    spelled = " ".join([*parts, "*"] if len(parts) == 6 else parts)
    try:
        from cron_descriptor import ExpressionDescriptor, Options
    except ImportError:
        return None
    try:
        options = Options(locale_code="en_US", use_24hour_time_format=True)
        return str(ExpressionDescriptor(spelled, options).get_description())
    except Exception:  # its own errors, for syntax it does not take: ours is the fallback
        return None


def in_words(trigger: Trigger, timezone: str = "UTC") -> str:
    """A trigger in words: the cron's description (then the expression and its zone), an
    interval's period, a one-off's instant (in ``timezone`` and UTC), a solar event's place;
    goatbeat's own description otherwise."""
    if isinstance(trigger, (CronTrigger, CeleryCrontabTrigger)):
        words = cron_in_words(
            trigger.expression, both_days=isinstance(trigger, CeleryCrontabTrigger)
        )
        if words is None:
            return trigger.describe()
        kind = "celery crontab" if isinstance(trigger, CeleryCrontabTrigger) else "cron"
        return f"{words} ({kind} {trigger.expression}, {trigger.timezone})"
    if isinstance(trigger, IntervalTrigger):
        return trigger.describe().replace("every", "Every", 1)
    if isinstance(trigger, OnceTrigger):
        return f"Once, at {instant(trigger.at, timezone, seconds=shows_seconds(trigger))}"
    if isinstance(trigger, SolarTrigger):
        return trigger.describe()
    return str(trigger.describe())


def shows_seconds(trigger: Any) -> bool:
    """Whether the schedule's instants fall off whole minutes, so times show their seconds."""
    if isinstance(trigger, IntervalTrigger):
        anchor_seconds = trigger.anchor.second if trigger.anchor is not None else 0
        return trigger.every % timedelta(minutes=1) != timedelta(0) or anchor_seconds != 0
    if isinstance(trigger, CronTrigger):
        parts = MACROS.get(trigger.expression.strip().lower(), trigger.expression).split()
        return len(parts) == 6 and parts[0] != "0"
    if isinstance(trigger, OnceTrigger):
        return trigger.at.second != 0
    return isinstance(trigger, SolarTrigger)  # the sun keeps no minute boundaries


def instant(value: datetime | None, zone: str, *, seconds: bool = False) -> str:
    """``2026-12-01 09:00 Europe/Paris (08:00 UTC)``: in ``zone`` and in UTC (the UTC
    part gives its date only when it differs). ``-`` for None."""
    if value is None:
        return "-"
    clock = "%H:%M:%S" if seconds else "%H:%M"
    local = value.astimezone(get_zone(zone))
    text = local.strftime(f"%Y-%m-%d {clock}") + f" {zone}"
    if zone == "UTC":
        return text
    utc = value.astimezone(UTC)
    same_day = utc.date() == local.date()
    return text + " (" + utc.strftime(clock if same_day else f"%Y-%m-%d {clock}") + " UTC)"


def duration_in_words(seconds: float | None) -> str:
    """A runtime or a delay as a person reads it: ``17 ms``, ``2.4 seconds``, ``3 minutes 4
    seconds``, ``1 hour 2 minutes``, ``2 days 3 hours``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + duration_in_words(-seconds)
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 1) < 60:
        shown = f"{seconds:.1f}".removesuffix(".0")
        return f"{shown} second{'' if shown == '1' else 's'}"
    total = round(seconds)
    units = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
    parts: list[str] = []
    for name, size in units:
        count, total = divmod(total, size)
        if count and len(parts) < 2:
            parts.append(f"{count} {name}{'' if count == 1 else 's'}")
        elif parts:
            break  # two units say it: "1 hour 2 minutes", never "1 hour 0 minutes 4 seconds"
    return " ".join(parts)
