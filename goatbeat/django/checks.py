"""Django system checks of goatbeat: the project's ``schedules.py`` declarations.

``goatbeat.E001`` reports each problem discovery found (a bad cron expression, a task that
does not exist, a name two apps declare, a ``schedules.py`` that fails to import), naming the
app and the schedule, so ``manage.py check``, ``migrate``, ``runserver`` and ``manage.py
goatbeat`` say what to fix before anything runs.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

__all__ = ["check_schedules"]


def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from goatbeat.django.registry import get_registry

    return [
        checks.Error(
            problem,
            hint="Fix the declaration in that app's schedules.py (register(beat)).",
            obj="goatbeat",
            id="goatbeat.E001",
        )
        for problem in get_registry().problems
    ]
