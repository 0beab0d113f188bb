"""What the commands print: schedules and executions as JSON (``--json``), aligned tables,
UTC instants, a one-line description of the store.

The JSON field names are a contract (scripts parse ``schedule list --json``): add fields, never
rename them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click

from goatbeat.core.health import ScheduleHealth
from goatbeat.core.model import DamagedSchedule, Execution, Schedule
from goatbeat.core.store import ScheduleStore

__all__ = [
    "command",
    "execution_to_json",
    "health_to_json",
    "runtime_text",
    "iso",
    "iso_or_none",
    "schedule_to_json",
    "state_cell",
    "store_info",
    "stored_to_json",
    "table",
]


def schedule_to_json(s: Schedule, *, now: datetime | None = None) -> dict[str, Any]:
    """Every field of ``s``; with ``now`` also its ``state`` (enabled, disabled, paused,
    ended) and whether it has ``ended``."""
    return {
        "id": s.id,
        "name": s.name,
        "source": s.source.value,
        "task": s.task,
        "trigger": s.trigger.to_spec(),
        "trigger_description": s.trigger.describe(),
        "timezone": s.timezone,
        "args": list(s.args),
        "kwargs": dict(s.kwargs),
        **s.routing.to_dict(),
        "misfire": s.misfire.value,
        "misfire_grace": s.misfire_grace.total_seconds(),
        "catch_up_limit": s.catch_up_limit,
        "start_at": iso_or_none(s.start_at),
        "end_at": iso_or_none(s.end_at),
        "one_off": s.one_off,
        "description": s.description,
        "enabled": s.enabled,
        "next_run_at": iso_or_none(s.next_run_at),
        "last_run_at": iso_or_none(s.last_run_at),
        "last_status": s.last_status,
        "total_run_count": s.total_run_count,
        "missed_count": s.missed_count,
        "version": s.version,
        "created_at": iso_or_none(s.created_at),
        "updated_at": iso_or_none(s.updated_at),
        "damaged": None,
        "jitter": s.jitter.total_seconds(),
        "overlap": s.overlap.value,
        "max_runtime": None if s.max_runtime is None else s.max_runtime.total_seconds(),
        "pause_on_failure": s.pause_on_failure,
        "paused": s.paused,
        "paused_at": iso_or_none(s.paused_at),
        "paused_by": s.paused_by,
        "pause_note": s.pause_note,
        "skipped_count": s.skipped_count,
        **({} if now is None else {"state": s.state(now), "ended": s.ended(now)}),
    }


def stored_to_json(s: Schedule | DamagedSchedule, *, now: datetime | None = None) -> dict[str, Any]:
    """:func:`schedule_to_json`, or for a damaged row its state and ``damaged`` (column,
    value, detail) with every definition column as stored."""
    if isinstance(s, Schedule):
        return schedule_to_json(s, now=now)
    data = s.to_dict()
    if now is not None:
        data["state"] = "damaged"
    return data


def state_cell(s: Schedule | DamagedSchedule, now: datetime) -> str:
    """``enabled``, ``disabled``, ``paused``, ``ended`` (or ``damaged``), for tables."""
    if isinstance(s, DamagedSchedule):
        return "paused" if s.paused else ("enabled" if s.enabled else "disabled")
    return s.state(now)


def execution_to_json(e: Execution) -> dict[str, Any]:
    return {
        "id": e.id,
        "schedule": e.schedule_name,
        "scheduled_at": iso(e.scheduled_at),
        "idempotency_key": e.idempotency_key,
        "kind": e.kind.value,
        "status": e.status.value,
        "fencing_token": e.fencing_token,
        "scheduler_id": e.scheduler_id,
        "claimed_at": iso_or_none(e.claimed_at),
        "submitted_at": iso_or_none(e.submitted_at),
        "finished_at": iso_or_none(e.finished_at),
        "attempts": e.attempts,
        "backend_task_id": e.backend_task_id,
        "error": e.error,
        "started_at": iso_or_none(e.started_at),
        "runtime": e.runtime,
        "worker": e.worker,
        "retries": e.retries,
    }


def health_to_json(h: ScheduleHealth | None) -> dict[str, Any]:
    """A schedule's record of success (from completion reports) as ``schedule list/show``
    add it to each schedule's fields."""
    return {
        "last_success_at": None if h is None else iso_or_none(h.last_success_at),
        "last_failure_at": None if h is None else iso_or_none(h.last_failure_at),
        "consecutive_failures": 0 if h is None else h.consecutive_failures,
        "overdue": False if h is None else h.overdue,
    }


def runtime_text(seconds: float | None) -> str:
    """``0.42s``, ``3m05s``, ``-``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def iso(value: object) -> str:
    """``2026-12-01 08:00:00Z`` for a datetime, ``-`` for anything else (None)."""
    if not isinstance(value, datetime):
        return "-"
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ") + "Z"


def iso_or_none(value: datetime | None) -> str | None:
    """``2026-12-01T08:00:00Z``, or None: the JSON spelling."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> str:
    """Left-aligned columns two spaces apart, the header first."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [list(header), *rows]
    ]
    return "\n".join(lines)


def store_info(store: ScheduleStore) -> str:
    """``SQLiteStore beat.db (schema 3)``: what the command works on, never failing."""
    try:
        info = store.info()
    except Exception:  # a description is not worth failing the command for
        return type(store).__name__
    text = str(info.get("kind") or type(store).__name__)
    if info.get("database"):
        text += f" {info['database']}"
    if info.get("schema_version"):
        text += f" (schema {info['schema_version']})"
    return text


def command(words: str) -> str:
    """``goatbeat <words>`` as the user should type it: ``manage.py goatbeat <words>`` when
    the command runs as ``manage.py goatbeat`` (its program name), so a hint is never one
    that would not work where it is read."""
    ctx = click.get_current_context(silent=True)
    prog = (ctx.find_root().info_name or "") if ctx is not None else ""
    # "manage.py goatbeat" (or "django-admin goatbeat"); anything else is the goatbeat command.
    return f"{prog if prog.endswith(' goatbeat') else 'goatbeat'} {words}"
