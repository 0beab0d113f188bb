"""The tasks this project can schedule, which the admin's task field offers (a datalist).

Gathered from what the project already has, named as a schedule stores them
(:func:`goatbeat.beat.task_path`):

- the tasks of the code schedules (``schedules.py``) and of the stored schedules;
- the Django Tasks, Celery tasks and Dramatiq actors defined in each installed app's ``tasks``
  module (imported, as Celery's autodiscovery imports them; one that fails is skipped);
- the tasks registered with the Celery app, and the actors declared on the Dramatiq broker,
  when the project has loaded Celery or Dramatiq (neither is imported for this).

:func:`allowed_patterns` is the hook for an allow-list of task patterns: when it returns
patterns, only the tasks matching one are offered, and its exact names are offered too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from goatbeat.beat import task_path
from goatbeat.django.submitter import backend_of

__all__ = ["allowed_patterns", "known_tasks"]

_OFFERED_BACKENDS = frozenset({"django_tasks", "celery", "dramatiq"})
"""Objects of an app's tasks module worth offering: any plain function could be an RQ job,
so those are not guessed at (type their dotted path)."""


def allowed_patterns() -> list[str] | None:
    """The project's allow-list of task patterns (``fnmatch``), None when it has none.

    Read from the validated settings' ``allowed_tasks`` when goatbeat has that setting."""
    from goatbeat.django import conf

    settings = conf.get()
    for source in (settings, settings.core):
        patterns = getattr(source, "allowed_tasks", None)
        if patterns is not None:
            return [str(p) for p in patterns]
    return None


def known_tasks(*, stored: Iterable[str] = ()) -> list[str]:
    """Every task name found (see the module docstring), sorted; ``stored``: the task names
    of the stored schedules."""
    from goatbeat.django.registry import get_registry

    found = {t for t in stored if t}
    found.update(s.task for s in get_registry().schedules)
    found.update(_in_tasks_modules())
    found.update(_celery_tasks())
    found.update(_dramatiq_actors())
    patterns = allowed_patterns()
    if patterns is not None:
        found = {t for t in found if any(fnmatchcase(t, p) for p in patterns)}
        found.update(p for p in patterns if not any(c in p for c in "*?["))
    return sorted(found)


def _in_tasks_modules() -> set[str]:
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    found: set[str] = set()
    for app_config in apps.get_app_configs():
        if not module_has_submodule(app_config.module, "tasks"):
            continue
        try:
            module = importlib.import_module(f"{app_config.name}.tasks")
        except Exception:  # a broken tasks module is its app's to report, not the admin's
            continue
        for value in list(vars(module).values()):
            try:
                if backend_of(value) in _OFFERED_BACKENDS:
                    found.add(task_path(value))
            except Exception:  # an odd object: not a task
                continue
    return found


def _celery_tasks() -> set[str]:
    celery: Any = sys.modules.get("celery")
    if celery is None:
        return set()
    app = celery.current_app._get_current_object()
    return {name for name in list(app.tasks) if not name.startswith("celery.")}


def _dramatiq_actors() -> set[str]:
    broker_module: Any = sys.modules.get("dramatiq.broker")
    broker = getattr(broker_module, "global_broker", None)
    if broker is None:
        return set()
    return {str(name) for name in broker.get_declared_actors()}
