"""The tasks the admin's task field offers (a ``<datalist>``): exactly what the allow-list
(:mod:`goatbeat.core.allowlist`, ``DjangoRegistry.task_allow_list()``) accepts, named as a
schedule stores them.

- the tasks of the code schedules (``schedules.py``);
- the tasks the backends registered: the Celery app's tasks, the configured Dramatiq broker's
  actors, the installed apps' Django Tasks (``submitter.known_tasks()``; RQ keeps no registry);
- the stored schedules' tasks the allow-list accepts (an imported task matching
  ``allowed_tasks``, say);
- the ``allowed_tasks`` entries that are plain names rather than patterns, and that the
  allow-list accepts (a plain name is checked on what it resolves to, as a pattern is).

A name the allow-list would refuse is never offered; any allowed name may still be typed.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["known_tasks"]

_GLOB = frozenset("*?[")


def known_tasks(*, stored: Iterable[str] = ()) -> list[str]:
    """Every task name the field offers, sorted; ``stored``: the stored schedules' tasks."""
    from goatbeat.django.registry import get_registry

    registry = get_registry()
    allow = registry.task_allow_list()
    found = {s.task for s in registry.schedules}
    found.update(allow.registered())
    found.update(task for task in stored if task and allow.allows(task))
    found.update(p for p in allow.patterns if not _GLOB.intersection(p) and allow.allows(p))
    return sorted(found)
