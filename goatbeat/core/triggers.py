"""Triggers: when a schedule fires.

A trigger is a pure value: ``next_after(instant)`` returns the first fire instant strictly after
``instant`` (an aware datetime), as an aware UTC datetime, or ``None`` when it never fires again.
It reads no clock and keeps no hidden state, so planning can call it freely.

Triggers round-trip through a JSON-able *spec* (``to_spec()`` / :func:`trigger_from_spec`),
which is what the stores persist.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, ClassVar, Protocol, runtime_checkable

from goatbeat.core.cron import CronTrigger, parse_cron
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import InvalidSchedule, InvalidValue, short_repr
from goatbeat.core.solar import SolarTrigger
from goatbeat.core.timeutil import ensure_aware, parse_instant, to_utc

__all__ = [
    "CeleryCrontabTrigger",
    "CronTrigger",
    "IntervalTrigger",
    "OnceTrigger",
    "SolarTrigger",
    "Trigger",
    "EPOCH",
    "trigger_from_spec",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@runtime_checkable
class Trigger(Protocol):
    """When a schedule fires. Implementations are immutable and hashable."""

    kind: ClassVar[str]
    """The spec discriminator: ``"cron"``, ``"interval"``, ``"once"``, ``"solar"``."""

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after ``instant`` (aware), in UTC; ``None`` if none.

        Raises ``ValueError`` (an :class:`~goatbeat.core.errors.InvalidValue`) for a naive
        ``instant``."""
        ...

    def to_spec(self) -> dict[str, Any]:
        """A JSON-able dict with ``"kind"`` and every parameter; :func:`trigger_from_spec`
        rebuilds an equal trigger from it."""
        ...

    def describe(self) -> str:
        """A short human description (``"cron 0 9 * * * (Europe/Paris)"``, ``"every 5m"``)."""
        ...


@dataclass(frozen=True, slots=True)
class IntervalTrigger:
    """Fires every ``every`` of elapsed time: ``anchor + k * every`` for whole ``k``.

    Elapsed time ignores DST and time zones entirely. Without an ``anchor`` the grid is
    aligned on the Unix epoch, so every replica and every restart computes the same instants
    (``every="5m"`` fires at :00, :05, ... UTC).

    ``every`` must be at least 1 s: a shorter interval is almost always a unit mistake
    (``every=0.5`` meant as minutes), and each occurrence costs a claim, a submission and an
    execution row. ``allow_subsecond=True`` says it is meant (down to 1 ms); it is kept in the
    spec (``"allow_subsecond": true``) so the stored schedule reads back the same."""

    kind: ClassVar[str] = "interval"
    every: timedelta
    anchor: datetime | None = field(default=None, kw_only=True)
    allow_subsecond: bool = field(default=False, kw_only=True)

    def __init__(
        self,
        every: timedelta | str | float,
        *,
        anchor: datetime | None = None,
        allow_subsecond: bool = False,
    ) -> None:
        if isinstance(every, str):
            every_td = parse_duration(every, field="every")
        elif isinstance(every, timedelta):
            every_td = every
        elif isinstance(every, (int, float)) and not isinstance(every, bool):
            if isinstance(every, float) and not math.isfinite(every):
                raise InvalidSchedule(
                    "every", every, f"{short_repr(every)} is not a finite number of seconds"
                )
            try:
                every_td = timedelta(seconds=every)
            except OverflowError:
                raise InvalidSchedule(
                    "every", every, f"{short_repr(every)} seconds is too long"
                ) from None
        else:
            raise InvalidSchedule("every", every, f"{short_repr(every)} is not a duration")
        if every_td <= timedelta(0):
            raise InvalidSchedule(
                "every", every, f"{short_repr(every)} must be a positive duration"
            )
        if every_td < timedelta(milliseconds=1):
            raise InvalidSchedule("every", every, f"{short_repr(every)} is shorter than 1 ms")
        if not isinstance(allow_subsecond, bool):
            raise InvalidSchedule(
                "allow_subsecond",
                allow_subsecond,
                f"{short_repr(allow_subsecond)} is not True or False",
            )
        subsecond = every_td < timedelta(seconds=1)
        if subsecond and not allow_subsecond:
            seconds = f"{every_td.total_seconds():g} s"
            given = seconds if isinstance(every, (int, float)) else f"{every!r} ({seconds})"
            raise InvalidSchedule(
                "every",
                every,
                f"{given} is shorter than 1 s; pass allow_subsecond=True if a sub-second "
                "interval is really meant",
            )
        object.__setattr__(self, "every", every_td)
        # Only meaningful below 1 s: "5s" with or without the flag is the same trigger.
        object.__setattr__(self, "allow_subsecond", subsecond)
        object.__setattr__(
            self,
            "anchor",
            None if anchor is None else to_utc(ensure_aware(anchor, "anchor"), "anchor"),
        )

    def next_after(self, instant: datetime) -> datetime | None:
        instant = to_utc(ensure_aware(instant, "instant"))
        anchor = self.anchor if self.anchor is not None else EPOCH
        if instant < anchor:
            return anchor
        # Integer microsecond arithmetic: exact, no float drift over decades.
        step = _micros(self.every)
        elapsed = _micros(instant - anchor)
        k = elapsed // step + 1
        try:
            return anchor + timedelta(microseconds=k * step)
        except OverflowError:
            # Past year 9999: no instant a datetime can hold, so it never fires again.
            return None

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "kind": self.kind,
            "every": self.every.total_seconds(),
            "anchor": None if self.anchor is None else self.anchor.isoformat(),
        }
        if self.allow_subsecond:
            spec["allow_subsecond"] = True
        return spec

    def describe(self) -> str:
        from goatbeat.core.durations import format_duration

        text = f"every {format_duration(self.every)}"
        if self.anchor is not None:
            text += f" from {self.anchor.isoformat()}"
        return text


