"""Importers: celery beat's ``beat_schedule`` and django-celery-beat's tables -> goatbeat.

``read_beat_schedule`` / ``read_app`` and ``read_django_celery_beat`` turn a source into
:class:`SourceEntry` values (converted schedule or the reason it cannot be); ``import_entries``
publishes them into a store, idempotently, reporting every failure by name. The command
``import_celery_beat`` lives with the CLI, in :mod:`goatbeat.cli.migration`.
"""

from __future__ import annotations

from goatbeat.importers.celery_beat import app_timezone, load_app, read_app, read_beat_schedule
from goatbeat.importers.django_celery_beat import read_django_celery_beat
from goatbeat.importers.entries import ImportReport, SourceEntry, import_entries, plan_import

__all__ = [
    "ImportReport",
    "SourceEntry",
    "app_timezone",
    "import_entries",
    "load_app",
    "plan_import",
    "read_app",
    "read_beat_schedule",
    "read_django_celery_beat",
]
