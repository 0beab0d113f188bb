"""A small real Celery app for the importer tests: registered tasks and a beat_schedule."""

from __future__ import annotations

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab, solar

app = Celery("importer_tests", set_as_current=False)
app.conf.timezone = "Europe/Paris"
app.conf.broker_url = "memory://"


@app.task(name="reports.daily")
def daily(*args: object, **kwargs: object) -> None:
    return None


@app.task(name="ping")
def ping(*args: object, **kwargs: object) -> None:
    return None


app.conf.beat_schedule = {
    "daily-report": {
        "task": "reports.daily",
        "schedule": crontab(minute=0, hour=9),
        "args": (1, "x"),
        "kwargs": {"full": True},
        "options": {"queue": "reports", "priority": 5, "expires": 600},
    },
    "ping-5m": {"task": "ping", "schedule": timedelta(minutes=5)},
    "ping-30s": {"task": "ping", "schedule": 30.0},
    "friday-13th": {
        "task": "ping",
        "schedule": crontab(minute=0, hour=0, day_of_month=13, day_of_week="fri"),
    },
    "sunset": {"task": "ping", "schedule": solar("sunset", 48.85, 2.35)},
    "bad-unknown-task": {"task": "no.such.task", "schedule": 60},
    "bad-string-schedule": {"task": "ping", "schedule": "*/5 * * * *"},
    "bad-option": {"task": "ping", "schedule": 60, "options": {"countdown": 5}},
    "bad-args": {"task": "ping", "schedule": 60, "args": "not-a-list"},
    "bad-subsecond": {"task": "ping", "schedule": 0.5},
}
