"""The issue's two custom schedule classes (#27 item 1), and Celery apps declaring them."""

from __future__ import annotations

import sys
import types
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule


class OfficeHoursEvery10Min(schedule):  # type: ignore[misc]
    """Every 10 minutes, Monday to Friday 09-18 only."""

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        now = self.now()
        if now.weekday() >= 5 or not 9 <= now.hour < 18:
            return (False, 600.0)
        result: tuple[bool, float] = super().is_due(last_run_at)
        return result


class DailyButChristmas(crontab):  # type: ignore[misc]
    """08:00 every day except 25 December."""

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        due, again = super().is_due(last_run_at)
        now = self.now()
        if due and (now.month, now.day) == (12, 25):
            return (False, again)
        return (due, again)


def beat_schedule(*, custom: bool) -> dict[str, Any]:
    """The two entries: with the custom classes, or (``custom=False``) as their parents, as
    an import made before goatbeat refused them left them."""
    office = OfficeHoursEvery10Min if custom else schedule
    daily = DailyButChristmas if custom else crontab
    return {
        "office-hours": {"task": "ping", "schedule": office(timedelta(minutes=10))},
        "daily-but-christmas": {"task": "ping", "schedule": daily(minute=0, hour=8)},
        "plain": {"task": "ping", "schedule": crontab(minute=30, hour=7)},
    }


def install_app(name: str, *, custom: bool) -> str:
    """A Celery app in module ``name`` (in ``sys.modules``), for ``--from-app name:app``."""
    app = Celery(name, set_as_current=False)
    app.conf.timezone = "UTC"
    app.conf.result_expires = None
    app.conf.beat_schedule = beat_schedule(custom=custom)
    module = types.ModuleType(name)
    module.app = app  # type: ignore[attr-defined]
    sys.modules[name] = module
    return f"{name}:app"