@dataclass(frozen=True, slots=True)
class OnceTrigger:
    """Fires once, at ``at``."""

    kind: ClassVar[str] = "once"
    at: datetime

    def __init__(self, at: datetime) -> None:
        object.__setattr__(self, "at", to_utc(ensure_aware(at, "at"), "at"))

    def next_after(self, instant: datetime) -> datetime | None:
        instant = to_utc(ensure_aware(instant, "instant"))
        return self.at if self.at > instant else None

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at.isoformat()}

    def describe(self) -> str:
        return f"once at {self.at.isoformat()}"


@dataclass(frozen=True, slots=True)
class CeleryCrontabTrigger:
    """A cron expression whose day-of-month and day-of-week fields are ANDed, as celery's
    ``crontab`` does (cron ORs them when both are restricted).

    Otherwise exactly :class:`~goatbeat.core.cron.CronTrigger`, DST rules included: it is the
    intersection of the expression with its day-of-week field starred and the expression with
    its day-of-month field starred, found by leapfrogging the two."""

    kind: ClassVar[str] = "celery_crontab"
    expression: str
    timezone: str = "UTC"
    _by_dom: CronTrigger = field(init=False, repr=False, compare=False)
    _by_dow: CronTrigger = field(init=False, repr=False, compare=False)

    def __init__(self, expression: str, *, timezone: str = "UTC") -> None:
        parts = expression.split()
        if len(parts) != 5:
            raise InvalidSchedule(
                "expression", expression, f"{expression!r} needs 5 fields (min hour dom month dow)"
            )
        minute, hour, dom, month, dow = parts
        by_dom = CronTrigger(f"{minute} {hour} {dom} {month} *", timezone=timezone)
        by_dow = CronTrigger(f"{minute} {hour} * {month} {dow}", timezone=timezone)
        # Validates the whole expression (and that dom AND dow can ever meet).
        parse_cron(f"{minute} {hour} {dom} {month} {dow}")
        if not _days_can_meet(dom, month, dow):
            raise InvalidSchedule(
                "expression",
                expression,
                f"day-of-month {dom} and day-of-week {dow} never fall on the same day in "
                f"month(s) {month}",
            )
        setattr_ = object.__setattr__
        setattr_(self, "expression", " ".join(parts))
        setattr_(self, "timezone", by_dom.timezone)
        setattr_(self, "_by_dom", by_dom)
        setattr_(self, "_by_dow", by_dow)

    def next_after(self, instant: datetime) -> datetime | None:
        after = to_utc(ensure_aware(instant, "instant"))
        # Both sequences share the time-of-day tables, so they meet on days matching both
        # day fields; each step skips at least to the later candidate's day.
        for _ in range(100_000):
            a = self._by_dom.next_after(after)
            if a is None:
                return None
            b = self._by_dow.next_after(a - timedelta(microseconds=1))
            if b is None:
                return None
            if a == b:
                return a
            after = b - timedelta(microseconds=1)
        return None

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "expression": self.expression, "timezone": self.timezone}

    def describe(self) -> str:
        return f"celery crontab {self.expression} ({self.timezone}), days ANDed"


def _days_can_meet(dom: str, month: str, dow: str) -> bool:
    # Month shapes repeat within a 28-year cycle of weekdays; two leap/non-leap cycles cover all.
    fields = parse_cron(f"0 0 {dom} {month} {dow}")
    days = set(fields.days)
    weekdays = set(fields.weekdays)
    for year in range(2000, 2028):
        for m in fields.months:
            length = calendar.monthrange(year, m)[1]
            for d in days:
                if d <= length and (date(year, m, d).isoweekday() % 7) in weekdays:
                    return True
    return False


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def trigger_from_spec(spec: Mapping[str, Any]) -> Trigger:
    """Rebuild a trigger from ``to_spec()`` output. Raises InvalidSchedule naming the field."""
    if not isinstance(spec, Mapping):
        raise InvalidSchedule("trigger", spec, f"{short_repr(spec)} is not a mapping")
    kind = spec.get("kind")
    try:
        if kind == "cron":
            return CronTrigger(str(spec["expression"]), timezone=str(spec.get("timezone", "UTC")))
        if kind == "celery_crontab":
            return CeleryCrontabTrigger(
                str(spec["expression"]), timezone=str(spec.get("timezone", "UTC"))
            )
        if kind == "interval":
            anchor = spec.get("anchor")
            # The constructor validates seconds (what to_spec writes) and "5m" alike.
            return IntervalTrigger(
                spec["every"],
                anchor=None if anchor is None else parse_instant(anchor, "anchor"),
                allow_subsecond=spec.get("allow_subsecond", False),
            )
        if kind == "once":
            return OnceTrigger(parse_instant(spec["at"], "at"))
        if kind == "solar":
            return SolarTrigger(
                event=str(spec["event"]),
                latitude=float(spec["latitude"]),
                longitude=float(spec["longitude"]),
            )
    except KeyError as exc:
        raise InvalidSchedule(
            "trigger", dict(spec), f"{kind} trigger needs {short_repr(exc.args[0])}"
        ) from None
    except InvalidValue:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        # float("abc") and friends: report the spec, not a bare builtin error.
        raise InvalidSchedule("trigger", dict(spec), f"invalid {kind} trigger: {exc}") from None
    raise InvalidSchedule(
        "trigger.kind",
        kind,
        f"{short_repr(kind)} is not one of cron, celery_crontab, interval, once, solar",
    )
