"""Small helpers for aware datetimes. Inside the core every instant is an aware UTC datetime."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from goatbeat.core.errors import InvalidTimezone, InvalidValue, short_repr

__all__ = ["ensure_aware", "to_utc", "parse_instant", "get_zone", "iso_z"]


def ensure_aware(value: datetime, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidValue(field, value, f"{short_repr(value)} is not a datetime")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidValue(field, value, f"{value.isoformat()} is naive; give it a time zone")
    return value


def to_utc(value: datetime, field: str = "instant") -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 0001-01-01 at +05:00 has no UTC equivalent a datetime can hold.
        raise InvalidValue(field, value, f"{value.isoformat()} is out of range in UTC") from None


def parse_instant(value: object, field: str) -> datetime:
    """An aware datetime from a datetime or an ISO-8601 string (``Z`` accepted)."""
    if isinstance(value, datetime):
        return to_utc(ensure_aware(value, field), field)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(
                value.strip().replace("Z", "+00:00").replace("z", "+00:00")
            )
        except ValueError:
            raise InvalidValue(
                field, value, f"{short_repr(value)} is not an ISO-8601 instant"
            ) from None
        return to_utc(ensure_aware(parsed, field), field)
    raise InvalidValue(field, value, f"{short_repr(value)} is not an instant")


@lru_cache(maxsize=512)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def get_zone(name: object, field: str = "timezone") -> ZoneInfo:
    """The ZoneInfo for an IANA name; InvalidTimezone naming the field otherwise."""
    if isinstance(name, ZoneInfo):
        return name
    if not isinstance(name, str) or not name or name != name.strip():
        raise InvalidTimezone(field, name, f"{short_repr(name)} is not an IANA time zone name")
    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTimezone(
            field, name, f"{short_repr(name)} is not a known IANA time zone"
        ) from None


def iso_z(value: datetime) -> str:
    """UTC ISO-8601 with a ``Z`` suffix, as idempotency keys use: ``2026-12-01T08:00:00Z``."""
    utc = to_utc(value)
    text = utc.replace(tzinfo=None).isoformat()
    return text + "Z"
