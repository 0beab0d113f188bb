"""Which Django this is, and what it has: goatbeat's app runs on Django 5.2 LTS and later.

Two things came after 5.2, and this module is the one place that knows it:

- **Django Tasks** (``django.tasks``, Django 6.0). On 5.2 the ``django_tasks`` backend does
  not exist: asking for it (``GOATBEAT["submitter"]``, ``submitter_options``) is refused by
  name (:func:`django_tasks_missing`), and nothing else imports ``django.tasks``.
- **Database-level** ``on_delete`` (``models.DB_SET_NULL``, Django 6.1). goatbeat's foreign
  keys are ``ON DELETE SET NULL`` in its SQL schema (``goatbeat/stores/sql/``) whatever Django
  says; 6.1 is told so, and 5.2, which cannot be, leaves the rows to the database
  (``DO_NOTHING``): the same effect, the same schema.
"""

from __future__ import annotations

from typing import Any

import django
from django.db import models

__all__ = [
    "DJANGO_TASKS_VERSION",
    "HAS_DJANGO_TASKS",
    "SET_NULL_IN_DATABASE",
    "django_task_type",
    "django_tasks_missing",
]

DJANGO_TASKS_VERSION = (6, 0)
HAS_DJANGO_TASKS = django.VERSION[:2] >= DJANGO_TASKS_VERSION
"""Whether this Django has ``django.tasks``."""

SET_NULL_IN_DATABASE: Any = getattr(models, "DB_SET_NULL", models.DO_NOTHING)
"""``on_delete`` of goatbeat's foreign keys, whose SQL says ``ON DELETE SET NULL``."""


def django_task_type() -> type | None:
    """``django.tasks.Task``, or None on a Django without it."""
    if not HAS_DJANGO_TASKS:
        return None
    from django.tasks import Task

    task_type: type = Task
    return task_type


def django_tasks_missing(what: str) -> str | None:
    """Why ``what`` (a setting, a backend name) cannot be used on this Django, or None."""
    if HAS_DJANGO_TASKS:
        return None
    need = ".".join(str(n) for n in DJANGO_TASKS_VERSION)
    return (
        f"{what} needs Django {need} or later (Django Tasks, django.tasks); this project runs "
        f"Django {django.get_version()}: use another backend (celery, dramatiq, rq) or upgrade "
        "Django"
    )
