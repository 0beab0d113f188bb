"""Celery schedule objects -> goatbeat triggers, keeping celery's meaning (not cron's).

Below everything that reads celery's schedules: the importers, the drop-in scheduler and
``goatbeat diff`` use it, and it uses only the core. The public face is
``goatbeat.compat.to_trigger`` (with ``UnsupportedSchedule`` and ``CELERY_BUGS``).

This module owns the translation rules:

* ``crontab`` -> a cron trigger in the app's time zone (or the django-celery-beat row's), built
  from the *expanded* field sets celery computed, so celery's parsing quirks (wrapping ranges
  such as ``hour="22-2"``, ints, sets) are honoured exactly. Celery ANDs ``day_of_month`` and
  ``day_of_week``; cron ORs them when both are restricted. When both are restricted the result
  is a :class:`CeleryCrontabTrigger`, which ANDs them.
* ``schedule(timedelta)`` -> :class:`~goatbeat.core.triggers.IntervalTrigger` counting elapsed
  time from ``last_run_at`` (its anchor), as celery does; ``relative=True`` rounds to the
  interval's resolution as celery does.
* ``solar`` -> :class:`~goatbeat.core.triggers.SolarTrigger`.
* django-celery-beat's ``clocked`` -> :class:`~goatbeat.core.triggers.OnceTrigger`.

Anything else raises :class:`UnsupportedSchedule` saying why, and so does a *custom* schedule
class: a subclass of celery's that redefines a method deciding when it fires (``is_due``,
``remaining_estimate``, ``remaining_delta``...; :func:`timing_overrides`) is refused naming
the class and the methods, never converted as its parent. Only celery's (and
django-celery-beat's) schedule classes are recognised, by module and class name in the MRO,
so importing this module does not need celery.

Where celery's behaviour is a bug, goatbeat keeps its own semantics (see ``CELERY_BUGS``);
``goatbeat diff`` names the rule whenever the two disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from goatbeat.core.cron import CronTrigger, parse_cron
from goatbeat.core.errors import InvalidSchedule, short_repr
from goatbeat.core.timeutil import ensure_aware, get_zone, to_utc
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)

__all__ = [
    "ranges",
    "CELERY_BUGS",
    "CeleryCrontabTrigger",
    "UnsupportedSchedule",
    "crontab_expression",
    "describe_exception",
    "plain_repr",
    "timezone_name",
    "timing_overrides",
    "to_trigger",
]

CELERY_BUGS: dict[str, str] = {
    "dst_gap": (
        "celery runs a local time that does not exist late, by the size of the jump (and a "
        "whole missing hour of a minute-wildcard crontab once, when the clocks jump); goatbeat "
        "fires a fixed time when the clocks jump and skips wildcard times that do not exist, as "
        "Debian/ISC cron does"
    ),
    "dst_repeat": (
        "celery runs the repeated local times of a wildcard-hour crontab once; goatbeat fires "
        "wildcard times on both passes and fixed times once, as Debian/ISC cron does"
    ),
    "dow_7": (
        "django-celery-beat accepts day_of_week=7 (Sunday) in the admin but celery rejects it, "
        "so the row is silently never scheduled; goatbeat runs it on Sundays"
    ),
    "start_time_catch_up": (
        "django-celery-beat runs a crontab or solar row that has a start_time once AT its "
        "start_time (it dates a never-run row's last run 30 years back, so the row is overdue "
        "the moment it may start), off its own schedule; goatbeat starts with the schedule's "
        "first instant at or after start_time"
    ),
    "start_time_phase": (
        "django-celery-beat counts an interval from its last run, so its lateness and its "
        "catch-up runs (a beat started after an instant passed) move it off the start_time the "
        "row declares; goatbeat keeps start_time's phase: every interval from start_time"
    ),
    "dusk_sign": (
        "celery < 5.3 used +18 degrees as the dusk_astronomical horizon (sign error); goatbeat "
        "uses -18 degrees like later celery"
    ),
}
"""Known celery / django-celery-beat bugs where goatbeat keeps correct semantics."""


_ADDRESS = re.compile(r"\s+(?:object\s+)?at\s+0x[0-9a-fA-F]+")


def plain_repr(value: object) -> str:
    """A short ``repr`` without memory addresses (``<function f at 0x7f..>`` -> ``<function
    f>``): messages name what the user wrote, and an address changes with every run."""
    try:
        text = short_repr(value)
    except Exception:  # a __repr__ that raises still gets a name
        text = f"<{type(value).__name__}>"
    return _ADDRESS.sub("", text)


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` on one line, without memory addresses, for an error the user's code
    or data raised (celery's ParseException, a module failing on import...)."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return _ADDRESS.sub("", text)


class UnsupportedSchedule(InvalidSchedule):
    """A celery schedule goatbeat cannot convert; the message names the type and why.

    A ``GoatbeatError`` and a ``ValueError`` (through ``InvalidSchedule``)."""

    def __init__(self, value: Any, reason: str) -> None:
        super().__init__("schedule", value, f"{type(value).__name__} {plain_repr(value)}: {reason}")


def timezone_name(zone: object, field_name: str = "timezone") -> str:
    """The IANA name of ``zone`` (a name, ZoneInfo, ``datetime.timezone.utc``, pytz zone)."""
    if zone is None:
        return "UTC"
    if isinstance(zone, str):
        return get_zone(zone, field_name).key
    if isinstance(zone, ZoneInfo):
        if zone.key is None:
            raise InvalidSchedule(field_name, zone, f"{zone!r} has no IANA name")
        return zone.key
    if zone is UTC:
        return "UTC"
    key = getattr(zone, "key", None) or getattr(zone, "zone", None)  # zoneinfo / pytz
    if isinstance(key, str):
        return get_zone(key, field_name).key
    raise InvalidSchedule(
        field_name,
        zone,
        f"{zone!r} is not an IANA time zone; set app.conf.timezone (CELERY_TIMEZONE) to one",
    )


# -- crontab ------------------------------------------------------------------------------


_FIELDS = (
    # attribute, original-text attribute, low, high
    ("minute", "_orig_minute", 0, 59),
    ("hour", "_orig_hour", 0, 23),
    ("day_of_month", "_orig_day_of_month", 1, 31),
    ("month_of_year", "_orig_month_of_year", 1, 12),
    ("day_of_week", "_orig_day_of_week", 0, 6),
)


def ranges(values: Iterable[int]) -> str:
    """Cron's list of ``values``: runs of consecutive numbers as ``a-b``, ``1-5,9,12-14``."""
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


