"""goatbeat's schedules as django-celery-beat rows: planned against the rows already there, read
back as the importer reads rows, and written to its tables."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from goatbeat.conversion import describe_exception
from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import (
    Schedule,
    Source,
    StoredSchedule,
)
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
)
from goatbeat.importers import kombu_json
from goatbeat.importers.comparison import DCB_FIELDS, differences, headers_of
from goatbeat.importers.entries import SourceEntry
from goatbeat.importers.export_rules import (
    CRON_ORDER,
    Refusal,
    before_next,
    celery_period,
    crontab_fields,
    goatbeat_only,
    interval_last_run,
    ran_at,
    unequal,
)
from goatbeat.importers.grid import late_on_grid

# -- django-celery-beat ---------------------------------------------------------------------

TASKS = "django_celery_beat_periodictask"
CHANGES = "django_celery_beat_periodictasks"
_SCHEDULE_TABLES = {
    "interval": ("django_celery_beat_intervalschedule", ("every", "period")),
    "crontab": (
        "django_celery_beat_crontabschedule",
        ("minute", "hour", "day_of_week", "day_of_month", "month_of_year", "timezone"),
    ),
    "solar": ("django_celery_beat_solarschedule", ("event", "latitude", "longitude")),
    "clocked": ("django_celery_beat_clockedschedule", ("clocked_time",)),
}
_ROW_COLUMNS = (
    "task args kwargs queue exchange routing_key priority headers expires expire_seconds "
    "enabled one_off start_time description last_run_at total_run_count"
).split()
_NAME_LENGTH = 200
_DECIMALS = 6


@dataclass(frozen=True, slots=True)
class DcbRow:
    """A django-celery-beat row as the export writes it."""

    name: str
    kind: str  # interval, crontab, solar, clocked
    schedule: dict[str, Any]  # the schedule table's columns
    values: dict[str, Any]  # the periodic task's columns (instants aware, UTC)


@dataclass(slots=True)
class DcbPlan:
    create: list[DcbRow] = field(default_factory=list)
    update: list[tuple[DcbRow, list[str]]] = field(default_factory=list)
    """Rows that change, with what changes (``enabled: True -> False``...)."""
    unchanged: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    """Rows of the table goatbeat has no schedule (of the exported sources) for."""
    read_back: dict[str, SourceEntry] = field(default_factory=dict)
    """Each exported row as the importer reads it (its celery schedule object included)."""

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.update)


def _dcb_row(
    sched: Schedule, existing: Mapping[str, Any] | None, now: datetime
) -> DcbRow | list[Refusal]:
    refused = goatbeat_only(sched)

    def refuse(field_name: str, reason: str) -> None:
        refused.append(Refusal(sched.name, field_name, reason))

    if len(sched.name) > _NAME_LENGTH:
        refuse("name", f"{len(sched.name)} characters; django-celery-beat keeps {_NAME_LENGTH}")
    for key, value in (
        ("task", sched.task),
        ("queue", sched.routing.queue),
        ("exchange", sched.routing.exchange),
        ("routing_key", sched.routing.routing_key),
    ):
        if value is not None and len(value) > _NAME_LENGTH:
            refuse(key, f"{len(value)} characters; django-celery-beat keeps {_NAME_LENGTH}")
    priority = sched.routing.priority
    if priority is not None and not 0 <= priority <= 255:
        refuse("priority", f"{priority}: django-celery-beat's priority is 0-255")
    expires = sched.routing.expires
    if expires is not None and (float(expires) != int(expires) or expires < 1):
        refuse("expires", f"{expires:g} s: django-celery-beat's expire_seconds is whole seconds")
    if sched.end_at is not None and expires is not None:
        refuse(
            "end_at",
            f"{sched.end_at.isoformat()} with a message expiry of {expires:g} s: "
            "django-celery-beat sends its expires (the end) as every message's expiry and "
            "ignores expire_seconds then",
        )
    trigger = sched.trigger
    kind: str
    columns: dict[str, Any]
    if isinstance(trigger, IntervalTrigger):
        kind = "interval"
        every, period = celery_period(trigger.every)
        if period == "microseconds" and trigger.every < timedelta(seconds=1):
            refuse("trigger", f"{trigger.describe()}: celery beat runs at most every 1 s")
        columns = {"every": every, "period": period}
        if sched.start_at is not None and (
            trigger.anchor is None
            or (sched.start_at - trigger.anchor) % trigger.every != timedelta(0)
        ):
            refuse(
                "trigger",
                f"{trigger.describe()} with start_at {sched.start_at.isoformat()}: "
                "django-celery-beat counts an interval with a start_time from the start_time, "
                "which is off this grid",
            )
    elif isinstance(trigger, (CronTrigger, CeleryCrontabTrigger)):
        kind = "crontab"
        fields = crontab_fields(sched)
        if isinstance(fields, Refusal):
            refused.append(fields)
            fields = {k: "*" for k in CRON_ORDER}
        columns = {**fields, "timezone": trigger.timezone}
    elif isinstance(trigger, SolarTrigger):
        kind = "solar"
        for key in ("latitude", "longitude"):
            value = getattr(trigger, key)
            if round(value, _DECIMALS) != value:
                refuse(key, f"{value!r}: django-celery-beat keeps {_DECIMALS} decimals")
        columns = {
            "event": trigger.event,
            "latitude": Decimal(f"{trigger.latitude:.{_DECIMALS}f}"),
            "longitude": Decimal(f"{trigger.longitude:.{_DECIMALS}f}"),
        }
    elif isinstance(trigger, OnceTrigger):
        kind = "clocked"
        columns = {"clocked_time": trigger.at}
        if sched.start_at is not None and sched.start_at > trigger.at:
            refuse("start_at", "after the clocked time: it would never run")
    else:
        refuse("trigger", f"{trigger.describe()}: django-celery-beat has no equivalent")
        return refused
    theirs_last = None if existing is None else existing.get("last_run_at")
    theirs_count = 0 if existing is None else int(existing.get("total_run_count") or 0)
    if isinstance(trigger, IntervalTrigger):
        last = interval_last_run(sched, now)
        if (
            sched.next_run_at is None
            and theirs_last is not None
            and last is not None
            and theirs_last <= last
            and late_on_grid(theirs_last, trigger.every, last)
        ):
            last = theirs_last  # not planned (disabled): the row's run on this grid will do
        if sched.one_off and ran_at(sched) is None and last is not None:
            refuse(
                "one_off",
                "a one-off interval that has not run: django-celery-beat would need a "
                "last_run_at to keep its phase, and reads one as its run (give it a start_at)",
            )
    elif kind == "clocked":
        last = ran_at(sched)  # never ran: it is owed (pending), as the importer reads it
    else:
        last = ran_at(sched)
        if last is None and theirs_last is None:
            if not sched.one_off:
                last = before_next(sched, now)
            elif sched.next_run_at is not None and sched.next_run_at <= now:
                refuse(
                    "one_off",
                    f"a one-off {kind} that has not run and whose instant "
                    f"{sched.next_run_at.isoformat()} is owed: django-celery-beat would run it "
                    "at its next instant instead, unless the row has a last_run_at, which a "
                    "one-off row reads as its run",
                )
            elif sched.start_at is not None:
                # django-celery-beat dates a never-run row with a start_time 30 years back,
                # so it runs it at once at its start_time, off its schedule (CELERY_BUGS
                # start_time_catch_up), unless the row has a last run.
                refuse(
                    "one_off",
                    f"a one-off {kind} with a start_at that has not run: django-celery-beat "
                    "runs it at once at its start_time unless the row has a last_run_at, "
                    "which a one-off row reads as its run",
                )
    if theirs_last is not None and (last is None or theirs_last > last):
        last = theirs_last  # celery ran it later still: never hand back an earlier run
    if refused:
        return refused
    headers = headers_of(sched, strip_name=True)
    values: dict[str, Any] = {
        "task": sched.task,
        "args": json.dumps(list(sched.args)),
        "kwargs": json.dumps(dict(sched.kwargs)),
        "queue": sched.routing.queue,
        "exchange": sched.routing.exchange,
        "routing_key": sched.routing.routing_key,
        "priority": priority,
        "headers": json.dumps(kombu_json.encode(headers, field="headers")),
        "expires": sched.end_at,
        "expire_seconds": None if expires is None else int(expires),
        "enabled": sched.enabled and not sched.paused,
        "one_off": sched.one_off or kind == "clocked",
        "start_time": sched.start_at,
        "description": sched.description,
        "last_run_at": last,
        "total_run_count": max(theirs_count, sched.total_run_count),
    }
    return DcbRow(name=sched.name, kind=kind, schedule=columns, values=values)


def _importer_row(row: DcbRow, now: datetime) -> dict[str, Any]:
    """``row`` in the shape the importer's query returns (``django_celery_beat._entry``)."""
    out: dict[str, Any] = {"name": row.name, "date_changed": now, **row.values}
    for kind, (_, cols) in _SCHEDULE_TABLES.items():
        mine = kind == row.kind
        out[f"{kind}_id"] = 1 if mine else None
        out[f"{kind}_row"] = 1 if mine else None
        for col in cols:
            out[f"{kind}_{col}"] = row.schedule.get(col) if mine else None
    return out


