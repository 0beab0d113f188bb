"""Cron expressions: parsing, and the next fire instant after a given instant.

This module owns the cron dialect goatbeat accepts and its meaning:

* 5 fields (``minute hour day-of-month month day-of-week``) or 6 with seconds first;
  lists, ranges, steps (``*/15``, ``5-59/15``, ``5/15`` meaning ``5-59/15``), month and
  weekday names in any case, Sunday as 0 or 7, ``?`` as ``*`` in the day fields;
  ``L``, ``LW`` and ``15W`` in day-of-month; ``5L`` and ``5#2`` in day-of-week; the macros
  ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.
* Day-of-month and day-of-week combine as in Vixie/ISC cron: when both are restricted a day
  matching either fires; when either field *starts with* ``*`` (or ``?``) both must match, so
  ``*/2`` counts as a star.
* Ranges do not wrap: ``fri-mon`` is rejected (Vixie cron rejects it too). ``sun`` closing a
  range means 7, so ``fri-sun`` works.
* Time zones follow Debian/ISC cron. A *fixed-time* expression (neither the minute nor the
  hour field starts with ``*``; the seconds field does not count) matches local wall time:
  a wall time skipped by a spring-forward gap fires at the instant the clocks jump, and a wall
  time that happens twice at fall-back fires once, on its first pass. A *wildcard*
  expression fires at every real instant whose local time matches: nothing in the gap, both
  passes of a repeated hour.

The search is calendar arithmetic on integer seconds over wall-clock time: per-field
"next allowed value" tables and the sorted matching days of each month, one jump per field
(month, day, time of day), never stepping minute by minute. Zone offsets come from per-year
tables of offset changes, found once per zone and year by probing :mod:`zoneinfo`; a search
for a far-away match skips the offset changes in between. Parsed expressions, month tables
and zone tables are cached and shared: they make repeated searches cheap, never different.
Nothing fires more than :data:`HORIZON` (50 years) after the given instant, nor after
9998-01-01.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from goatbeat.core.errors import InvalidCron, InvalidTimezone
from goatbeat.core.timeutil import ensure_aware, get_zone

__all__ = ["CronFields", "CronTrigger", "parse_cron", "MACROS", "HORIZON"]

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

HORIZON = timedelta(days=18_262)
"""How far ahead :meth:`CronTrigger.next_after` looks before answering ``None`` (50 years)."""

_HORIZON_S = 18_262 * 86_400
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_DAY = 86_400
# Instants are kept well inside datetime's years 1..9999 so that no conversion can overflow.
_MIN_TS = (date(3, 1, 1).toordinal() - _EPOCH_ORD) * _DAY
_MAX_TS = (date(9998, 1, 1).toordinal() - _EPOCH_ORD) * _DAY
_FAR_PAST = -(10**12)

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_DOW_NAMES = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_MONTH_TITLES = ("", *(calendar.month_name[m] for m in range(1, 13)))
# February counts 29 days: a day that exists in some year's February is possible.
_MAX_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_FIXED_OFFSET_ZONES = frozenset(
    {"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Zulu", "Universal", "Greenwich"}
)
_NEAREST_WEEKDAY = re.compile(r"([0-9]+)w")
_NTH_WEEKDAY = re.compile(r"([a-z0-9]+)#([0-9]+)")


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTH_NAMES)
# 0-7: Sunday is 0 or 7, and ``*`` and ``N/step`` run up to 7 as in Vixie cron.
_DOW = _FieldSpec("day-of-week", 0, 7, _DOW_NAMES)


@dataclass(frozen=True, slots=True, kw_only=True)
class CronFields:
    """A parsed cron expression: sorted tables per field, plus the day-field extensions.

    Weekdays are numbered as cron does, Sunday 0 to Saturday 6 (a 7 in the text is stored
    as 0)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    """Plain days of the month, 1-31."""
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    """Plain weekdays, 0-6."""
    last_day: bool = False
    """``L`` in day-of-month."""
    last_weekday: bool = False
    """``LW`` in day-of-month: the last Monday-to-Friday day of the month."""
    nearest_weekdays: tuple[int, ...] = ()
    """``15W``: the weekday nearest the 15th, without leaving the month."""
    last_weekdays_of_month: tuple[int, ...] = ()
    """``5L`` in day-of-week: the last Friday of the month."""
    nth_weekdays: tuple[tuple[int, int], ...] = ()
    """``5#2`` in day-of-week: ``(5, 2)``, the second Friday of the month."""
    dom_star: bool
    """The day-of-month field starts with ``*`` or ``?``."""
    dow_star: bool
    """The day-of-week field starts with ``*`` or ``?``."""
    fixed_time: bool
    """Neither the minute nor the hour field starts with ``*`` (Debian cron's DST rule)."""
    has_seconds: bool

    @property
    def days_and(self) -> bool:
        """Both day fields must match (Vixie: when either starts with a star)."""
        return self.dom_star or self.dow_star

    @property
    def all_days_of_month(self) -> bool:
        return (
            len(self.days) == 31
            and not self.last_day
            and not self.last_weekday
            and not self.nearest_weekdays
        )

    @property
    def all_weekdays(self) -> bool:
        return len(self.weekdays) == 7 and not self.last_weekdays_of_month and not self.nth_weekdays

    def days_in(self, year: int, month: int) -> tuple[int, ...]:
        """The matching days of ``month`` in ``year``, sorted, for the day fields alone."""
        first_weekday, length = calendar.monthrange(year, month)
        return self._days_for((first_weekday + 1) % 7, length)

    def _days_for(self, first_dow: int, length: int) -> tuple[int, ...]:
        # A month's matching days depend only on its length and the weekday of its 1st.
        dom: set[int] | None = None
        if not self.all_days_of_month:
            dom = {d for d in self.days if d <= length}
            last_dow = (first_dow + length - 1) % 7
            if self.last_day:
                dom.add(length)
            if self.last_weekday:
                dom.add(length - (2 if last_dow == 0 else 1 if last_dow == 6 else 0))
            for n in self.nearest_weekdays:
                if n <= length:
                    dom.add(_nearest_weekday(n, (first_dow + n - 1) % 7, length))
        dow: set[int] | None = None
        if not self.all_weekdays:
            wanted = self.weekdays
            dow = {d for d in range(1, length + 1) if (first_dow + d - 1) % 7 in wanted}
            last_dow = (first_dow + length - 1) % 7
            for w in self.last_weekdays_of_month:
                dow.add(length - (last_dow - w) % 7)
            for w, nth in self.nth_weekdays:
                d = 1 + (w - first_dow) % 7 + 7 * (nth - 1)
                if d <= length:
                    dow.add(d)
        # None stands for "every day of the month".
        if self.days_and:
            if dom is None or dow is None:
                result = dom if dow is None else dow
            else:
                result = dom & dow
        elif dom is not None and dow is not None:
            result = dom | dow
        else:
            result = None
        if result is None:
            return tuple(range(1, length + 1))
        return tuple(sorted(result))