def _render_field(values: set[int], original: object, low: int, high: int) -> str:
    """One cron field for an expanded celery field.

    A full set is ``*``. A celery ``*/k`` stays ``*/k`` when cron expands it to the same set:
    the leading star matters to cron (day fields AND, and the Debian DST rule treats star
    minute/hour fields as wildcards), and keeping the user's spelling keeps their intent."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if isinstance(original, str):
        text = original.strip().replace(" ", "")
        if text.startswith("*/") and text[2:].isdigit():
            step = int(text[2:])
            # cron's day-of-week star runs 0-7; 7 is Sunday again, which celery's 0 covers.
            cron_high = 7 if (low, high) == (0, 6) else high
            expanded = {v % 7 if cron_high == 7 else v for v in range(low, cron_high + 1, step)}
            if expanded == values:
                return text
    return ranges(ordered)


def crontab_expression(crontab: Any) -> str:
    """The 5-field cron expression (``min hour dom month dow``) with celery's field sets."""
    fields: dict[str, str] = {}
    for attr, orig_attr, low, high in _FIELDS:
        values = getattr(crontab, attr, None)
        if not isinstance(values, (set, frozenset)) or not values:
            raise UnsupportedSchedule(crontab, f"its {attr} field is empty or not a set")
        if any(not isinstance(v, int) or not low <= v <= high for v in values):
            raise UnsupportedSchedule(
                crontab, f"its {attr} field {sorted(values)} leaves {low}-{high}"
            )
        fields[attr] = _render_field(set(values), getattr(crontab, orig_attr, None), low, high)
    return " ".join(
        fields[a] for a in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    )


def _crontab_zone(crontab: Any, timezone: object) -> str:
    # django-celery-beat's TzAwareCrontab carries the row's zone on the instance.
    own = vars(crontab).get("tz") if hasattr(crontab, "__dict__") else None
    if own is not None:
        return timezone_name(own)
    if timezone is not None:
        return timezone_name(timezone)
    app = getattr(crontab, "_app", None)
    if app is not None:
        conf_tz = app.conf.timezone
        if conf_tz:
            return timezone_name(conf_tz)
        if not app.conf.enable_utc:
            raise UnsupportedSchedule(
                crontab,
                "the app runs in the host's local time (enable_utc=False, no timezone); "
                "set app.conf.timezone to an IANA zone",
            )
    return "UTC"


