"""goatbeat: the periodic-task scheduler to reach for when celery beat lets you down.

Schedules live in a database; any number of scheduler processes may run; PostgreSQL
coordinates them so each occurrence is claimed at most once and dispatched at least once to
the backend the project already uses (Celery, Dramatiq, RQ, Django Tasks).

``import goatbeat`` loads no optional dependency: adapters import theirs when used.
"""

from goatbeat.core.errors import (
    ConfigError,
    GoatbeatError,
    InvalidCron,
    InvalidDuration,
    InvalidSchedule,
    InvalidTimezone,
    InvalidValue,
    ScheduleNotFound,
)
from goatbeat.core.model import MisfirePolicy, OverlapPolicy, Routing, Schedule
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger, SolarTrigger

__version__ = "0.9.0"
"""The release: 0.MINOR.PATCH, MINOR being the schema version it needs (CHANGELOG.md, "Versions";
tests/unit/test_versions.py holds them together). pyproject.toml reads it from here."""

__all__ = [
    "Beat",
    "ConfigError",
    "CronTrigger",
    "GoatbeatError",
    "IntervalTrigger",
    "InvalidCron",
    "InvalidDuration",
    "InvalidSchedule",
    "InvalidTimezone",
    "InvalidValue",
    "MisfirePolicy",
    "OnceTrigger",
    "OverlapPolicy",
    "Routing",
    "Schedule",
    "ScheduleNotFound",
    "SolarTrigger",
    "__version__",
]


def __getattr__(name: str) -> object:
    # Beat is loaded on first use so that `import goatbeat` stays as light as the core.
    if name == "Beat":
        from goatbeat.beat import Beat

        return Beat
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