def _nearest_weekday(n: int, dow: int, length: int) -> int:
    if dow == 6:  # Saturday: the Friday before, unless that leaves the month
        return n - 1 if n > 1 else n + 2
    if dow == 0:  # Sunday: the Monday after, unless that leaves the month
        return n + 1 if n < length else n - 2
    return n


def parse_cron(expression: str) -> CronFields:
    """Parse a cron expression (see the module docstring) into :class:`CronFields`.

    Raises :class:`InvalidCron` for anything that is not a valid expression, or one that
    can never match (``0 0 30 2 *``); never any other exception."""
    return _parse(expression)[1]


def _parse(expression: object) -> tuple[str, CronFields]:
    if not isinstance(expression, str):
        raise InvalidCron("cron", expression, f"{expression!r} is not a string")
    return _parse_text(expression)


@lru_cache(maxsize=1024)
def _parse_text(expression: str) -> tuple[str, CronFields]:
    # Stores rebuild triggers from their specs often; the same text parses once.
    text = expression.strip()
    if not text:
        raise InvalidCron("cron", expression, "the expression is empty")
    body = text
    if text.startswith("@"):
        macro = MACROS.get(text.lower())
        if macro is None:
            raise InvalidCron(
                "cron",
                expression,
                f"{text!r} is not a supported macro (use one of {', '.join(MACROS)})",
            )
        body = macro
    parts = body.split()
    if len(parts) not in (5, 6):
        raise InvalidCron(
            "cron",
            expression,
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
            f"(seconds first), got {len(parts)} in '{text}'",
        )
    has_seconds = len(parts) == 6
    if not has_seconds:
        parts.insert(0, "0")
    sec_t, min_t, hour_t, dom_t, month_t, dow_t = parts
    p = _Parser(text)
    seconds, _ = p.field(sec_t, _SECOND)
    minutes, _ = p.field(min_t, _MINUTE)
    hours, _ = p.field(hour_t, _HOUR)
    days, dom_x = p.field(dom_t, _DOM)
    months, _ = p.field(month_t, _MONTH)
    weekdays, dow_x = p.field(dow_t, _DOW)
    fields = CronFields(
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=tuple(sorted({w % 7 for w in weekdays})),
        last_day="l" in dom_x,
        last_weekday="lw" in dom_x,
        nearest_weekdays=tuple(sorted(int(x[:-1]) for x in dom_x if x.endswith("w") and x != "lw")),
        last_weekdays_of_month=tuple(sorted({int(x[:-1]) % 7 for x in dow_x if x.endswith("l")})),
        nth_weekdays=tuple(
            sorted({(int(a) % 7, int(b)) for a, b in (x.split("#") for x in dow_x if "#" in x)})
        ),
        dom_star=dom_t[0] in "*?",
        dow_star=dow_t[0] in "*?",
        fixed_time=min_t[0] != "*" and hour_t[0] != "*",
        has_seconds=has_seconds,
    )
    _check_possible(fields, text, dom_t, dow_t)
    return text, fields