def _crontab_trigger(crontab: Any, zone: str) -> Trigger:
    expression = crontab_expression(crontab)
    fields = parse_cron(expression)
    if fields.all_days_of_month or fields.all_weekdays or fields.days_and:
        # cron already ANDs here (one day field is a star), which is celery's meaning.
        return CronTrigger(expression, timezone=zone)
    return CeleryCrontabTrigger(expression, timezone=zone)


# -- interval -----------------------------------------------------------------------------


_RESOLUTIONS = (timedelta(days=1), timedelta(hours=1), timedelta(minutes=1))


def _interval_trigger(
    sched: Any, every: timedelta, relative: bool, zone: str, last_run_at: datetime | None
) -> Trigger:
    if every <= timedelta(0):
        raise UnsupportedSchedule(sched, f"the interval {every} is not positive")
    if every < timedelta(seconds=1):
        raise UnsupportedSchedule(
            sched,
            f"the interval {every.total_seconds():g} s is shorter than 1 s: goatbeat runs "
            "sub-second intervals only when declared with allow_subsecond=True",
        )
    anchor = None if last_run_at is None else to_utc(ensure_aware(last_run_at, "last_run_at"))
    if not relative:
        return IntervalTrigger(every, anchor=anchor)
    resolution = next((r for r in _RESOLUTIONS if every >= r), None)
    if resolution is None:
        return IntervalTrigger(every, anchor=anchor)  # under a minute: celery does not round
    if every % resolution:
        raise UnsupportedSchedule(
            sched,
            f"relative=True rounds each run down to the {_unit(resolution)}, so celery runs it "
            f"every {(every // resolution) * resolution}, not every {every}; declare that "
            "interval explicitly",
        )
    if resolution == timedelta(days=1):
        if every != resolution:
            raise UnsupportedSchedule(
                sched,
                "relative=True with a multi-day interval runs at local midnight every "
                f"{every.days} calendar days, which no goatbeat trigger expresses; use a crontab",
            )
        return CronTrigger("0 0 * * *", timezone=zone)
    # Celery rounds to the local minute/hour boundary; anchor the grid on one.
    local_zone = get_zone(zone)
    base = (anchor or datetime(1970, 1, 1, tzinfo=UTC)).astimezone(local_zone)
    if resolution == timedelta(hours=1):
        base = base.replace(minute=0, second=0, microsecond=0)
    else:
        base = base.replace(second=0, microsecond=0)
    return IntervalTrigger(every, anchor=to_utc(base))


def _unit(resolution: timedelta) -> str:
    return {timedelta(days=1): "day", timedelta(hours=1): "hour"}.get(resolution, "minute")


# -- entry point --------------------------------------------------------------------------


def to_trigger(
    celery_schedule: object,
    *,
    timezone: str | tzinfo | None = None,
    last_run_at: datetime | None = None,
    relative: bool | None = None,
) -> Trigger:
    """The goatbeat trigger with the meaning celery gives ``celery_schedule``.

    ``celery_schedule``: a celery ``crontab`` (django-celery-beat's ``TzAwareCrontab``
    included), ``schedule``, ``solar``, django-celery-beat's ``clocked``, a ``timedelta`` or a
    number of seconds. ``timezone``: the app's zone (``app.conf.timezone``) for crontabs that
    carry none of their own; when omitted, the zone of the crontab's app, else UTC.
    ``last_run_at``: the anchor of interval schedules (celery counts from the last run);
    without it the grid is aligned on the Unix epoch. ``relative`` overrides the schedule's.

    Raises :class:`UnsupportedSchedule` for anything else, saying why."""
    sched: Any = celery_schedule
    if isinstance(sched, bool):
        raise UnsupportedSchedule(sched, "a boolean is not a schedule")
    if isinstance(sched, (int, float)):
        if sched <= 0:
            raise UnsupportedSchedule(sched, "an interval must be a positive number of seconds")
        return _interval_trigger(
            sched, timedelta(seconds=sched), bool(relative), _zone_or_utc(timezone), last_run_at
        )
    if isinstance(sched, timedelta):
        return _interval_trigger(sched, sched, bool(relative), _zone_or_utc(timezone), last_run_at)
    overrides = timing_overrides(sched)
    if overrides:
        raise UnsupportedSchedule(sched, _overrides_reason(type(sched), overrides))
    names = {cls.__name__ for cls in type(sched).__mro__ if _is_celerys(cls)}
    module = type(sched).__module__
    if "crontab" in names and hasattr(sched, "day_of_week"):
        return _crontab_trigger(sched, _crontab_zone(sched, timezone))
    if "solar" in names and hasattr(sched, "event"):
        try:
            return SolarTrigger(
                event=str(sched.event), latitude=float(sched.lat), longitude=float(sched.lon)
            )
        except InvalidSchedule:
            raise
        except ValueError as exc:
            raise UnsupportedSchedule(sched, str(exc)) from None
    if "clocked" in names and hasattr(sched, "clocked_time"):
        at = sched.clocked_time
        if not isinstance(at, datetime):
            raise UnsupportedSchedule(sched, f"clocked_time {at!r} is not a datetime")
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)  # django-celery-beat's maybe_make_aware: naive is UTC
        return OnceTrigger(at)
    if "schedule" in names and hasattr(sched, "run_every"):
        every = sched.run_every
        if isinstance(every, (int, float)) and not isinstance(every, bool):
            every = timedelta(seconds=every)
        if not isinstance(every, timedelta):
            raise UnsupportedSchedule(sched, f"run_every {every!r} is not a duration")
        rel = bool(getattr(sched, "relative", False)) if relative is None else relative
        zone = _zone_or_utc(timezone)
        if timezone is None and getattr(sched, "_app", None) is not None:
            zone = timezone_name(sched._app.conf.timezone or "UTC")
        return _interval_trigger(sched, every, rel, zone, last_run_at)
    if module.startswith("celery") or hasattr(sched, "is_due"):
        raise UnsupportedSchedule(
            sched,
            "a custom schedule only tells celery whether it is due now (is_due / "
            "remaining_estimate), so goatbeat cannot know its future fire times; "
            "express it as a crontab, an interval or a solar event",
        )
    raise UnsupportedSchedule(
        sched, "not a celery schedule (crontab, schedule, solar), timedelta or number of seconds"
    )