def _read_back_row(row: DcbRow, now: datetime) -> SourceEntry | Refusal:
    from goatbeat.importers.django_celery_beat import read_row

    entry = read_row(_importer_row(row, now))
    if entry.schedule is None:
        return Refusal(
            row.name, "row", f"django-celery-beat's side would refuse it: {entry.problem}"
        )
    return entry


def _changes(row: DcbRow, existing: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    theirs_kind = existing.get("kind")
    if theirs_kind != row.kind or _schedule_differs(row, existing.get("schedule") or {}):
        out.append(
            f"schedule: {_describe_schedule(theirs_kind, existing.get('schedule') or {})} -> "
            f"{_describe_schedule(row.kind, row.schedule)}"
        )
    for key in _ROW_COLUMNS:
        ours, theirs = row.values[key], existing.get(key)
        if key in ("args", "kwargs", "headers"):
            same = _json(ours) == _json(theirs)
        elif key in ("enabled", "one_off"):
            same = bool(ours) == bool(theirs)
        elif key == "description":
            same = (ours or "") == (theirs or "")
        elif key in ("priority", "expire_seconds", "total_run_count"):
            same = (None if ours is None else int(ours)) == (
                None if theirs is None else int(theirs)
            )
        else:
            same = ours == theirs
        if not same:
            out.append(f"{key}: {_show(theirs)} -> {_show(ours)}")
    return out


def _json(text: Any) -> Any:
    try:
        return kombu_json.loads(None if text is None else str(text), field="json", default=None)
    except GoatbeatError:
        return text


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return repr(value)


def _schedule_differs(row: DcbRow, theirs: Mapping[str, Any]) -> bool:
    for key, ours in row.schedule.items():
        value = theirs.get(key)
        if isinstance(ours, Decimal):
            if value is None or Decimal(str(value)) != ours:
                return True
        elif key == "every":
            if value is None or int(value) != ours:
                return True
        elif ours != value:
            return True
    return False


def _describe_schedule(kind: Any, cols: Mapping[str, Any]) -> str:
    if kind is None:
        return "none"
    if kind == "interval":
        return f"every {cols.get('every')} {cols.get('period')}"
    if kind == "crontab":
        fields = " ".join(str(cols.get(k)) for k in CRON_ORDER)
        return f"crontab {fields} ({cols.get('timezone')})"
    if kind == "solar":
        return f"solar {cols.get('event')} {cols.get('latitude')},{cols.get('longitude')}"
    return f"clocked {_show(cols.get('clocked_time'))}"


def _says_the_same(sched: Schedule, theirs: Mapping[str, Any], now: datetime) -> bool:
    """Whether the existing row, read by the importer, is ``sched`` (an earlier export)."""
    if theirs.get("kind") is None:
        return False
    values = {k: theirs.get(k) for k in _ROW_COLUMNS}
    row = DcbRow(
        name=sched.name, kind=theirs["kind"], schedule=dict(theirs["schedule"]), values=values
    )
    back = _read_back_row(row, now)
    return (
        not isinstance(back, Refusal)
        and back.schedule is not None
        and not differences(sched, back.schedule, now=now, fields=DCB_FIELDS, dcb=True)
    )


def plan_django_celery_beat(
    schedules: Sequence[StoredSchedule],
    existing: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
) -> DcbPlan:
    """What exporting ``schedules`` writes into django-celery-beat's tables.

    ``existing``: the table's rows by name (:func:`read_rows`). A goatbeat schedule imported
    from django-celery-beat updates its row (created again if it was deleted there); one made
    in goatbeat creates a row, and refuses to take over a row of that name unless that row
    already says what goatbeat has (an earlier export). Rows goatbeat has no schedule for are
    left alone. Each row is read back as the importer reads it and compared."""
    plan = DcbPlan()
    names = set()
    for sched in sorted(schedules, key=lambda s: s.name):
        names.add(sched.name)
        if not isinstance(sched, Schedule):
            plan.refused.append(Refusal(sched.name, "row", f"damaged: {sched.describe()}"))
            continue
        theirs = existing.get(sched.name)
        made = _dcb_row(sched, theirs, now)
        if isinstance(made, list):
            plan.refused.extend(made)
            continue
        read = _read_back_row(made, now)
        if isinstance(read, Refusal):
            plan.refused.append(read)
            continue
        assert read.schedule is not None
        plan.read_back[sched.name] = read
        diffs = differences(sched, read.schedule, now=now, fields=DCB_FIELDS, dcb=True)
        if diffs:
            plan.refused.append(unequal(sched.name, diffs))
            continue
        if sched.paused:
            plan.notes.append(
                (sched.name, "paused in goatbeat: exported disabled (the pause note is not kept)")
            )
        if theirs is None:
            plan.create.append(made)
            continue
        changes = _changes(made, theirs)
        if not changes:
            plan.unchanged.append(sched.name)
        elif sched.source is not Source.DJANGO_CELERY_BEAT and not _says_the_same(
            sched, theirs, now
        ):
            plan.refused.append(
                Refusal(
                    sched.name,
                    "name",
                    f"a django-celery-beat row of that name exists and goatbeat did not import "
                    f"it (the schedule is goatbeat's, source {sched.source.value!r}): rename "
                    "one of them, or delete the row first",
                )
            )
        else:
            plan.update.append((made, changes))
    plan.left_alone.extend(sorted(set(existing) - names))
    return plan


# -- reading and writing the tables -----------------------------------------------------------


def _marker(conn: Any) -> str:
    return "?" if isinstance(conn, sqlite3.Connection) else "%s"


def _naive(conn: Any) -> bool:
    return isinstance(conn, sqlite3.Connection) or getattr(conn, "vendor", None) == "sqlite"


def _columns(cursor: Any, table: str) -> set[str]:
    try:
        cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")  # noqa: S608 - fixed names
    except Exception as exc:  # any driver: missing table
        raise StoreError(
            f"cannot read {table}: {describe_exception(exc)}; is this django-celery-beat's "
            "database (its migrations applied)?"
        ) from None
    names = {d[0] for d in cursor.description}
    cursor.fetchall()
    return names


def read_rows(conn: Any, *, naive_timezone: str = "UTC") -> dict[str, dict[str, Any]]:
    """The periodic task rows by name: their columns (instants aware, in UTC), ``kind`` and
    ``schedule`` (the columns of the schedule row they point to)."""
    from goatbeat.importers.entries import celery_instant

    cursor = conn.cursor()
    try:
        have = _columns(cursor, TASKS)
        cols = ["id", "name", *(c for c in _ROW_COLUMNS if c in have)]
        fks = [f"{k}_id" for k in _SCHEDULE_TABLES if f"{k}_id" in have]
        cursor.execute(f"SELECT {', '.join(cols + fks)} FROM {TASKS}")  # noqa: S608
        rows = [dict(zip(cols + fks, r, strict=True)) for r in cursor.fetchall()]
        schedules: dict[str, dict[Any, dict[str, Any]]] = {}
        for kind, (table, scols) in _SCHEDULE_TABLES.items():
            if f"{kind}_id" not in have:
                continue
            cursor.execute(f"SELECT id, {', '.join(scols)} FROM {table}")  # noqa: S608
            schedules[kind] = {r[0]: dict(zip(scols, r[1:], strict=True)) for r in cursor}
    finally:
        cursor.close()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        for key in ("last_run_at", "start_time", "expires"):
            if key in row:
                row[key] = celery_instant(row[key], key, naive_timezone)
        row["kind"] = None
        row["schedule"] = {}
        for kind in _SCHEDULE_TABLES:
            fk = row.get(f"{kind}_id")
            if fk is not None:
                sched = dict(schedules.get(kind, {}).get(fk, {}))
                if "clocked_time" in sched:
                    sched["clocked_time"] = celery_instant(
                        sched["clocked_time"], "clocked_time", naive_timezone
                    )
                row["kind"], row["schedule"] = kind, sched
                break
        out[str(row["name"])] = row
    return out


def _db_value(value: Any, naive: bool, naive_timezone: str) -> Any:
    if isinstance(value, datetime) and naive:
        return value.astimezone(get_zone(naive_timezone)).replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(value, Decimal) and naive:
        return str(value)
    return value


def _schedule_id(cursor: Any, row: DcbRow, marker: str, naive: bool, tz: str) -> int:
    """The id of a schedule row saying ``row.schedule``: an existing one (django-celery-beat
    shares them between tasks, so one is never changed in place), else a new one."""
    table, cols = _SCHEDULE_TABLES[row.kind]
    cursor.execute(f"SELECT id, {', '.join(cols)} FROM {table}")  # noqa: S608
    from goatbeat.importers.entries import celery_instant

    for found in cursor.fetchall():
        theirs = dict(zip(cols, found[1:], strict=True))
        if "clocked_time" in theirs:
            theirs["clocked_time"] = celery_instant(theirs["clocked_time"], "clocked_time", tz)
        if not _schedule_differs(row, theirs):
            return int(found[0])
    values = [_db_value(row.schedule[c], naive, tz) for c in cols]
    cursor.execute(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES "  # noqa: S608
        f"({', '.join(marker for _ in cols)}) RETURNING id",
        values,
    )
    (new_id,) = cursor.fetchone()
    return int(new_id)


def write_django_celery_beat(
    conn: Any,
    plan: DcbPlan,
    *,
    now: datetime,
    naive_timezone: str = "UTC",
) -> None:
    """Write the plan's rows in one transaction and move ``last_update`` of
    ``django_celery_beat_periodictasks``, so a DatabaseScheduler reads them again. Raises
    ``StoreError`` (nothing written) when the tables refuse."""
    marker, naive = _marker(conn), _naive(conn)
    django_autocommit = conn.get_autocommit() if hasattr(conn, "get_autocommit") else None
    if django_autocommit:
        conn.set_autocommit(False)
    cursor = conn.cursor()
    try:
        have = _columns(cursor, TASKS)
        rows = [*plan.create, *(r for r, _ in plan.update)]
        creating = {r.name for r in plan.create}
        for row in rows:
            sid = _schedule_id(cursor, row, marker, naive, naive_timezone)
            values = {k: v for k, v in row.values.items() if k in have}
            values["date_changed"] = now
            for kind in _SCHEDULE_TABLES:
                if f"{kind}_id" in have:
                    values[f"{kind}_id"] = sid if kind == row.kind else None
            params = [_db_value(v, naive, naive_timezone) for v in values.values()]
            if row.name in creating:
                cols = ["name", *values]
                cursor.execute(
                    f"INSERT INTO {TASKS} ({', '.join(cols)}) VALUES "  # noqa: S608
                    f"({', '.join(marker for _ in cols)})",
                    [row.name, *params],
                )
            else:
                sets = ", ".join(f"{k} = {marker}" for k in values)
                cursor.execute(
                    f"UPDATE {TASKS} SET {sets} WHERE name = {marker}",  # noqa: S608
                    [*params, row.name],
                )
        if rows:
            stamp = _db_value(now, naive, naive_timezone)
            cursor.execute(
                f"UPDATE {CHANGES} SET last_update = {marker} WHERE ident = 1",  # noqa: S608
                (stamp,),
            )
            if cursor.rowcount == 0:
                cursor.execute(
                    f"INSERT INTO {CHANGES} (ident, last_update) VALUES (1, {marker})",  # noqa: S608
                    (stamp,),
                )
    except GoatbeatError:
        conn.rollback()
        raise
    except Exception as exc:  # any driver error: the transaction is undone
        conn.rollback()
        raise StoreError(
            f"cannot write django-celery-beat's tables: {describe_exception(exc)}"
        ) from None
    else:
        conn.commit()
    finally:
        cursor.close()
        if django_autocommit:
            conn.set_autocommit(True)
