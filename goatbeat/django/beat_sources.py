"""Celery beat's schedules as a Django project holds them, for ``import_celery_beat`` and
``diff`` run under Django (``manage.py goatbeat ...``, or ``goatbeat`` with
``DJANGO_SETTINGS_MODULE`` set).

Under Django, with no source option, those commands read ``CELERY_BEAT_SCHEDULE`` (through the
project's Celery app when one is loaded, so its time zone and task names count) and
django-celery-beat's tables in Django's default database. Django is imported only when asked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from goatbeat.importers.celery_beat import read_beat_schedule
from goatbeat.importers.entries import SourceEntry

__all__ = [
    "default_connection",
    "describe_alias",
    "in_django_project",
    "naive_timezone",
    "project_celery_app",
    "settings_beat_schedule",
]


def in_django_project() -> bool:
    """True inside a Django project (DJANGO_SETTINGS_MODULE set and its settings load)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return False
    try:
        from django.conf import settings

        return bool(settings.configured)
    except ImportError:
        return False


def project_celery_app() -> Any:
    """The project's Celery app when the Django project loaded one (Celery's Django guide
    imports it from the project package), else None. It is used even with an empty beat
    schedule: its registered tasks check django-celery-beat's rows, its zone their crontabs."""
    try:
        from celery import current_app
    except ImportError:
        return None
    app = current_app._get_current_object()
    # Without a project app, current_app is celery's unconfigured fallback app, named
    # "default", whose empty beat_schedule would hide settings.CELERY_BEAT_SCHEDULE.
    if app.main == "default" and not app.conf.beat_schedule:
        return None
    return app


def describe_alias(alias: str) -> str:
    """``Django database 'default' (postgresql://user@host:5432/name)``, for the line that
    names the database a command writes to (never the password)."""
    try:
        from django.db import connections

        conf = connections[alias].settings_dict
    except Exception:  # an unknown alias: the store will say so when it is used
        return f"Django database {alias!r}"
    engine = str(conf.get("ENGINE") or "")
    name = str(conf.get("NAME") or "")
    if "postgresql" in engine:
        host = str(conf.get("HOST") or "localhost")
        port = f":{conf['PORT']}" if conf.get("PORT") else ""
        user = f"{conf['USER']}@" if conf.get("USER") else ""
        return f"Django database {alias!r} (postgresql://{user}{host}{port}/{name})"
    return f"Django database {alias!r} ({engine.rsplit('.', 1)[-1]} {name})"


def settings_beat_schedule(last_runs: Mapping[str, datetime] | None) -> list[SourceEntry]:
    """``settings.CELERY_BEAT_SCHEDULE`` read in ``settings.CELERY_TIMEZONE`` (default UTC)."""
    from django.conf import settings

    schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
    zone = getattr(settings, "CELERY_TIMEZONE", None) or "UTC"
    return read_beat_schedule(schedule, timezone=zone, last_runs=last_runs)


def naive_timezone() -> str:
    """The zone of naive datetimes in the project's tables: UTC with ``USE_TZ``, else
    ``TIME_ZONE`` (UTC outside a Django project)."""
    if not in_django_project():
        return "UTC"
    from django.conf import settings

    return "UTC" if settings.USE_TZ else str(settings.TIME_ZONE or "UTC")


def default_connection() -> Any:
    """Django's connection to its default database (a DB-API connection wrapper)."""
    from django.db import connection

    return connection
