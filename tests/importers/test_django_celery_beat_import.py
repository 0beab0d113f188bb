"""Importing django-celery-beat's tables with SQL (never importing django_celery_beat)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("celery")

from celery.schedules import crontab  # noqa: E402

from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.core.model import Source  # noqa: E402
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger  # noqa: E402
from goatbeat.importers import import_entries, read_django_celery_beat  # noqa: E402
from goatbeat.stores import MemoryStore  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
LAST = "2026-06-10T08:00:00+00:00"

ROWS = [
    {
        "name": "every-5m",
        "task": "ping",
        "interval": {"every": 5, "period": "minutes"},
        "last_run_at": "2026-06-10T11:58:30+00:00",
        "queue": "fast",
        "priority": 3,
        "expire_seconds": 120,
        "headers": '{"x-tenant": "acme"}',
        "args": '[1, {"__type__": "datetime", "__value__": "2026-01-02T03:04:05+00:00"}]',
        "kwargs": '{"d": {"__type__": "decimal", "__value__": "1.50"}}',
        "description": "five minutes",
    },
    {
        "name": "paris-morning",
        "task": "reports.daily",
        "crontab": {"minute": "0", "hour": "9", "timezone": "Europe/Paris"},
        "last_run_at": LAST,
    },
    {
        "name": "sunset",
        "task": "ping",
        "solar": {"event": "sunset", "latitude": "48.85", "longitude": "2.35"},
    },
    {
        "name": "one-shot",
        "task": "ping",
        "clocked": {"clocked_time": "2026-07-01T10:00:00+00:00"},
        "one_off": True,
    },
    {
        "name": "disabled",
        "task": "ping",
        "interval": {"every": 1, "period": "hours"},
        "enabled": False,
    },
    {
        "name": "sunday-seven",
        "task": "ping",
        "crontab": {"minute": "0", "hour": "10", "day_of_week": "7", "timezone": "UTC"},
    },
    {"name": "bad-crontab", "task": "ping", "crontab": {"minute": "61", "timezone": "UTC"}},
    {
        "name": "bad-json",
        "task": "ping",
        "interval": {"every": 1, "period": "hours"},
        "args": "[1, 2",
    },
    {"name": "unknown-task", "task": "no.such.task", "interval": {"every": 1, "period": "hours"}},
    {"name": "dangling", "task": "ping", "crontab": {"minute": "5", "timezone": "UTC"}},
    {"name": "no-schedule", "task": "ping", "interval": {"every": 2, "period": "hours"}},
    {
        "name": "sub-second",
        "task": "ping",
        "interval": {"every": 500_000, "period": "microseconds"},
    },
]


def _raw_sql(url: str) -> list[str]:
    delete = (
        "DELETE FROM django_celery_beat_crontabschedule WHERE id = "
        "(SELECT crontab_id FROM django_celery_beat_periodictask WHERE name = 'dangling')"
    )
    no_schedule = (
        "UPDATE django_celery_beat_periodictask SET interval_id = NULL WHERE name = 'no-schedule'"
    )
    if url.startswith("sqlite"):
        return ["PRAGMA foreign_keys = OFF", delete, no_schedule]
    return [
        "SET session_replication_role = replica",
        delete,
        no_schedule,
        "SET session_replication_role = DEFAULT",
    ]


@pytest.fixture
def loaded(dcb_url: str, dcb_tables: Callable[..., None]) -> str:
    dcb_tables(dcb_url, ROWS, _raw_sql(dcb_url))
    return dcb_url


def test_every_bad_row_is_named_with_its_reason_and_the_rest_import(loaded: str) -> None:
    known = {"ping", "reports.daily"}
    entries = read_django_celery_beat(loaded, known_tasks=known)
    store = MemoryStore(clock=FakeClock(NOW))
    report = import_entries(store, entries)
    failed = dict(report.failed)
    assert set(failed) == {
        "bad-crontab",
        "bad-json",
        "unknown-task",
        "dangling",
        "no-schedule",
        "sub-second",
    }
    assert "(0.5 s) is shorter than 1 s" in failed["sub-second"]
    assert "no interval, crontab, solar or clocked" in failed["no-schedule"]
    assert "61" in failed["bad-crontab"]
    assert "args" in failed["bad-json"] and "JSON" in failed["bad-json"]
    assert "no.such.task" in failed["unknown-task"]
    assert "crontab_id" in failed["dangling"]
    names = {s.name for s in store.list_schedules(source=Source.DJANGO_CELERY_BEAT)}
    assert names == {"every-5m", "paris-morning", "sunset", "one-shot", "disabled", "sunday-seven"}
    notes = dict(report.notes)
    assert "day_of_week" in notes["sunday-seven"] and "Sunday" in notes["sunday-seven"]


def test_rows_keep_routing_args_and_meaning(loaded: str) -> None:
    entries = {e.name: e for e in read_django_celery_beat(loaded)}
    five = entries["every-5m"].schedule
    assert five is not None
    assert five.trigger == IntervalTrigger(
        timedelta(minutes=5), anchor=datetime(2026, 6, 10, 11, 58, 30, tzinfo=UTC)
    )
    assert (five.routing.queue, five.routing.priority, five.routing.expires) == ("fast", 3, 120.0)
    assert five.routing.headers == {"x-tenant": "acme", "periodic_task_name": "every-5m"}
    assert five.args[1] == {"__type__": "datetime", "__value__": "2026-01-02T03:04:05+00:00"}
    assert five.kwargs == {"d": {"__type__": "decimal", "__value__": "1.50"}}
    assert five.description == "five minutes"
    paris = entries["paris-morning"].schedule
    assert paris is not None and paris.trigger == CronTrigger("0 9 * * *", timezone="Europe/Paris")
    shot = entries["one-shot"].schedule
    assert shot is not None and shot.one_off
    assert shot.trigger == OnceTrigger(datetime(2026, 7, 1, 10, tzinfo=UTC))
    assert entries["disabled"].schedule is not None and not entries["disabled"].schedule.enabled
    sunday = entries["sunday-seven"].schedule
    assert sunday is not None and sunday.trigger == CronTrigger("0 10 * * 0", timezone="UTC")
    assert entries["sunday-seven"].celery_schedule is None  # celery drops it: diff says so


def test_first_goatbeat_run_is_the_one_celery_would_make_next(loaded: str) -> None:
    store = MemoryStore(clock=FakeClock(NOW))
    import_entries(store, read_django_celery_beat(loaded))
    # interval: celery runs last_run_at + every
    assert store.get("every-5m").next_run_at == datetime(2026, 6, 10, 12, 3, 30, tzinfo=UTC)
    # crontab: celery's own next run after its last run, in the row's zone
    c = crontab(minute="0", hour="9")
    c.tz = ZoneInfo("Europe/Paris")
    last = datetime.fromisoformat(LAST).astimezone(ZoneInfo("Europe/Paris"))
    c.nowfun = lambda: last
    celery_next = last.astimezone(UTC) + c.remaining_estimate(last)
    assert store.get("paris-morning").next_run_at == celery_next
    assert store.get("paris-morning").last_run_at == datetime.fromisoformat(LAST)


def test_dry_run_writes_nothing_and_rerun_is_idempotent(loaded: str, tmp_path: object) -> None:
    from goatbeat.stores import open_store

    target = open_store(f"sqlite:///{tmp_path}/gb.sqlite3", clock=FakeClock(NOW))  # type: ignore[call-arg]
    try:
        target.migrate()
        entries = read_django_celery_beat(loaded)
        dry = import_entries(target, entries, dry_run=True)
        assert len(dry.created) == 7  # unknown-task too: no task list was given
        assert target.list_schedules() == []
        first = import_entries(target, entries)
        assert sorted(first.created) == sorted(dry.created)
        state = {s.name: (s.version, s.next_run_at) for s in target.list_schedules()}
        second = import_entries(target, read_django_celery_beat(loaded))
        assert second.created == [] and second.updated == [] and second.refreshed == []
        assert sorted(second.unchanged) == sorted(state)
        assert {s.name: (s.version, s.next_run_at) for s in target.list_schedules()} == state
    finally:
        target.close()


def test_missing_tables_are_an_error_not_an_empty_import(tmp_path: object) -> None:
    import sqlite3

    from goatbeat.core.errors import StoreError

    path = f"{tmp_path}/empty.sqlite3"
    sqlite3.connect(path).close()
    with pytest.raises(StoreError, match="django_celery_beat_periodictask"):
        read_django_celery_beat(f"sqlite:///{path}")
