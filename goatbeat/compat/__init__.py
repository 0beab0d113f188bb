"""The celery side of goatbeat: schedule conversion and the drop-in beat scheduler.

``to_trigger(celery_schedule)`` converts a celery ``crontab`` / ``schedule`` / ``solar`` into a
goatbeat trigger with celery's meaning (the rules live in :mod:`goatbeat.conversion`, which the
importers share); ``Scheduler`` is the ``celery beat -S
goatbeat.compat:Scheduler`` class (imported lazily: ``import goatbeat.compat`` needs no celery).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from goatbeat.conversion import (
    CELERY_BUGS,
    CeleryCrontabTrigger,
    UnsupportedSchedule,
    crontab_expression,
    timezone_name,
    to_trigger,
)

if TYPE_CHECKING:
    from goatbeat.compat.beat import Scheduler

__all__ = [
    "CELERY_BUGS",
    "CeleryCrontabTrigger",
    "Scheduler",
    "UnsupportedSchedule",
    "crontab_expression",
    "timezone_name",
    "to_trigger",
]


def __getattr__(name: str) -> Any:
    if name == "Scheduler":
        from goatbeat.compat.beat import Scheduler

        return Scheduler
    raise AttributeError(f"module 'goatbeat.compat' has no attribute {name!r}")
