"""Operator control of a schedule: what a pause, a resume and a backfill write, the pause
that ``pause_on_failure`` makes, and the errors left on occurrences nothing will submit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from goatbeat.core.errors import DamagedRow, InvalidValue, ScheduleNotFound, short_repr
from goatbeat.core.misfire import count_instants, instants_between
from goatbeat.core.model import StoredSchedule
from goatbeat.core.store import ResumeResult
from goatbeat.core.timeutil import ensure_aware, iso_z, to_utc
from goatbeat.stores.arguments import check_positive
from goatbeat.stores.definitions import utc
from goatbeat.stores.rows import schedule_from_row

ABANDONED_ERROR = "schedule deleted before this occurrence was submitted"


# -- pause, resume, backfill -----------------------------------------------------------------

MAX_PAUSE_NOTE = 2000
MAX_PAUSED_BY = 200
PAUSE_WITHDRAWN = "skipped: the schedule was paused while this occurrence waited to start"

FAILURE_PAUSER = "goatbeat"
"""``paused_by`` of a pause that ``pause_on_failure`` made."""


def pause_after_failures(store: Any, name: str, failures: int) -> None:
    """Pause ``name`` as ``pause_on_failure`` does: by ``goatbeat``, the note saying why; a
    schedule deleted meanwhile is left alone."""
    try:
        store.pause(
            name,
            note=f"paused after {failures} failures in a row (pause_on_failure)",
            by=FAILURE_PAUSER,
        )
    except ScheduleNotFound:
        pass


def check_pause(note: Any, by: Any) -> tuple[str, str | None]:
    """``(note, by)`` as a pause stores them; InvalidValue naming the field otherwise."""
    if not isinstance(note, str):
        raise InvalidValue("note", note, f"{short_repr(note)} is not text")
    if len(note) > MAX_PAUSE_NOTE:
        raise InvalidValue("note", note, f"longer than {MAX_PAUSE_NOTE} characters")
    if "\x00" in note:
        raise InvalidValue("note", note, "contains a NUL character")
    if by is not None:
        if not isinstance(by, str) or "\x00" in by:
            raise InvalidValue("by", by, f"{short_repr(by)} is not a name")
        by = by.strip()[:MAX_PAUSED_BY] or None
    return note.strip(), by


def pause_values(
    row: Mapping[str, Any], *, note: str, by: str | None, now: datetime
) -> dict[str, Any]:
    """The pause columns :meth:`ScheduleStore.pause` writes (a pause keeps its first instant
    when the schedule is paused again, with a new note)."""
    since = utc(row["paused_at"]) if row["paused"] and row["paused_at"] is not None else now
    return {"paused": True, "paused_at": since, "paused_by": by, "pause_note": note}


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """What :meth:`ScheduleStore.resume` writes, and what it tells."""

    values: dict[str, Any]
    """paused, paused_at, paused_by, pause_note, next_run_at, skipped_count."""
    skipped: int = 0
    lower_bound: bool = False
    first_skipped: datetime | None = None

    def result(self, schedule: StoredSchedule, *, catch_up: bool) -> ResumeResult:
        """What the store's ``resume`` returns once these values are written."""
        return ResumeResult(
            schedule=schedule,
            was_paused=True,
            catch_up=catch_up,
            skipped=self.skipped,
            skipped_is_lower_bound=self.lower_bound,
            first_skipped=self.first_skipped,
        )


def resume_values(row: Mapping[str, Any], *, catch_up: bool, now: datetime) -> Resume | None:
    """The columns a resume writes, or None when the row is not paused. From now, the
    instants from the stored ``next_run_at`` to ``now`` are counted as skipped; a damaged row
    is only unpaused (the claim quarantines it when it comes due)."""
    if not row["paused"]:
        return None
    values: dict[str, Any] = {
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "pause_note": "",
        "next_run_at": utc(row["next_run_at"]),
        "skipped_count": int(row["skipped_count"]),
    }
    first = values["next_run_at"]
    if catch_up or not row["enabled"] or first is None:
        return Resume(values=values)
    try:
        schedule = schedule_from_row(row)
    except DamagedRow:
        return Resume(values=values)
    values["next_run_at"] = schedule.first_run_after(now)
    if first > now:
        return Resume(values=values)
    count, lower_bound = count_instants(schedule, first, now)
    values["skipped_count"] += count
    return Resume(
        values=values,
        skipped=count,
        lower_bound=lower_bound,
        first_skipped=first if count else None,
    )


def backfill_instants(
    row: Mapping[str, Any], *, start: datetime, end: datetime, limit: int, now: datetime
) -> list[datetime]:
    """The instants a backfill of ``[start, end)`` submits, checked: InvalidValue naming
    ``start``, ``end`` or ``limit``; DamagedRow for a row that cannot be decoded."""
    check_positive("limit", limit)
    start = to_utc(ensure_aware(start, "start"), "start")
    end = to_utc(ensure_aware(end, "end"), "end")
    if end <= start:
        raise InvalidValue("end", end, f"{iso_z(end)} is not after the start {iso_z(start)}")
    if end > now:
        raise InvalidValue(
            "end",
            end,
            f"{iso_z(end)} is later than now ({iso_z(now)}): a backfill covers past instants only",
        )
    schedule = schedule_from_row(row)
    instants = instants_between(schedule, start, end, limit=limit)
    if len(instants) > limit:
        raise InvalidValue(
            "limit",
            limit,
            f"{iso_z(start)} .. {iso_z(end)} holds more than {limit} instants of "
            f"{schedule.name!r}; narrow the range or raise the limit",
        )
    return instants
