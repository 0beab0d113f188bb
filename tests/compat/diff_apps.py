"""Celery apps for the diff tests: the same names with equal and with changed schedules."""

from __future__ import annotations

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab


def _app(name: str, beat_schedule: dict[str, dict[str, object]]) -> Celery:
    app = Celery(name, set_as_current=False)
    app.conf.timezone = "Europe/Paris"
    app.conf.broker_url = "memory://"
    app.conf.beat_schedule = beat_schedule
    return app


BASE = {
    "morning": {"task": "report", "schedule": crontab(minute=0, hour=9), "args": [1]},
    "every-10m": {"task": "ping", "schedule": timedelta(minutes=10), "options": {"queue": "q"}},
    "weekdays": {
        "task": "ping",
        "schedule": crontab(minute="*/30", hour="8-18", day_of_week="mon-fri"),
    },
}

clean = _app("clean", BASE)
changed = _app(
    "changed",
    {**BASE, "morning": {"task": "report", "schedule": crontab(minute=0, hour=10), "args": [1]}},
)
renamed_task = _app("renamed", {**BASE, "every-10m": {**BASE["every-10m"], "task": "pong"}})
dst = _app("dst", {"half-past-two": {"task": "ping", "schedule": crontab(minute=30, hour=2)}})