class _Parser:
    """Parses one field at a time; every error names the field and quotes the expression."""

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, spec: _FieldSpec, reason: str) -> InvalidCron:
        return InvalidCron("cron", self.text, f"{spec.name}: {reason} in '{self.text}'")

    def field(self, token: str, spec: _FieldSpec) -> tuple[tuple[int, ...], list[str]]:
        """The plain values of a field, sorted, and its extensions (``l``, ``15w``, ``5#2``)
        normalised to lower case with numeric weekdays."""
        values: set[int] = set()
        extensions: list[str] = []
        for item in token.split(","):
            self.item(item, spec, values, extensions)
        return tuple(sorted(values)), extensions

    def item(self, item: str, spec: _FieldSpec, values: set[int], ext: list[str]) -> None:
        if not item:
            raise self.fail(spec, "empty list item")
        low_item = item.lower()
        if spec is _DOM and low_item in ("l", "lw"):
            ext.append(low_item)
            return
        if spec is _DOM and (m := _NEAREST_WEEKDAY.fullmatch(low_item)):
            day = self.number(m.group(1), spec, item)
            if not 1 <= day <= 31:
                raise self.fail(spec, f"{item!r}: {day} is out of range 1-31")
            ext.append(f"{day}w")
            return
        if spec is _DOW and low_item.endswith("l"):
            if low_item == "l":
                raise self.fail(
                    spec, "'L' needs a weekday before it, e.g. '5L' for the last Friday"
                )
            ext.append(f"{self.value(item[:-1], spec)}l")
            return
        if spec is _DOW and (m := _NTH_WEEKDAY.fullmatch(low_item)):
            weekday = self.value(item[: item.index("#")], spec)
            nth = self.number(m.group(2), spec, item, what="occurrence")
            if not 1 <= nth <= 5:
                raise self.fail(spec, f"{item!r}: the occurrence {nth} is out of range 1-5")
            ext.append(f"{weekday}#{nth}")
            return
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            step = self.number(step_text, spec, item, what="step")
            if step == 0:
                raise self.fail(spec, f"{item!r}: the step must be at least 1")
        if base in ("*", "?"):
            if base == "?" and spec not in (_DOM, _DOW):
                raise self.fail(spec, "'?' is only allowed in day-of-month and day-of-week")
            first, last = spec.low, spec.high
        elif "-" in base:
            start_text, _, end_text = base.partition("-")
            first = self.value(start_text, spec)
            last = self.value(end_text, spec)
            if spec is _DOW and last == 0 and first > 0 and end_text.lower() == "sun":
                last = 7
            if last < first:
                raise self.fail(
                    spec,
                    f"the range {base!r} runs backwards; ranges do not wrap, so split it in "
                    f"two, e.g. '{start_text}-{spec.high},{spec.low}-{end_text}'",
                )
        else:
            first = self.value(base, spec)
            last = spec.high if slash else first
        values.update(range(first, last + 1, step))

    def number(self, text: str, spec: _FieldSpec, item: str, *, what: str = "value") -> int:
        if not text:
            raise self.fail(spec, f"{item!r} is missing a {what}")
        if not (text.isascii() and text.isdigit()):
            raise self.fail(spec, f"{item!r}: the {what} {text!r} is not a number")
        if len(text) > 6:
            raise self.fail(spec, f"{item!r}: the {what} {text} is too large")
        return int(text)

    def value(self, text: str, spec: _FieldSpec) -> int:
        if not text:
            raise self.fail(spec, "a value is missing")
        if text.isascii() and text.isdigit():
            number = int(text) if len(text) <= 6 else 10**6
            if not spec.low <= number <= spec.high:
                raise self.fail(spec, f"{text} is out of range {spec.low}-{spec.high}")
            return number
        named = spec.names.get(text.lower()) if spec.names else None
        if named is None:
            raise self.fail(spec, f"{text!r} is not a number or name")
        return named


