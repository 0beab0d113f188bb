"""Read django-celery-beat's tables with SQL, as source entries.

django-celery-beat pins ``Django<6.1``, so this never imports it: it reads
``django_celery_beat_periodictask`` joined to ``…_intervalschedule``, ``…_crontabschedule``
(with its ``timezone`` column), ``…_solarschedule`` and ``…_clockedschedule`` through psycopg
(PostgreSQL), sqlite3 (SQLite) or any DB-API connection (Django's ``connection``). Columns
added by later django-celery-beat versions are optional.

Meaning follows django-celery-beat's ``DatabaseScheduler``: a crontab is evaluated in its row's
zone; ``args``/``kwargs``/``headers`` are kombu JSON; ``headers`` gain ``periodic_task_name``;
a row that never ran counts from ``date_changed``; ``expire_seconds`` is the message expiry;
an absolute ``expires`` becomes the schedule's end. Where django-celery-beat silently drops a
row (``day_of_week=7``), goatbeat imports it with a note.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urlsplit

from goatbeat.conversion import CELERY_BUGS, describe_exception, to_trigger
from goatbeat.core.cron import parse_cron
from goatbeat.core.errors import GoatbeatError, InvalidValue, StoreError
from goatbeat.core.model import Routing, Schedule, Source
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import IntervalTrigger, OnceTrigger, Trigger
from goatbeat.importers import kombu_json
from goatbeat.importers.entries import SourceEntry, celery_instant, celery_misfire_grace
from goatbeat.stores import redact_url

__all__ = [
    "ClockedSchedule",
    "TABLE",
    "HandBack",
    "connect",
    "hand_back",
    "read_django_celery_beat",
    "read_row",
]

TABLE = "django_celery_beat_periodictask"

_TASK_COLUMNS = (
    "name task args kwargs queue exchange routing_key priority headers expires expire_seconds "
    "enabled one_off start_time description last_run_at total_run_count date_changed "
    "interval_id crontab_id solar_id clocked_id"
).split()
_JOINS = {
    "interval": ("django_celery_beat_intervalschedule", "i", ("every", "period")),
    "crontab": (
        "django_celery_beat_crontabschedule",
        "c",
        ("minute", "hour", "day_of_week", "day_of_month", "month_of_year", "timezone"),
    ),
    "solar": ("django_celery_beat_solarschedule", "s", ("event", "latitude", "longitude")),
    "clocked": ("django_celery_beat_clockedschedule", "k", ("clocked_time",)),
}
_PERIODS = {"days", "hours", "minutes", "seconds", "microseconds"}
_TICK = timedelta(microseconds=1)


@contextmanager
def connect(url: str, *, write: bool = False) -> Iterator[Any]:
    """A DB-API connection for ``postgresql://…`` / ``postgres://…`` or ``sqlite:///path``
    (SQLite opened read-only unless ``write``)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        import psycopg

        try:
            # prepare_threshold=None: the URL may be PgBouncer in transaction mode.
            pg = psycopg.connect(
                url.replace("postgresql+psycopg", "postgresql", 1), prepare_threshold=None
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {redact_url(url)}: {exc}") from None
        try:
            yield pg
        finally:
            pg.close()
    elif scheme == "sqlite":
        path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
        if not path:
            raise InvalidValue(
                "database", url, f"{url!r}: use sqlite:///relative or sqlite:////abs"
            )
        try:
            lite = sqlite3.connect(f"file:{path}?mode={'rw' if write else 'ro'}", uri=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {url}: {exc}") from None
        try:
            yield lite
        finally:
            lite.close()
    else:
        raise InvalidValue(
            "database", url, f"{redact_url(url)!r} is not a postgresql:// or sqlite:/// URL"
        )


def _columns(cursor: Any, table: str) -> set[str]:
    try:
        cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")  # noqa: S608 - fixed table names
    except Exception as exc:  # any driver: the table is missing or unreadable
        raise StoreError(
            f"cannot read {table}: {exc}; is this django-celery-beat's database?"
        ) from None
    names = {d[0] for d in cursor.description}
    cursor.fetchall()
    return names


def _query(cursor: Any) -> str:
    have = _columns(cursor, TABLE)
    select = [f"t.{c}" if c in have else f"NULL AS {c}" for c in _TASK_COLUMNS]
    joins: list[str] = []
    for key, (table, alias, cols) in _JOINS.items():
        fk = f"{key}_id"
        if fk not in have:
            select.append(f"NULL AS {key}_row")
            select.extend(f"NULL AS {key}_{c}" for c in cols)
            continue
        table_cols = _columns(cursor, table)
        select.append(f"{alias}.id AS {key}_row")
        select.extend(
            f"{alias}.{c} AS {key}_{c}" if c in table_cols else f"NULL AS {key}_{c}" for c in cols
        )
        joins.append(f"LEFT JOIN {table} {alias} ON {alias}.id = t.{fk}")
    return f"SELECT {', '.join(select)} FROM {TABLE} t {' '.join(joins)} ORDER BY t.name"


def _rollback(conn: Any) -> None:
    rollback = getattr(conn, "rollback", None)
    if rollback is not None:
        try:
            rollback()
        except Exception:  # noqa: BLE001 - best effort after a failed probe
            pass


def read_django_celery_beat(
    conn_or_url: Any,
    *,
    known_tasks: Collection[str] | None = None,
    default_timezone: str = "UTC",
    naive_timezone: str = "UTC",
) -> list[SourceEntry]:
    """Every row of ``django_celery_beat_periodictask`` as a source entry, ordered by name.

    ``conn_or_url``: a URL (see :func:`connect`) or an open DB-API connection (read only).
    ``known_tasks``: when given, rows naming another task are reported, not imported.
    ``default_timezone``: for crontab rows without a timezone column (old versions).
    ``naive_timezone``: the zone of naive datetimes (SQLite stores UTC when ``USE_TZ``).
    Raises ``StoreError`` when the tables cannot be read; a bad row never raises."""
    if isinstance(conn_or_url, str):
        with connect(conn_or_url) as conn:
            return read_django_celery_beat(
                conn,
                known_tasks=known_tasks,
                default_timezone=default_timezone,
                naive_timezone=naive_timezone,
            )
    conn = conn_or_url
    cursor = conn.cursor()
    try:
        try:
            sql = _query(cursor)
        except StoreError:
            _rollback(conn)
            raise
        cursor.execute(sql)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        cursor.close()
    _rollback(conn)  # end the read transaction; we wrote nothing
    return [_entry(r, known_tasks, default_timezone, naive_timezone) for r in rows]


def read_row(
    row: dict[str, Any], *, default_timezone: str = "UTC", naive_timezone: str = "UTC"
) -> SourceEntry:
    """One row, as :func:`read_django_celery_beat`'s query returns it (the periodic task's
    columns, and ``<kind>_id`` / ``<kind>_row`` / ``<kind>_<column>`` of its schedule), read
    as the importer reads rows: what ``goatbeat export`` reads its own rows back with."""
    return _entry(row, None, default_timezone, naive_timezone)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text or None


def _entry(
    row: dict[str, Any], tasks: Collection[str] | None, default_tz: str, naive_tz: str
) -> SourceEntry:
    name = str(row["name"])
    task = str(row["task"] or "")
    enabled = bool(row["enabled"]) if row["enabled"] is not None else True

    def failed(reason: str) -> SourceEntry:
        return SourceEntry(
            name=name, source=Source.DJANGO_CELERY_BEAT, problem=reason, task=task, enabled=enabled
        )

    if not task.strip():
        return failed("the row has no task")
    if tasks is not None and task not in tasks:
        return failed(
            f"task {task!r} is not registered in the Celery app; check the name or make sure its "
            "module is imported"
        )
    notes: list[str] = []
    bugs: list[str] = []
    try:
        last_run_at = celery_instant(row["last_run_at"], "last_run_at", naive_tz)
        date_changed = celery_instant(row["date_changed"], "date_changed", naive_tz)
        start_at = celery_instant(row["start_time"], "start_time", naive_tz)
        expires_at = celery_instant(row["expires"], "expires", naive_tz)
        # What django-celery-beat's scheduler counts from: the last run; a row that never ran
        # counts from its last change, and with a start_time from 30 years before that, so
        # that it runs at start_time.
        anchor = last_run_at
        if anchor is None and date_changed is not None:
            anchor = date_changed - _THIRTY_YEARS if start_at is not None else date_changed
        enabled_row = enabled
        run_count = int(row["total_run_count"] or 0)
        trigger, celery_sched, celery_tz, anchor = _trigger(
            row,
            _Counting(
                anchor=anchor,
                ran=last_run_at is not None,
                start_at=start_at,
                pending=enabled_row and run_count == 0,
            ),
            default_tz,
            naive_tz,
            notes,
            bugs,
        )
        args = kombu_json.loads(_text(row["args"]), field="args", default=[])
        kwargs = kombu_json.loads(_text(row["kwargs"]), field="kwargs", default={})
        if not isinstance(args, list):
            raise InvalidValue("args", args, f"{args!r} is not a JSON list")
        if not isinstance(kwargs, dict):
            raise InvalidValue("kwargs", kwargs, f"{kwargs!r} is not a JSON object")
        headers = kombu_json.loads(_text(row["headers"]), field="headers", default={})
        if not isinstance(headers, dict):
            raise InvalidValue("headers", headers, f"{headers!r} is not a JSON object")
        headers["periodic_task_name"] = name  # django-celery-beat always sends it
        expire_seconds = row["expire_seconds"]
        if expires_at is not None:
            notes.append(
                f"expires={expires_at.isoformat()} is an absolute instant: imported as the "
                "schedule's end_at (nothing runs after it, as celery's expired messages would not)"
            )
        priority = row["priority"]
        routing = Routing(
            queue=_text(row["queue"]),
            exchange=_text(row["exchange"]),
            routing_key=_text(row["routing_key"]),
            priority=None if priority is None else int(priority),
            expires=None if not expire_seconds else float(expire_seconds),
            headers=kombu_json.encode(headers, field="headers"),
        )
        one_off = bool(row["one_off"])
        if row["clocked_row"] is not None and not one_off:
            notes.append("a clocked schedule runs once: imported as one_off")
            one_off = True
        if (
            one_off
            and enabled
            and row["clocked_row"] is None
            and (run_count > 0 or last_run_at is not None)
        ):
            # django-celery-beat disables a one-off interval, crontab or solar row at its
            # first check AFTER the run (one interval later), so a row that ran may still
            # say enabled: it is finished, and imported so.
            notes.append(
                f"a one-off that ran (total_run_count={run_count}, last_run_at "
                f"{'set' if last_run_at is not None else 'unset'}): django-celery-beat "
                "disables it at its next check; imported finished (disabled), it never runs "
                "again"
            )
            enabled = False
        end_at = expires_at
        if start_at is not None and end_at is not None and end_at < start_at:
            raise InvalidValue("expires", end_at, "expires is before start_time")
        schedule = Schedule(
            name=name,
            task=task,
            trigger=trigger,
            misfire_grace=celery_misfire_grace(trigger),
            args=kombu_json.encode(args, field="args"),
            kwargs=kombu_json.encode(kwargs, field="kwargs"),
            routing=routing,
            start_at=start_at,
            end_at=end_at,
            one_off=one_off,
            description=str(row["description"] or ""),
            source=Source.DJANGO_CELERY_BEAT,
            enabled=enabled,
            last_run_at=anchor,
            total_run_count=run_count,
        )
    except GoatbeatError as exc:
        return failed(str(exc))
    except Exception as exc:  # any other problem of this row stays this row's problem
        return failed(f"unreadable row: {describe_exception(exc)}")
    return SourceEntry(
        name=name,
        source=Source.DJANGO_CELERY_BEAT,
        schedule=schedule,
        notes=tuple(notes),
        celery_schedule=celery_sched,
        celery_tz=celery_tz,
        last_run_at=anchor,
        ran=last_run_at is not None,
        enabled=enabled,
        task=task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        routing=routing.to_dict(),
        bugs=tuple(bugs),
    )


_THIRTY_YEARS = timedelta(days=365 * 30)


@dataclass(frozen=True, slots=True)
class _Counting:
    """Where django-celery-beat counts a row from."""

    anchor: datetime | None  # its last run, or what it takes for one (see _entry)
    ran: bool  # last_run_at is set
    start_at: datetime | None
    pending: bool  # enabled and never counted a run: a one-off/clocked row still owed


@dataclass(frozen=True, slots=True)
class ClockedSchedule:
    """django-celery-beat's ``clocked`` as its scheduler runs it, for ``goatbeat diff``: due
    once ``clocked_time`` has passed, at the first check after it (so *at once* when it passed
    while no scheduler ran), unless the row already ran (``pending`` False)."""

    clocked_time: datetime
    pending: bool


def _trigger(
    row: dict[str, Any],
    counting: _Counting,
    default_tz: str,
    naive_tz: str,
    notes: list[str],
    bugs: list[str],
) -> tuple[Trigger, Any, str, datetime | None]:
    """(goatbeat trigger, the celery schedule django-celery-beat would use or None, zone,
    the last run to import: where the first goatbeat run counts from)."""
    anchor = counting.anchor
    kinds = [k for k in ("interval", "crontab", "solar", "clocked") if row[f"{k}_id"] is not None]
    if not kinds:
        raise InvalidValue(
            "schedule", None, "no interval, crontab, solar or clocked schedule is set"
        )
    if len(kinds) > 1:
        notes.append(
            f"several schedules are set ({', '.join(kinds)}); like django-celery-beat, "
            f"goatbeat uses the {kinds[0]}"
        )
    kind = kinds[0]
    if row[f"{kind}_row"] is None:
        raise InvalidValue(
            f"{kind}_id",
            row[f"{kind}_id"],
            f"{kind}_id {row[f'{kind}_id']} points to no row of {_JOINS[kind][0]} (deleted?)",
        )
    if kind == "interval":
        every, period = row["interval_every"], str(row["interval_period"] or "")
        if period not in _PERIODS:
            raise InvalidValue("period", period, f"{period!r} is not one of {sorted(_PERIODS)}")
        if every is None or int(every) < 1:
            raise InvalidValue("every", every, f"{every!r} must be a positive integer")
        delta = timedelta(**{period: int(every)})
        from celery.schedules import schedule as celery_schedule

        # With a start_time: django-celery-beat runs it at start_time and counts from there,
        # so the phase is start_time's (not the row's last change). goatbeat keeps it once
        # the row has run, too: celery counts each run from the last one, so its lateness and
        # its catch-up runs (a beat started after an instant passed, as at a rollback) move
        # it off the start_time the row declares; goatbeat's own catch-ups keep the phase
        # (docs/migration/differences.md), and so does a cutover.
        phase = counting.start_at if counting.start_at is not None else anchor
        return IntervalTrigger(delta, anchor=phase), celery_schedule(delta), "UTC", anchor
    if kind == "crontab":
        trigger, sched, zone = _crontab(row, default_tz, notes, bugs)
        return trigger, sched, zone, anchor
    if kind == "solar":
        from celery.schedules import solar

        event = str(row["solar_event"])
        lat = _decimal(row["solar_latitude"], "latitude")
        lon = _decimal(row["solar_longitude"], "longitude")
        try:
            sched = solar(event, lat, lon)
        except ValueError as exc:
            raise InvalidValue("solar", event, str(exc).strip()) from None
        return to_trigger(sched), sched, "UTC", anchor
    at = celery_instant(row["clocked_clocked_time"], "clocked_time", naive_tz)
    if at is None:
        raise InvalidValue("clocked_time", None, "the clocked schedule has no time")
    # django-celery-beat runs a clocked row once its time has passed, at its first check
    # (at once if the time passed while it was stopped), unless the row already ran.
    pending = counting.pending and (not counting.ran or anchor is None or anchor < at)
    if pending:
        if anchor is None or anchor >= at:
            anchor = at - _TICK  # never ran: owed at clocked_time, even if that has passed
    elif anchor is None or anchor < at:
        anchor = at  # it ran (or will never run): nothing owed
    return OnceTrigger(at), ClockedSchedule(clocked_time=at, pending=pending), "UTC", anchor


def _decimal(value: Any, field: str) -> float:
    try:
        return float(Decimal(str(value)))
    except ArithmeticError:
        raise InvalidValue(field, value, f"{value!r} is not a number") from None


def _crontab(
    row: dict[str, Any], default_tz: str, notes: list[str], bugs: list[str]
) -> tuple[Trigger, Any, str]:
    from celery.schedules import crontab

    zone = str(row["crontab_timezone"] or "").strip()
    if not zone:
        zone = default_tz
        notes.append(
            f"the crontab's timezone is empty: read as {zone!r} (the Celery app's zone, else "
            "UTC); set it on the row if another zone was meant"
        )
    get_zone(zone, "timezone")
    fields: dict[str, str] = {}
    empty: list[str] = []
    for key in ("minute", "hour", "day_of_week", "day_of_month", "month_of_year"):
        value = row[f"crontab_{key}"]
        text = "" if value is None else str(value).strip()
        if not text:
            empty.append(key)
        fields[key] = text or "*"
    if empty:
        notes.append(
            f"crontab field(s) {', '.join(empty)} are empty: read as '*' (every value). celery "
            "rejects an empty field, so django-celery-beat never ran this row; it WILL run "
            "after the cutover (fix the row or disable it if that is not wanted)"
        )
    celery_sched: Any
    try:
        celery_sched = crontab(**fields)
    except Exception as exc:  # celery's ParseException is no ValueError
        dow = fields["day_of_week"]
        weekdays = _weekdays_with_seven(dow)
        if weekdays is None:
            raise InvalidValue("crontab", _describe(fields), _celery_message(exc)) from None
        try:
            converted = crontab(**{**fields, "day_of_week": weekdays})
        except Exception as exc2:
            raise InvalidValue("crontab", _describe(fields), _celery_message(exc2)) from None
        # Keep the user's spelling for the other fields; only the weekdays change.
        converted._orig_day_of_week = ",".join(str(d) for d in sorted(weekdays))
        converted.tz = get_zone(zone)
        bugs.append("dow_7")
        notes.append(
            f"day_of_week={dow!r}: {CELERY_BUGS['dow_7']}; imported as Sunday, so it WILL run "
            "after the cutover (disable it if that is not wanted)"
        )
        return to_trigger(converted, timezone=zone), None, zone
    celery_sched.tz = get_zone(zone)  # what TzAwareCrontab does
    trigger = to_trigger(celery_sched, timezone=zone)
    # celery cannot load a row with an empty field: it never schedules it (diff says so).
    return trigger, (None if empty else celery_sched), zone


def _weekdays_with_seven(dow: str) -> set[int] | None:
    """The weekday set of a day_of_week field that only fails celery because of a 7."""
    if "7" not in dow:
        return None
    try:
        return set(parse_cron(f"0 0 * * {dow}").weekdays)
    except GoatbeatError:
        return None


def _describe(fields: dict[str, str]) -> str:
    return " ".join(
        fields[k] for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    )


def _celery_message(exc: Exception) -> str:
    return f"celery rejects it ({describe_exception(exc)})"


# -- handing goatbeat's runs back (rollback) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class HandBack:
    """One row :func:`hand_back` moves forward: django-celery-beat's last run and run count
    before, goatbeat's after."""

    name: str
    before: datetime | None
    after: datetime
    total_run_count: int


def hand_back(
    conn_or_url: Any,
    runs: dict[str, tuple[datetime, int]],
    *,
    naive_timezone: str = "UTC",
    dry_run: bool = False,
) -> list[HandBack]:
    """Write goatbeat's last runs into django-celery-beat's rows before rolling back, so its
    scheduler does not run again what goatbeat ran (its catch-up counts from ``last_run_at``,
    and a one-off row with ``total_run_count`` > 0 is disabled instead of run).

    ``runs``: name -> (goatbeat's last run, goatbeat's run count). Only rows whose own
    ``last_run_at`` is earlier (or unset) change: ``last_run_at`` becomes goatbeat's, and
    ``total_run_count`` the larger of the two. One transaction; returns what changed (what
    would change with ``dry_run``). Run it while django-celery-beat's beat is stopped.
    ``naive_timezone``: the zone of naive datetimes in the tables (SQLite with ``USE_TZ``:
    UTC). Raises ``StoreError`` when the tables cannot be read or written."""
    if isinstance(conn_or_url, str):
        with connect(conn_or_url, write=not dry_run) as conn:
            return hand_back(conn, runs, naive_timezone=naive_timezone, dry_run=dry_run)
    conn = conn_or_url
    marker = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    naive = isinstance(conn, sqlite3.Connection) or _is_sqlite(conn)
    # Django's connection commits each statement by itself: make it one transaction.
    django_autocommit = conn.get_autocommit() if hasattr(conn, "get_autocommit") else None
    if django_autocommit:
        conn.set_autocommit(False)
    try:
        return _hand_back(conn, runs, marker, naive, naive_timezone, dry_run)
    finally:
        if django_autocommit:
            conn.set_autocommit(True)


def _hand_back(
    conn: Any,
    runs: dict[str, tuple[datetime, int]],
    marker: str,
    naive: bool,
    naive_timezone: str,
    dry_run: bool,
) -> list[HandBack]:
    changed: list[HandBack] = []
    cursor = conn.cursor()
    try:
        cursor.execute(f"SELECT name, last_run_at, total_run_count FROM {TABLE}")  # noqa: S608
        rows = cursor.fetchall()
        for name, last_run_at, count in rows:
            if name not in runs:
                continue
            ours, our_count = runs[name]
            theirs = celery_instant(last_run_at, "last_run_at", naive_timezone)
            if theirs is not None and theirs >= ours:
                continue
            total = max(int(count or 0), our_count)
            changed.append(HandBack(str(name), theirs, ours, total))
            if dry_run:
                continue
            value: Any = ours
            if naive:
                value = ours.astimezone(get_zone(naive_timezone)).replace(tzinfo=None)
                value = value.isoformat(sep=" ")
            cursor.execute(
                f"UPDATE {TABLE} SET last_run_at = {marker}, total_run_count = {marker} "  # noqa: S608
                f"WHERE name = {marker}",
                (value, total, name),
            )
        if changed and not dry_run:
            _bump_changes(cursor, marker, naive, naive_timezone)
    except GoatbeatError:
        _rollback(conn)
        raise
    except Exception as exc:  # any driver error: nothing was written
        _rollback(conn)
        raise StoreError(
            f"cannot write django-celery-beat's last runs: {describe_exception(exc)}"
        ) from None
    finally:
        cursor.close()
    if dry_run:
        _rollback(conn)
    else:
        conn.commit()
    return changed


CHANGES_TABLE = "django_celery_beat_periodictasks"
"""django-celery-beat's change marker: its DatabaseScheduler reloads every row when
``last_update`` moves (what ``PeriodicTasks.update_changed()`` does after an admin edit)."""


def _bump_changes(cursor: Any, marker: str, naive: bool, naive_timezone: str) -> None:
    """Move ``last_update`` to now, so a DatabaseScheduler started (or, wrongly, still running)
    reads the rows as written, not its own copy of them."""
    from datetime import UTC

    now: Any = datetime.now(UTC)
    if naive:
        now = now.astimezone(get_zone(naive_timezone)).replace(tzinfo=None).isoformat(sep=" ")
    cursor.execute(
        f"UPDATE {CHANGES_TABLE} SET last_update = {marker} WHERE ident = 1",  # noqa: S608
        (now,),
    )
    if cursor.rowcount == 0:
        cursor.execute(
            f"INSERT INTO {CHANGES_TABLE} (ident, last_update) VALUES (1, {marker})",  # noqa: S608
            (now,),
        )


def _is_sqlite(conn: Any) -> bool:
    vendor = getattr(conn, "vendor", None)  # Django's connection
    return vendor == "sqlite"
