"""The drop-in ``celery beat -S goatbeat.compat:Scheduler``: interface and replica safety."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("celery")

from celery import Celery  # noqa: E402
from celery.schedules import crontab  # noqa: E402

import goatbeat.compat  # noqa: E402
from goatbeat.compat.beat import Scheduler  # noqa: E402
from goatbeat.core.model import ExecutionStatus, Source  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402


def make_app(database: str, broker: str = "memory://", **beat: object) -> Celery:
    app = Celery("compat_tests", set_as_current=False)
    app.conf.broker_url = broker
    app.conf.timezone = "Europe/Paris"
    app.conf.goatbeat_database = database
    app.conf.result_expires = None
    app.conf.beat_schedule = beat or {
        "every-second": {"task": "ping", "schedule": 1.0},
        "morning": {"task": "report", "schedule": crontab(minute=0, hour=9), "args": [1]},
        "custom": {"task": "ping", "schedule": "not a schedule"},
    }
    return app


def test_package_exposes_the_scheduler_for_dash_s() -> None:
    assert goatbeat.compat.Scheduler is Scheduler


def test_lazy_construction_touches_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.sqlite3"
    s = Scheduler(app=make_app(f"sqlite:///{db}"), lazy=True)
    assert not db.exists()
    s.close()
    s.close()
    assert not db.exists()


def test_setup_publishes_the_beat_schedule_and_reports_bad_entries(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    s = Scheduler(app=make_app(url))
    try:
        assert dict(s.problems).keys() == {"custom"}
        store = open_store(url)
        try:
            names = {x.name for x in store.list_schedules(source=Source.CELERY)}
        finally:
            store.close()
        assert names == {"every-second", "morning"}
    finally:
        s.close()
        s.close()  # idempotent


def test_tick_returns_seconds_within_max_interval(tmp_path: Path) -> None:
    s = Scheduler(
        app=make_app(
            f"sqlite:///{tmp_path / 'gb.sqlite3'}",
            hourly={"task": "ping", "schedule": crontab(minute=0)},
        ),
        max_interval=7,
    )
    try:
        first = s.tick()
        second = s.tick()
        assert isinstance(first, float) and isinstance(second, float)
        assert 0 <= first <= 7 and 0 <= second <= 7
    finally:
        s.close()


def test_goatbeat_settings_come_from_celery_configuration(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'gb.sqlite3'}")
    app.conf.goatbeat_lease_ttl = "20s"
    app.conf.goatbeat_lease_renew_interval = "5s"
    app.conf.goatbeat_claim_ahead = "100ms"
    app.conf.goatbeat_scheduler_id = "beat-eu-1"
    s = Scheduler(app=app)
    try:
        settings = s._gb_scheduler.settings
        assert settings.lease_ttl == timedelta(seconds=20)
        assert settings.lease_renew_interval == timedelta(seconds=5)
        assert settings.claim_ahead == timedelta(milliseconds=100)
        assert settings.scheduler_id == "beat-eu-1"
    finally:
        s.close()


def test_a_bad_goatbeat_setting_stops_beat_naming_it(tmp_path: Path) -> None:
    from goatbeat.compat.beat import BeatRefused

    app = make_app(f"sqlite:///{tmp_path / 'gb.sqlite3'}")
    app.conf.goatbeat_claim_ahead = "10s"
    with pytest.raises(BeatRefused, match="claim_ahead: '10s' is longer than 5s"):
        Scheduler(app=app)


def test_removed_entries_are_disabled_on_next_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    Scheduler(
        app=make_app(url, a={"task": "ping", "schedule": 60}, b={"task": "ping", "schedule": 60})
    ).close()
    Scheduler(app=make_app(url, a={"task": "ping", "schedule": 60})).close()
    store = open_store(url)
    try:
        assert store.get("a").enabled and not store.get("b").enabled
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.redis
def test_two_replicas_on_one_postgres_send_each_occurrence_once(
    pg_dsn: str, redis_url: str
) -> None:
    import redis

    beat = {"every-second": {"task": "ping", "schedule": 1.0, "options": {"queue": "replicas"}}}
    apps = [make_app(pg_dsn, redis_url, **beat) for _ in range(2)]
    for i, app in enumerate(apps):
        app.conf.goatbeat_scheduler_id = f"replica-{i}"
    replicas = [Scheduler(app=app, max_interval=1) for app in apps]
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            for r in replicas:
                r.tick()
            time.sleep(0.1)
    finally:
        for r in replicas:
            r.close()
    store = open_store(pg_dsn)
    try:
        executions = store.executions(name="every-second", limit=1000)
    finally:
        store.close()
    keys = Counter(e.idempotency_key for e in executions)
    assert len(executions) >= 3
    assert all(n == 1 for n in keys.values())
    assert all(e.status is ExecutionStatus.SUBMITTED for e in executions)
    assert {e.scheduler_id for e in executions} <= {"replica-0", "replica-1"}
    client = redis.Redis.from_url(redis_url)
    try:
        messages = client.llen("replicas")
    finally:
        client.close()
    # every claimed occurrence reached the broker exactly once
    assert messages == len(executions)
    assert timedelta(0) < max(e.scheduled_at for e in executions) - min(
        e.scheduled_at for e in executions
    )