def _check_possible(fields: CronFields, text: str, dom_t: str, dow_t: str) -> None:
    """Reject day/month combinations that no calendar ever has (``0 0 30 2 *``)."""
    if fields.all_days_of_month and (fields.all_weekdays or not fields.days_and):
        return
    if fields.days_and and not fields.all_days_of_month:
        longest = max(_MAX_MONTH_DAYS[m] for m in fields.months)
        if (
            not fields.last_day
            and not fields.last_weekday
            and min((*fields.days, *fields.nearest_weekdays), default=99) > longest
        ):
            raise InvalidCron(
                "cron",
                text,
                f"day-of-month: {dom_t} never occurs in {_month_list(fields.months)} in '{text}'",
            )
    if not _possible_days(fields):
        raise InvalidCron(
            "cron",
            text,
            f"day-of-month: {dom_t} with day-of-week {dow_t} never matches a day "
            f"in {_month_list(fields.months)} in '{text}'",
        )


@lru_cache(maxsize=256)
def _possible_days(fields: CronFields) -> bool:
    # Months repeat by length and weekday of the 1st, so 7 shapes per month length cover
    # every calendar; all of them occur within any 28-year window but around 2100.
    lengths = {29 if m == 2 else _MAX_MONTH_DAYS[m] for m in fields.months}
    if 2 in fields.months:
        lengths.add(28)
    return any(fields._days_for(first, n) for n in lengths for first in range(7))


def _month_list(months: Iterable[int]) -> str:
    return ", ".join(_MONTH_TITLES[m] for m in months)


