"""celery-redbeat's Redis keys, written by redbeat's own ``RedBeatSchedulerEntry.save()`` into
the suite's Redis, imported (#27 item 9): the same phase, gap, conflict, enabled-flag and diff
rules as the other importers, and the refusals."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")
pytest.importorskip("redbeat")

import redis  # noqa: E402
from celery import Celery  # noqa: E402
from celery.schedules import crontab, schedule, solar  # noqa: E402
from redbeat import RedBeatSchedulerEntry  # noqa: E402
from redbeat.schedules import rrule  # noqa: E402

from goatbeat.cli import cli  # noqa: E402
from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.core.cron import CronTrigger  # noqa: E402
from goatbeat.core.triggers import IntervalTrigger  # noqa: E402
from goatbeat.diff import compute_diff  # noqa: E402
from goatbeat.importers import import_entries  # noqa: E402
from goatbeat.importers.redbeat import config_of, read_redbeat  # noqa: E402
from goatbeat.stores import MemoryStore, open_store  # noqa: E402

pytestmark = pytest.mark.redis

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
RAN = datetime(2026, 12, 2, 9, 59, 30, 3021, tzinfo=PARIS)  # as redbeat stamps it: app.now()


class WeekdaysOnly(schedule):
    """Every 10 minutes, Monday to Friday only (is_due overridden)."""

    def is_due(self, last_run_at: datetime) -> Any:
        if self.now().weekday() >= 5:
            return super().is_due(self.now())._replace(is_due=False)
        return super().is_due(last_run_at)


def _noop(*args: object, **kwargs: object) -> None:
    return None


@pytest.fixture
def app(redis_url: str) -> Iterator[Celery]:
    app = Celery("redbeat_tests", set_as_current=False)
    app.conf.timezone = "Europe/Paris"
    app.conf.broker_url = "memory://"
    app.conf.redbeat_redis_url = redis_url
    app.conf.redbeat_key_prefix = "rb:"
    app.conf.beat_schedule = {
        "weekdays-10m": {"task": "rb.ping", "schedule": WeekdaysOnly(timedelta(minutes=10))},
    }
    for name in ("rb.ping", "rb.daily"):
        app.task(name=name)(_noop)
    yield app
    client = getattr(app, "redbeat_redis", None)
    if client is not None:
        client.close()


def save(app: Celery, name: str, sched: Any, **fields: Any) -> RedBeatSchedulerEntry:
    entry = RedBeatSchedulerEntry(name, fields.pop("task", "rb.ping"), sched, app=app, **fields)
    return entry.save()


def populate(app: Celery) -> None:
    save(
        app,
        "every-30s",
        schedule(timedelta(seconds=30)),
        args=[1, "x"],
        kwargs={"full": True},
        options={"queue": "reports", "priority": 5, "expires": 600},
        last_run_at=RAN,
    )
    save(app, "daily-9", crontab(minute=0, hour=9), task="rb.daily", last_run_at=RAN)
    save(app, "off-5m", schedule(timedelta(minutes=5)), enabled=False, last_run_at=RAN)
    save(app, "weekdays-10m", WeekdaysOnly(timedelta(minutes=10)), last_run_at=RAN)


def read(app: Celery, **kw: Any) -> Any:
    return read_redbeat(
        app.conf.redbeat_redis_url,
        config=config_of(app),
        timezone="Europe/Paris",
        known_tasks=set(app.tasks),
        beat_schedule=app.conf.beat_schedule,
        **kw,
    )


def test_redbeats_entries_import_with_their_meaning_phase_and_flag(app: Celery) -> None:
    populate(app)
    result = read(app)
    entries = {e.name: e for e in result.entries}
    assert set(entries) == {"every-30s", "daily-9", "off-5m", "weekdays-10m"}
    store = MemoryStore(clock=FakeClock(NOW))
    report = import_entries(store, result.entries)
    assert sorted(report.created) == ["daily-9", "every-30s", "off-5m"]

    every = store.get("every-30s")
    ran = RAN.astimezone(UTC)
    # meta.last_run_at, to the microsecond: the phase (celery counts from its last run) and
    # goatbeat's last run, so the next run is the one redbeat would make next.
    assert every.trigger == IntervalTrigger(timedelta(seconds=30), anchor=ran)
    assert every.last_run_at == ran
    assert every.args == (1, "x") and every.kwargs == {"full": True}
    assert (every.routing.queue, every.routing.priority, every.routing.expires) == (
        "reports",
        5,
        600.0,
    )
    # A crontab is read in the Celery app's zone (redbeat evaluates it there).
    assert store.get("daily-9").trigger == CronTrigger("0 9 * * *", timezone="Europe/Paris")
    assert store.get("daily-9").task == "rb.daily"
    # Disabled in redbeat's definition: disabled in goatbeat.
    assert store.get("off-5m").enabled is False and entries["off-5m"].enabled is False


def test_a_custom_schedule_class_rrule_and_unknown_types_are_refused(app: Celery) -> None:
    populate(app)
    save(app, "rrule-5m", rrule("MINUTELY", interval=5), last_run_at=RAN)
    # redbeat cannot store a solar schedule at all: its encoder raises.
    with pytest.raises(TypeError, match="solar"):
        save(app, "sunset", solar("sunset", 48.85, 2.35))
    # A definition of a type redbeat's decoder does not know (another tool wrote it).
    client = redis.Redis.from_url(app.conf.redbeat_redis_url)
    definition = {"name": "odd", "task": "rb.ping", "schedule": {"__type__": "solar", "event": "x"}}
    client.hset("rb:odd", "definition", json.dumps(definition))
    client.zadd("rb::schedule", {"rb:odd": 0})
    client.close()

    failed = {e.name: e.problem for e in read(app).entries if e.problem}
    assert set(failed) == {"weekdays-10m", "rrule-5m", "odd"}
    # The custom class is named (it overrides is_due), and so is what redbeat made of it.
    assert "WeekdaysOnly" in failed["weekdays-10m"] and "is_due" in failed["weekdays-10m"]
    assert "plain schedule" in failed["weekdays-10m"]
    assert "rrule" in failed["rrule-5m"] and "no goatbeat equivalent" in failed["rrule-5m"]
    assert "'solar'" in failed["odd"]
    store = MemoryStore(clock=FakeClock(NOW))
    report = import_entries(store, read(app).entries)
    assert {n for n, _ in report.failed} == set(failed)
    assert {s.name for s in store.list_schedules()}.isdisjoint(failed)


def test_a_late_redbeat_run_keeps_goatbeats_grid_and_a_disable_is_followed(app: Celery) -> None:
    populate(app)
    store = MemoryStore(clock=FakeClock(NOW))
    import_entries(store, read(app).entries)
    ran = RAN.astimezone(UTC)
    # The rehearsal: redbeat keeps running, each run dated a little late (it stamps app.now()
    # when it sends). The next import keeps goatbeat's grid, and follows the later last run.
    entry = RedBeatSchedulerEntry.from_key("rb:every-30s", app=app)
    entry.reschedule(last_run_at=RAN + timedelta(seconds=60, microseconds=4100))
    # ...and redbeat's entry is disabled since the last import (an operator, in redbeat).
    off = RedBeatSchedulerEntry.from_key("rb:daily-9", app=app)
    off.enabled = False
    off.save()

    report = import_entries(store, read(app).entries)
    assert report.refreshed == ["every-30s"]
    assert store.get("every-30s").trigger == IntervalTrigger(timedelta(seconds=30), anchor=ran)
    assert store.get("every-30s").next_run_at == ran + timedelta(seconds=90)
    assert report.toggled == [("daily-9", False)]
    assert store.get("daily-9").enabled is False


def test_what_fell_due_while_redbeat_was_stopped_runs_once_at_the_cutover(app: Celery) -> None:
    from tests.conformance.helpers import claim_all, lease

    populate(app)
    ran = RAN.astimezone(UTC)
    cutover = ran + timedelta(seconds=95)  # redbeat stopped after RAN: 3 instants passed
    store = MemoryStore(clock=FakeClock(cutover))
    import_entries(store, read(app).entries)
    assert store.get("every-30s").next_run_at == ran + timedelta(seconds=30)  # owed
    claimed = [o for o in claim_all(store, lease(store), cutover) if o.schedule_name == "every-30s"]
    # One run for the gap (as redbeat runs once after a stop), the others counted as missed;
    # the phase stays redbeat's: the next instant is RAN + 120 s.
    assert [o.scheduled_at for o in claimed] == [ran + timedelta(seconds=90)]
    after = store.get("every-30s")
    assert after.missed_count == 2
    assert after.next_run_at == ran + timedelta(seconds=120)


def test_an_operator_edit_in_goatbeat_is_a_conflict(app: Celery) -> None:
    populate(app)
    store = MemoryStore(clock=FakeClock(NOW))
    import_entries(store, read(app).entries)
    edited = store.get("every-30s").evolve(trigger=IntervalTrigger(timedelta(seconds=45)))
    store.update(edited)
    report = import_entries(store, read(app).entries)
    assert [n for n, _ in report.conflicts] == ["every-30s"]
    assert store.get("every-30s").trigger == IntervalTrigger(timedelta(seconds=45))


def test_diff_against_an_exact_import_is_equal(app: Celery) -> None:
    populate(app)
    store = MemoryStore(clock=FakeClock(NOW))
    entries = read(app).entries
    import_entries(store, entries)
    report = compute_diff(
        entries,
        store.list_schedules(),
        start=NOW,
        horizon=timedelta(days=30),
        accept_refused=["weekdays-10m"],
        now=NOW,
    )
    assert report.equal, [s.to_dict() for s in report.schedules if s.differs()]
    assert report.accepted_refused == ["weekdays-10m"]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


def test_the_command_imports_reports_and_diff_exits_0(app: Celery, db: str) -> None:
    url = app.conf.redbeat_redis_url
    save(app, "every-30s", schedule(timedelta(seconds=30)), last_run_at=RAN)
    save(app, "daily-9", crontab(minute=0, hour=9), last_run_at=RAN)
    save(app, "off-5m", schedule(timedelta(minutes=5)), enabled=False, last_run_at=RAN)
    args = ("--redis", url, "--key-prefix", "rb:", "--timezone", "Europe/Paris")
    code, out = run("import", "redbeat", *args, "--database", db)
    assert code == 0, out
    assert "read: 3 entries in redbeat's rb::schedule" in out
    for name in ("every-30s", "daily-9", "off-5m"):
        assert f"create  {name}" in out
    code, out = run("import", "redbeat", *args, "--database", db)
    assert code == 0 and "summary: 0 created, 0 updated, 0 refreshed, 3 unchanged" in out, out
    source = ("--from-redbeat", url, "--redbeat-key-prefix", "rb:")
    code, out = run("diff", *source, "--redbeat-timezone", "Europe/Paris", "--database", db)
    assert code == 0, out
    assert "EQUAL" in out
    # Read in UTC (no app, no zone), the crontab stamped in Paris time is refused, by name.
    code, out = run("diff", *source, "--database", db)
    assert code == 1 and "daily-9" in out and "Europe/Paris" in out, out
    store = open_store(db)
    try:
        assert store.get("every-30s").last_run_at == RAN.astimezone(UTC)
    finally:
        store.close()


def test_the_command_with_the_app_fails_the_refused_ones_and_exits_1(app: Celery, db: str) -> None:
    populate(app)
    module = type(sys)("redbeat_test_app")
    module.app = app  # type: ignore[attr-defined]
    sys.modules["redbeat_test_app"] = module
    try:
        code, out = run("import", "redbeat", "--app", "redbeat_test_app:app", "--database", db)
        diff_code, diff_out = run(
            "diff", "--from-redbeat", app.conf.redbeat_redis_url, "--from-app",
            "redbeat_test_app:app", "--database", db, "--accept-refused", "weekdays-10m",
        )  # fmt: skip
    finally:
        del sys.modules["redbeat_test_app"]
    # The app gives redbeat's Redis, its prefix (rb:), its zone and its beat_schedule.
    assert code == 1, out
    assert "FAILED  weekdays-10m: " in out and "WeekdaysOnly" in out
    assert "create  daily-9" in out and "create  every-30s" in out
    assert "1 beat_schedule entries are also redbeat keys" in out
    assert diff_code == 0, diff_out
    assert "accepted refused: weekdays-10m" in diff_out


def test_a_held_lock_is_reported(app: Celery, db: str) -> None:
    save(app, "every-30s", schedule(timedelta(seconds=30)), last_run_at=RAN)
    client = redis.Redis.from_url(app.conf.redbeat_redis_url)
    client.set("rb::lock", "token", px=1_500_000)  # redbeat's default: 25 minutes
    client.close()
    code, out = run("import", "redbeat", "--redis", app.conf.redbeat_redis_url, "--key-prefix",
                    "rb:", "--database", db, "--dry-run")  # fmt: skip
    assert code == 0, out
    assert "read: the redbeat lock rb::lock is held (1500 s left)" in out
    assert "stop EVERY redbeat beat" in out


def test_without_redbeat_installed_it_refuses_in_one_line(
    app: Celery, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "redbeat.decoder", None)
    code, out = run("import", "redbeat", "--redis", app.conf.redbeat_redis_url, "--database", db)
    assert code == 2
    assert out.count("\n") == 1 and "celery-redbeat is not installed" in out, out
    code, out = run("import", "redbeat", "--redis", "http://nope", "--database", db)
    assert code == 2 and out.count("\n") == 1, out


def test_export_last_runs_hands_goatbeats_runs_back_to_redbeat(app: Celery, db: str) -> None:
    from tests.conformance.helpers import claim_all, lease

    url = app.conf.redbeat_redis_url
    save(app, "every-30s", schedule(timedelta(seconds=30)), last_run_at=RAN)
    save(app, "daily-9", crontab(minute=0, hour=9), last_run_at=RAN)
    args = ("--redis", url, "--key-prefix", "rb:", "--timezone", "Europe/Paris")
    code, out = run("import", "redbeat", *args, "--database", db)
    assert code == 0, out
    ran = RAN.astimezone(UTC)
    store = open_store(db)
    try:
        claim_all(store, lease(store), ran + timedelta(seconds=65))
        ours = store.get("every-30s")
    finally:
        store.close()
    assert ours.last_run_at == ran + timedelta(seconds=60)
    assert ours.total_run_count >= 1

    export = ("export_last_runs", "--to-redbeat", url, "--redbeat-key-prefix", "rb:")
    zone = ("--redbeat-timezone", "Europe/Paris")
    code, out = run(*export, *zone, "--database", db, "--dry-run")
    assert code == 0 and "would set  every-30s: last_run_at " in out, out
    assert RedBeatSchedulerEntry.from_key("rb:every-30s", app=app).last_run_at == RAN
    code, out = run(*export, *zone, "--database", db)
    assert code == 0, out
    assert "check: every redbeat beat must be stopped" in out
    assert "set  every-30s: last_run_at 2026-12-02T09:00:30.003021Z (was 2026-12-02T08:59:30" in out
    assert "daily-9" not in out.split("summary")[0]  # goatbeat never ran it: left as it was
    # redbeat reads it back as its own: its next run is one interval after goatbeat's last.
    entry = RedBeatSchedulerEntry.from_key("rb:every-30s", app=app)
    assert entry.last_run_at == ours.last_run_at
    assert entry.last_run_at.tzinfo == PARIS  # stamped as redbeat stamps app.now()
    assert entry.total_run_count == ours.total_run_count  # redbeat's 0, goatbeat's runs
    last = ours.last_run_at
    entry.schedule.nowfun = lambda: last + timedelta(seconds=29)
    assert not entry.is_due().is_due  # not again before one interval after goatbeat's run
    entry.schedule.nowfun = lambda: last + timedelta(seconds=30)
    assert entry.is_due().is_due
    # The re-cutover import then changes nothing: the later last run is goatbeat's own.
    code, out = run("import", "redbeat", *args, "--database", db)
    assert code == 0 and "0 created, 0 updated, 0 refreshed" in out, out


def test_redbeat_and_django_celery_beat_at_once_is_a_usage_error(db: str) -> None:
    code, out = run(
        "import_celery_beat", "--from-redbeat", "redis://localhost:1/0",
        "--from-django-celery-beat", "sqlite:///x.sqlite3", "--database", db,
    )  # fmt: skip
    assert code == 2 and out.count("\n") == 1 and "--from-redbeat or --from-django" in out, out
