"""Durations written the way people write them: ``"30s"``, ``"10m"``, ``"1h30m"``, ``"2d"``.

Units: ``ms``, ``s``, ``m``, ``h``, ``d``, ``w``. A bare number means seconds. Components are
written largest first, each unit at most once. Anything else is an :class:`InvalidDuration`
naming the field and the value.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from goatbeat.core.errors import InvalidDuration, short_repr

__all__ = ["parse_duration", "format_duration"]

_UNITS = {"w": 604_800.0, "d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ORDER = ["w", "d", "h", "m", "s", "ms"]
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|w|d|h|m|s)")
_MAX = timedelta(days=3650)


def parse_duration(value: object, *, field: str = "duration") -> timedelta:
    """Parse ``value`` (str, int/float seconds, or timedelta) into a positive-or-zero timedelta."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise InvalidDuration(field, value, f"{short_repr(value)} is not a duration")
    elif isinstance(value, (int, float)):
        # Range first: int/float comparison is exact for any int, but math.isfinite(10**400)
        # would overflow.
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidDuration(
                field, value, f"{short_repr(value)} is not a finite number of seconds"
            )
        if abs(value) > _MAX.total_seconds():
            raise InvalidDuration(field, value, f"{short_repr(value)} is longer than 10 years")
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        result = _parse_text(value, field)
    else:
        raise InvalidDuration(
            field, value, f"{short_repr(value)} is not a duration such as '30s' or '1h30m'"
        )
    if result < timedelta(0):
        raise InvalidDuration(field, value, f"{short_repr(value)} is negative")
    if result > _MAX:
        raise InvalidDuration(field, value, f"{short_repr(value)} is longer than 10 years")
    return result


def _parse_text(value: str, field: str) -> timedelta:
    text = value.strip().lower().replace(" ", "")
    if not text:
        raise InvalidDuration(
            field, value, f"{short_repr(value)} is empty, not a duration such as '30s'"
        )
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or abs(seconds) > _MAX.total_seconds():
            raise InvalidDuration(
                field, value, f"{short_repr(value)} is not a usable number of seconds"
            )
        return timedelta(seconds=seconds)
    pos = 0
    total = 0.0
    last_rank = -1
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            raise InvalidDuration(
                field,
                value,
                f"{short_repr(value)} is not a duration such as '30s', '10m' or '1h30m'",
            )
        number, unit = match.groups()
        rank = _ORDER.index(unit)
        if rank <= last_rank:
            raise InvalidDuration(
                field, value, f"{short_repr(value)}: units must be written largest first, once each"
            )
        last_rank = rank
        total += float(number) * _UNITS[unit]
        if total > _MAX.total_seconds():
            raise InvalidDuration(field, value, f"{short_repr(value)} is longer than 10 years")
        pos = match.end()
    return timedelta(seconds=total)


def format_duration(delta: timedelta) -> str:
    """The shortest text :func:`parse_duration` reads back as ``delta`` (``"1h30m"``)."""
    micros = _total_micros(delta)
    if micros < 0:
        raise InvalidDuration("duration", delta, f"{short_repr(delta)} is negative")
    if micros == 0:
        return "0s"
    parts = []
    for unit in _ORDER:
        size = round(_UNITS[unit] * 1_000_000)
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    if micros:
        # Sub-millisecond remainder: fractional seconds, written in fixed point because the
        # parser reads digits only (``str(1e-06)`` would not parse back).
        whole, frac = divmod(_total_micros(delta), 1_000_000)
        return f"{whole}.{frac:06d}".rstrip("0") + "s"
    return "".join(parts)


def _total_micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