# -- custom schedule classes --------------------------------------------------------------

_CELERY_MODULES = ("celery.", "django_celery_beat.")
"""Modules whose schedule classes goatbeat knows: celery's own, and django-celery-beat's
``TzAwareCrontab`` and ``clocked`` (which it converts with their meaning)."""

_HARMLESS = frozenset(
    {
        # How an object is built, shown, compared or pickled: never when it fires (the
        # fields the conversion reads are read from the instance, after __init__).
        "__init__",
        "__repr__",
        "__str__",
        "__eq__",
        "__ne__",
        "__hash__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__setstate__",
        "__copy__",
        "__deepcopy__",
        "human_seconds",
    }
)


def _is_celerys(cls: type) -> bool:
    return cls is object or cls.__module__.startswith(_CELERY_MODULES)


def timing_overrides(value: object) -> list[tuple[str, str]]:
    """The methods of celery's schedule classes that ``value``'s own class (or a mixin of
    it) redefines, as ``(class name, attribute)``: an empty list for celery's classes and
    anything not derived from them.

    Celery beat asks a schedule only ``is_due(last_run_at)``; celery's classes answer it
    from their fields, which goatbeat converts. A subclass that redefines ``is_due``,
    ``remaining_estimate``, ``remaining_delta``, ``now``, the zone methods (anything celery's
    classes define, except how the object is built, shown, compared and pickled) answers
    otherwise ("every 10 minutes, weekdays only", "a crontab but not on 25 December"), and
    converting its fields would run it as its parent."""
    mro = type(value).__mro__
    celery_attrs: set[str] = set()
    for cls in mro:
        if _is_celerys(cls) and cls is not object:
            celery_attrs.update(vars(cls))
    if not celery_attrs:
        return []
    found: list[tuple[str, str]] = []
    for name in sorted(celery_attrs - _HARMLESS):
        if name.startswith("__") and name.endswith("__") and name != "__call__":
            continue
        owner = next((cls for cls in mro if name in vars(cls)), None)
        if owner is not None and not _is_celerys(owner):
            found.append((owner.__qualname__, name))
    return found


def _overrides_reason(cls: type, overrides: list[tuple[str, str]]) -> str:
    base = next((c for c in cls.__mro__ if _is_celerys(c) and c is not object), object)
    where = ", ".join(f"{owner}.{attr}" for owner, attr in overrides)
    return (
        f"the custom schedule class {cls.__qualname__} (a subclass of celery's "
        f"{base.__name__}) redefines {where}, which decides when it fires; goatbeat would run "
        f"it as a plain {base.__name__} and cannot know its own fire times: express it as a "
        "crontab, an interval or a solar event (or several), or keep it on celery beat"
    )


def _zone_or_utc(timezone: object) -> str:
    return "UTC" if timezone is None else timezone_name(timezone)