def _next_table(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """``table[i]``: the smallest value >= i, or -1; one slot past ``size`` for carries."""
    table = [-1] * (size + 2)
    following = -1
    for i in range(size + 1, -1, -1):
        if i in values:
            following = i
        table[i] = following
    return tuple(table)


class _WallMatcher:
    """The wall-clock search for one :class:`CronFields`, shared by every trigger with the
    same expression, with the matching days of each month visited so far."""

    __slots__ = ("fields", "tables", "first_time", "month_days")

    def __init__(self, fields: CronFields) -> None:
        self.fields = fields
        # next_*[i]: the first allowed value >= i, or -1, with a slot past the end.
        self.tables = (
            _next_table(fields.months, 12),
            _next_table(fields.hours, 23),
            _next_table(fields.minutes, 59),
            _next_table(fields.seconds, 59),
        )
        self.first_time = fields.hours[0] * 3600 + fields.minutes[0] * 60 + fields.seconds[0]
        self.month_days: dict[int, tuple[int, tuple[int, ...]]] = {}

    def next_wall(self, wall: int, wall_limit: int) -> int | None:
        """The first matching wall time >= ``wall`` (seconds, naive local time counted as if
        it were UTC); None when there is none before the end of the year of ``wall_limit``.
        """
        next_month, next_hour, next_minute, next_second = self.tables
        days, rest = divmod(wall, _DAY)
        hour, rest = divmod(rest, 3600)
        minute, second = divmod(rest, 60)
        day_date = date.fromordinal(days + _EPOCH_ORD)
        year, month, day = day_date.year, day_date.month, day_date.day
        year_limit = _year_of(wall_limit)
        month_days = self.month_days
        while True:
            found = next_month[month]
            if found != month:
                if found < 0:
                    year += 1
                    found = next_month[1]
                    if year > year_limit:
                        return None
                month, day, hour, minute, second = found, 1, 0, 0, 0
            entry = month_days.get(year * 16 + month)
            if entry is None:
                entry = self.cache_month(year, month)
            month_start, matching = entry
            j = bisect_left(matching, day)
            if j < len(matching):
                found = matching[j]
                if found != day:
                    return (month_start + found - 1) * _DAY + self.first_time
                # Today matches: the first matching time of day at or after the current one.
                time_of_day = -1
                if next_hour[hour] == hour:
                    if next_minute[minute] == minute:
                        if next_second[second] >= 0:
                            time_of_day = hour * 3600 + minute * 60 + next_second[second]
                        found = next_minute[minute + 1]
                    else:
                        found = next_minute[minute]
                    if time_of_day < 0 and found >= 0:
                        time_of_day = hour * 3600 + found * 60 + next_second[0]
                    if time_of_day < 0:
                        found = next_hour[hour + 1]
                else:
                    found = next_hour[hour]
                if time_of_day < 0 and found >= 0:
                    time_of_day = found * 3600 + next_minute[0] * 60 + next_second[0]
                if time_of_day >= 0:
                    return (month_start + day - 1) * _DAY + time_of_day
                if j + 1 < len(matching):
                    return (month_start + matching[j + 1] - 1) * _DAY + self.first_time
            month += 1
            if month == 13:
                year += 1
                month = 1
                if year > year_limit:
                    return None
            day, hour, minute, second = 1, 0, 0, 0

    def cache_month(self, year: int, month: int) -> tuple[int, tuple[int, ...]]:
        cache = self.month_days
        if len(cache) > 4096:
            cache.clear()
        entry = cache[year * 16 + month] = (
            date(year, month, 1).toordinal() - _EPOCH_ORD,
            self.fields.days_in(year, month),
        )
        return entry


@lru_cache(maxsize=1024)
def _wall_matcher(fields: CronFields) -> _WallMatcher:
    return _WallMatcher(fields)


_YearTable = tuple[int, int, tuple[int, ...], tuple[int, ...], int]
"""A zone's year in UTC: its first second, its end, the instants the UTC offset changes,
the offset each change starts, and the offset in force when the year begins."""


@dataclass(frozen=True, slots=True)
class CronTrigger:
    """Fires when the local time in ``timezone`` matches a cron expression.

    Parsing happens once, here; :meth:`next_after` is calendar arithmetic over the parsed
    tables. See the module docstring for the dialect and the DST rules."""

    kind: ClassVar[str] = "cron"
    expression: str
    timezone: str = "UTC"
    fields: CronFields = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _fixed_offset: int | None = field(init=False, repr=False, compare=False)
    _matcher: _WallMatcher = field(init=False, repr=False, compare=False)
    # The zone's current year of offset changes: a cache that never changes a result.
    _year: list[_YearTable] = field(init=False, repr=False, compare=False)

    def __init__(self, expression: str, *, timezone: str | ZoneInfo = "UTC") -> None:
        text, fields = _parse(expression)
        zone = get_zone(timezone, "timezone")
        name = zone.key
        if name is None:
            raise InvalidTimezone("timezone", timezone, f"{timezone!r} has no IANA name")
        fixed: int | None = None
        if name in _FIXED_OFFSET_ZONES or name.startswith("Etc/"):
            fixed = _offset_at(zone, 0)
        setattr_ = object.__setattr__
        setattr_(self, "expression", text)
        setattr_(self, "timezone", name)
        setattr_(self, "fields", fields)
        setattr_(self, "_zone", zone)
        setattr_(self, "_fixed_offset", fixed)
        setattr_(self, "_matcher", _wall_matcher(fields))
        setattr_(self, "_year", [])

    # -- public API ------------------------------------------------------------------------

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after ``instant``, as an aware UTC datetime.

        ``None`` when nothing fires within :data:`HORIZON` (50 years) after ``instant``.
        Raises :class:`~goatbeat.core.errors.InvalidValue` for a naive ``instant``."""
        if instant.__class__ is not datetime or instant.tzinfo is not UTC:
            instant = ensure_aware(instant, "instant")
        delta = instant - _EPOCH
        # Fire instants are whole seconds, so "strictly after" means "from the next second".
        found = self._next_timestamp(delta.days * _DAY + delta.seconds + 1)
        return None if found is None else _EPOCH + timedelta(seconds=found)

    def to_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "expression": self.expression, "timezone": self.timezone}

    def describe(self) -> str:
        return f"cron {self.expression} ({self.timezone})"

    # -- search ----------------------------------------------------------------------------

    def _next_timestamp(self, lo: int) -> int | None:
        """The first fire instant >= ``lo``, in Unix seconds."""
        if lo < _MIN_TS:
            lo = _MIN_TS
        limit = lo + _HORIZON_S
        if limit > _MAX_TS:
            limit = _MAX_TS
            if lo > limit:
                return None
        offset = self._fixed_offset
        if offset is not None:
            wall = self._matcher.next_wall(lo + offset, limit + offset)
            if wall is None or wall - offset > limit:
                return None
            return wall - offset
        return self._next_in_zone(lo, limit)

    def _year_table(self, timestamp: int) -> _YearTable:
        slot = self._year
        if slot:
            table = slot[0]
            if table[0] <= timestamp < table[1]:
                return table
        table = _year_transitions(self._zone, _year_of(timestamp))
        slot[:] = [table]
        return table

    def _next_in_zone(self, lo: int, limit: int) -> int | None:
        fixed_time = self.fields.fixed_time
        u = lo
        while True:
            _, year_end, times, offsets, initial = table = self._year_table(u)
            i = bisect_right(times, u)
            offset = offsets[i - 1] if i else initial
            if fixed_time:
                # The offset change at or before u, when recent enough to matter here.
                if i:
                    changed_at = times[i - 1]
                    before = offsets[i - 2] if i > 1 else initial
                elif u - table[0] <= 2 * _DAY:
                    changed_at, before = _last_change_before(self._zone, table)
                else:
                    changed_at, before = _FAR_PAST, offset
                if u - changed_at <= 2 * _DAY:
                    if offset > before and u == changed_at:
                        # Wall times the jump skipped fire now, at the first real instant.
                        wall = self._matcher.next_wall(changed_at + before, changed_at + offset)
                        if wall is not None and wall < changed_at + offset:
                            return u
                    elif offset < before and u < changed_at + (before - offset):
                        # Second pass of a repeated hour: its wall times fired on the first.
                        u = changed_at + (before - offset)
            wall = self._matcher.next_wall(u + offset, limit + offset + _DAY)
            if wall is None:
                return None
            candidate = wall - offset
            if candidate > limit:
                return None
            # Valid only if the offset holds from u to the candidate; otherwise resume the
            # search at the first change, where the wall clock jumps.
            change: int | None = None
            if i < len(times):
                change = times[i]
                if change > candidate:
                    return candidate
            elif candidate < year_end:
                return candidate
            elif year_end < u + 2 * _DAY:
                change = _first_change_from(self._zone, year_end, candidate)
                if change is None:
                    return candidate
            if candidate - u > 4 * _DAY and (change is None or change >= u + 2 * _DAY):
                # Far candidate: no wall time between here and it matches, and offsets move
                # by less than a day, so only the two days before it can change the answer.
                # Skip the offset changes in between (and their zone tables).
                u = candidate - 2 * _DAY
                continue
            if change is None:
                change = _first_change_from(self._zone, year_end, candidate)
                if change is None:
                    return candidate
            u = change


# -- time zone offsets ---------------------------------------------------------------------


def _offset_at(zone: ZoneInfo, timestamp: int) -> int:
    return _seconds(datetime.fromtimestamp(timestamp, zone).utcoffset())


def _year_of(timestamp: int) -> int:
    return date.fromordinal(timestamp // _DAY + _EPOCH_ORD).year


# Offset changes closer together than this could cancel out between two probes unseen.
# The closest pair in tzdata is 4 days apart (Africa/Freetown, 1939); since 1945, a week.
_PROBE_STEP = 3 * _DAY


@lru_cache(maxsize=4096)
def _year_transitions(zone: ZoneInfo, year: int) -> _YearTable:
    """The UTC offset changes of ``zone`` during ``year`` (UTC), as a :data:`_YearTable`.

    zoneinfo answers offsets but does not list transitions, so probe every
    :data:`_PROBE_STEP` and bisect each change found to the second."""
    start = (date(year, 1, 1).toordinal() - _EPOCH_ORD) * _DAY
    end = (date(year + 1, 1, 1).toordinal() - _EPOCH_ORD) * _DAY
    fromtimestamp = datetime.fromtimestamp
    times: list[int] = []
    offsets: list[int] = []
    probe = start - 1
    offset = fromtimestamp(probe, zone).utcoffset()
    initial = offset
    while probe < end - 1:
        ahead = min(probe + _PROBE_STEP, end - 1)
        ahead_offset = fromtimestamp(ahead, zone).utcoffset()
        while ahead_offset != offset:
            low, high = probe, ahead
            while high - low > 1:
                middle = (low + high) // 2
                if fromtimestamp(middle, zone).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            offset = fromtimestamp(high, zone).utcoffset()
            times.append(high)
            offsets.append(_seconds(offset))
            probe = high
        probe = ahead
    return start, end, tuple(times), tuple(offsets), _seconds(initial)


def _seconds(offset: timedelta | None) -> int:
    assert offset is not None
    return offset.days * _DAY + offset.seconds


def _last_change_before(zone: ZoneInfo, table: _YearTable) -> tuple[int, int]:
    """The last offset change before the year of ``table`` and the offset before it; a
    far-past instant when that year has none (only changes within two days matter)."""
    _, _, times, offsets, initial = _year_transitions(zone, _year_of(table[0] - 1))
    if not times:
        return _FAR_PAST, initial
    return times[-1], offsets[-2] if len(times) > 1 else initial


def _first_change_from(zone: ZoneInfo, start: int, until: int) -> int | None:
    """The first offset change in ``[start, until]``; ``start`` begins a year."""
    while start <= until:
        _, end, times, _, _ = _year_transitions(zone, _year_of(start))
        if times:
            return times[0] if times[0] <= until else None
        start = end
    return None
