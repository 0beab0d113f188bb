"""``django.tasks.task`` where Django has it (6.0+). On Django 5.2 the test project's tasks are
plain functions (the settings pin the inline submitter there), so the apps, their
``schedules.py`` and everything but Django Tasks itself run on both."""

from collections.abc import Callable
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2

    def task(*args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]) and not kwargs:
            return args[0]

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            return func

        return decorate


__all__ = ["task"]
