"""Importing a Celery app's beat_schedule: good entries land, bad ones are named with why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("celery")

from goatbeat.compat import CeleryCrontabTrigger  # noqa: E402
from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.core.model import Source  # noqa: E402
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, SolarTrigger  # noqa: E402
from goatbeat.importers import import_entries, kombu_json, read_app, read_beat_schedule  # noqa: E402
from goatbeat.stores import MemoryStore  # noqa: E402
from tests.importers.celery_app import app  # noqa: E402

BAD = {"bad-unknown-task", "bad-string-schedule", "bad-option", "bad-args", "bad-subsecond"}


def test_each_bad_entry_is_reported_with_name_and_reason_and_the_rest_import() -> None:
    store = MemoryStore(clock=FakeClock(datetime(2026, 6, 1, tzinfo=UTC)))
    report = import_entries(store, read_app(app))
    failed = dict(report.failed)
    assert set(failed) == BAD
    assert "no.such.task" in failed["bad-unknown-task"]
    assert "'*/5 * * * *'" in failed["bad-string-schedule"]
    assert "countdown" in failed["bad-option"]
    assert "args" in failed["bad-args"]
    assert "shorter than 1 s" in failed["bad-subsecond"]
    names = {s.name for s in store.list_schedules()}
    assert {"daily-report", "ping-5m", "ping-30s", "sunset", "friday-13th"} <= names
    # Celery ANDs the day fields: the stored trigger fires on Fridays that are the 13th only.
    friday = store.get("friday-13th")
    assert friday.next_run_at is not None
    local = friday.next_run_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.day, local.weekday(), local.hour) == (13, 4, 0)
    assert names.isdisjoint(BAD)


def test_entries_keep_celerys_meaning_and_routing() -> None:
    entries = {e.name: e for e in read_app(app)}
    daily = entries["daily-report"].schedule
    assert daily is not None
    assert daily.trigger == CronTrigger("0 9 * * *", timezone="Europe/Paris")
    assert daily.args == (1, "x") and daily.kwargs == {"full": True}
    assert (daily.routing.queue, daily.routing.priority, daily.routing.expires) == (
        "reports",
        5,
        600.0,
    )
    assert daily.source is Source.CELERY
    assert entries["ping-5m"].schedule is not None
    assert entries["ping-5m"].schedule.trigger == IntervalTrigger(timedelta(minutes=5))
    assert isinstance(
        entries["sunset"].schedule and entries["sunset"].schedule.trigger, SolarTrigger
    )
    friday = entries["friday-13th"].schedule
    assert friday is not None and isinstance(friday.trigger, CeleryCrontabTrigger)


def test_rerunning_the_import_changes_nothing() -> None:
    store = MemoryStore(clock=FakeClock(datetime(2026, 6, 1, tzinfo=UTC)))
    import_entries(store, read_app(app))
    before = {s.name: (s.version, s.next_run_at) for s in store.list_schedules()}
    again = import_entries(store, read_app(app))
    assert again.created == [] and again.updated == []
    assert {s.name: (s.version, s.next_run_at) for s in store.list_schedules()} == before


def test_dry_run_writes_nothing_but_says_what_it_would_do() -> None:
    store = MemoryStore()
    report = import_entries(store, read_app(app), dry_run=True)
    assert "daily-report" in report.created
    assert store.list_schedules() == []
    assert "dry run" in report.summary()


def test_python_values_in_args_travel_as_kombu_json() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    entries = read_beat_schedule(
        {
            "typed": {
                "task": "ping",
                "schedule": 60,
                "args": [when, Decimal("1.5"), UUID(int=7), b"raw"],
            }
        }
    )
    sched = entries[0].schedule
    assert sched is not None
    assert sched.args[0] == {"__type__": "datetime", "__value__": when.isoformat()}
    assert kombu_json.decode(list(sched.args)) == [when, Decimal("1.5"), UUID(int=7), b"raw"]
    # the stored form is exactly what kombu itself would send
    from kombu.utils.json import dumps, loads

    assert loads(dumps(list(sched.args))) == [when, Decimal("1.5"), UUID(int=7), b"raw"]


def test_unserialisable_args_are_reported() -> None:
    entries = read_beat_schedule({"x": {"task": "ping", "schedule": 60, "args": [object()]}})
    assert entries[0].schedule is None and "json serializer" in (entries[0].problem or "")


def test_short_interval_catches_up_once_like_celery_after_an_outage() -> None:
    from goatbeat.core.misfire import plan

    (entry,) = read_beat_schedule({"fast": {"task": "ping", "schedule": 3}})
    sched = entry.schedule
    assert sched is not None
    now = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
    # beat was down for 40 s: celery runs the entry once when it comes back
    due = sched.evolve(next_run_at=now - timedelta(seconds=40))
    assert len(plan(due, now).run_at) == 1
