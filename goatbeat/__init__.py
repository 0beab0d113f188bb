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
from goatbeat.core.model import MisfirePolicy, Routing, Schedule
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger, SolarTrigger

__version__ = "0.1.0"

__all__ = [
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
    "Routing",
    "Schedule",
    "ScheduleNotFound",
    "SolarTrigger",
    "__version__",
]
