"""How the admin shows instants (in the current zone, or the schedule's zone and UTC, with seconds
when they matter), History lines and pause titles, and which field a read-only page shows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.functional import lazy

from goatbeat.core.errors import InvalidValue
from goatbeat.core.store import FieldChange
from goatbeat.core.triggers import trigger_from_spec
from goatbeat.django.models import Execution as ExecutionRow
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.words import instant, shows_seconds


def in_current_zone(label: str) -> Any:
    """A column header naming the time zone its times are shown in (the current one, which
    Django activates per request: TIME_ZONE unless the project activates another)."""
    return lazy(lambda: f"{label} ({timezone.get_current_timezone_name()})", str)()


def local_time(value: datetime | None, seconds: bool) -> str:
    if value is None:
        return "-"
    local: datetime = timezone.localtime(value)
    return local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def needs_seconds(obj: Any) -> bool:
    """Whether the schedule's times need their seconds (it fires off whole minutes)."""
    try:
        return shows_seconds(trigger_from_spec(obj.trigger))
    except (InvalidValue, TypeError, ValueError):
        return True  # a damaged trigger: show everything


def instant_column(field: str, label: str, *, zone_of: Any = None) -> Any:
    """An admin column or read-only field showing the instant ``field`` with its seconds and
    its zone: in the current time zone, which the label names (lists, and the pages of rows
    that have no zone of their own), or with ``zone_of(obj)`` in that zone and in UTC."""
    description = label if zone_of is not None else in_current_zone(label)

    @admin.display(description=description, ordering=field)  # type: ignore[untyped-decorator]
    def show(self: Any, obj: Any) -> str:
        value = getattr(obj, field)
        if zone_of is None:
            return local_time(value, True)
        return instant(value, zone_of(obj), seconds=True)

    return show


def zone_of_execution(execution: ExecutionRow) -> str:
    schedule = execution.schedule
    return schedule.timezone if schedule is not None else "UTC"


def execution_time(execution: ExecutionRow, value: datetime | None) -> str:
    schedule = execution.schedule
    zone = schedule.timezone if schedule is not None else "UTC"
    return instant(value, zone, seconds=True)


def history_line(changes: Sequence[FieldChange]) -> str:
    """A History line naming each changed field old -> new (the trigger in words)."""
    return "Changed " + "; ".join(c.describe() for c in changes) + "."


def pause_title(obj: ScheduleRow) -> str:
    """``since 2026-11-01 09:00 UTC by alice``."""
    since = (
        obj.paused_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if obj.paused_at else "-"
    )
    return f"since {since} by {obj.paused_by or '-'}"


def shown_field(model_admin: Any, field: str) -> str:
    """The name a read-only page shows ``field`` under: its display with seconds and zone
    (``<field>_zoned``), its words (``runtime_display``), or the column itself."""
    for name in (f"{field}_zoned", f"{field}_display"):
        if hasattr(model_admin, name):
            return name
    return field
