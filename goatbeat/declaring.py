"""What a declaration's options become, for :class:`~goatbeat.beat.Beat` and the Django
registry: a task's stored name (:func:`task_path`), a trigger (:func:`build_trigger`, and the
key its cache keeps), durations, the per-schedule options a backend takes, and a stored
schedule read back as the options that declare it."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import InvalidSchedule
from goatbeat.core.model import Schedule
from goatbeat.core.submit import TaskSubmitter, capability, task_definition
from goatbeat.core.timeutil import parse_instant
from goatbeat.core.triggers import (
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)

__all__ = [
    "task_path",
    "dramatiq_actor",
    "definition_path",
    "backend_options_of",
    "build_trigger",
    "trigger_key",
    "duration",
    "options_of",
    "trigger_options",
]

_SOLAR_KEYS = frozenset({"event", "latitude", "longitude"})


def task_path(task: object) -> str:
    """The task name stored for ``task``: a string as given; a Celery task's ``name``; a
    Django Tasks ``Task``'s ``module_path``; a Dramatiq actor's ``actor_name``; otherwise the
    callable's ``module.qualname``."""
    if isinstance(task, str):
        return task
    name = getattr(task, "name", None)
    if isinstance(name, str) and callable(getattr(task, "apply_async", None)):
        return name  # a Celery task: its registered name is what send_task needs
    module_path = getattr(task, "module_path", None)
    if isinstance(module_path, str):
        return module_path  # a django.tasks.Task
    actor = dramatiq_actor(task)
    if actor is not None:
        # Dramatiq workers look actors up by name, never by the function's module path.
        return actor[0]
    if not callable(task):
        raise InvalidSchedule("task", task, f"{task!r} is neither a callable nor a dotted path")
    module = getattr(task, "__module__", None)
    qualname = getattr(task, "__qualname__", None)
    if not module or not qualname:
        raise InvalidSchedule("task", task, f"{task!r} has no importable name; pass a dotted path")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise InvalidSchedule(
            "task",
            f"{module}.{qualname}",
            "a nested function or lambda cannot be found by a scheduler process; "
            "define the task at module level",
        )
    return f"{module}.{qualname}"


def dramatiq_actor(task: object) -> tuple[str, str] | None:
    """``(actor_name, queue_name)`` of a Dramatiq actor (told apart without importing
    dramatiq: an object that sends messages and has both names), else None."""
    name = getattr(task, "actor_name", None)
    queue = getattr(task, "queue_name", None)
    if (
        isinstance(name, str)
        and isinstance(queue, str)
        and callable(getattr(task, "send_with_options", None))
    ):
        return name, queue
    return None


def definition_path(submitter: TaskSubmitter, task: str) -> str:
    """Where the callable ``task`` names is defined, for a backend that imports dotted paths;
    ``task`` itself for one that finds tasks by registered name (nothing to walk)."""
    define = task_definition(submitter)
    return task if define is None else define(task)


def backend_options_of(submitter: TaskSubmitter, task: str) -> tuple[str, frozenset[str] | None]:
    """The backend's name and the per-schedule options it takes for ``task`` (its
    ``backend_options``; None: any). A routing submitter (``backend_for`` + ``submitter_for``,
    as the Django one) answers for the backend of ``task``. A submitter that declares nothing
    takes none."""
    backend_for = getattr(submitter, "backend_for", None)
    submitter_for = getattr(submitter, "submitter_for", None)
    if callable(backend_for) and callable(submitter_for):
        try:
            inner = submitter_for(backend_for(task))
        except LookupError:
            return submitter.name, frozenset()  # validate() reports the unknown task
        return backend_options_of(inner, task)
    names: frozenset[str] | None = capability(submitter, "backend_options")
    return submitter.name, names


def build_trigger(
    *,
    cron: str | None = None,
    every: str | float | timedelta | None = None,
    at: datetime | str | None = None,
    solar: Mapping[str, Any] | None = None,
    trigger: Trigger | None = None,
    timezone: str = "UTC",
    anchor: datetime | None = None,
    allow_subsecond: bool = False,
) -> Trigger:
    """Exactly one of ``cron=``, ``every=``, ``at=``, ``solar=``, ``trigger=`` -> a Trigger.
    ``allow_subsecond=True`` lets ``every=`` be shorter than 1 s (see IntervalTrigger)."""
    given = {
        name: value
        for name, value in (
            ("cron", cron),
            ("every", every),
            ("at", at),
            ("solar", solar),
            ("trigger", trigger),
        )
        if value is not None
    }
    if len(given) != 1:
        got = ", ".join(f"{k}=" for k in given) or "none"
        raise InvalidSchedule(
            "trigger",
            sorted(given),
            f"give exactly one of cron=, every=, at=, solar= (got {got})",
        )
    if allow_subsecond and every is None:
        raise InvalidSchedule(
            "allow_subsecond", allow_subsecond, "only applies to an interval (every=)"
        )
    if cron is not None:
        if not isinstance(cron, str):
            raise InvalidSchedule("cron", cron, f"{cron!r} is not a cron expression string")
        return CronTrigger(cron, timezone=timezone)
    if every is not None:
        return IntervalTrigger(every, anchor=anchor, allow_subsecond=allow_subsecond)
    if at is not None:
        return OnceTrigger(parse_instant(at, "at"))
    if solar is not None:
        if not isinstance(solar, Mapping):
            raise InvalidSchedule(
                "solar", solar, "must be a dict(event=..., latitude=..., longitude=...)"
            )
        missing = sorted(_SOLAR_KEYS - set(solar))
        unknown = sorted(set(solar) - _SOLAR_KEYS)
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(missing)}")
            if unknown:
                problems.append(f"unknown {', '.join(map(str, unknown))}")
            raise InvalidSchedule("solar", dict(solar), "; ".join(problems))
        return SolarTrigger(
            event=solar["event"], latitude=solar["latitude"], longitude=solar["longitude"]
        )
    assert trigger is not None
    if not isinstance(trigger, Trigger):
        raise InvalidSchedule("trigger", trigger, f"{trigger!r} is not a trigger")
    return trigger


def trigger_key(
    cron: object,
    every: object,
    at: object,
    solar: object,
    trigger: object,
    zone: str,
    anchor: object,
    start: datetime | None,
    allow_subsecond: bool,
) -> tuple[Any, ...] | None:
    """What a cron or an interval trigger is built from, when that is all that was given (and
    hashable): the key of :attr:`Beat._triggers`. Anything else is built every time."""
    if at is not None or solar is not None or trigger is not None:
        return None
    if cron is not None and every is None and type(cron) is str:
        return ("cron", cron, zone)
    if (
        every is not None
        and cron is None
        and type(every) in (str, int, float, timedelta)
        and (anchor is None or type(anchor) in (str, datetime))
    ):
        return ("every", every, type(every), anchor, start, allow_subsecond)
    return None


@functools.lru_cache(maxsize=256)
def _duration_cached(value: str | int, field_name: str) -> timedelta:
    return parse_duration(value, field=field_name)


def duration(value: Any, field_name: str) -> timedelta:
    """parse_duration, with the texts and integers every declaration repeats (``"60s"``,
    ``0``) parsed once."""
    if type(value) is str or type(value) is int:
        return _duration_cached(value, field_name)
    return parse_duration(value, field=field_name)


def options_of(s: Schedule) -> dict[str, Any]:
    """A stored schedule as the options :meth:`Beat.schedule` takes (the trigger as is)."""
    routing = s.routing
    return {
        "task": s.task,
        "trigger": s.trigger,
        "args": list(s.args),
        "kwargs": dict(s.kwargs),
        "queue": routing.queue,
        "exchange": routing.exchange,
        "routing_key": routing.routing_key,
        "priority": routing.priority,
        "expires": routing.expires,
        "headers": dict(routing.headers),
        "misfire": s.misfire,
        "misfire_grace": s.misfire_grace,
        "catch_up_limit": s.catch_up_limit,
        "start_at": s.start_at,
        "end_at": s.end_at,
        "description": s.description,
        "enabled": s.enabled,
        "one_off": s.one_off,
        "jitter": s.jitter,
        "overlap": s.overlap,
        "max_runtime": s.max_runtime,
        "pause_on_failure": s.pause_on_failure,
    }


def trigger_options(trigger: Trigger, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The options that rebuild the stored ``trigger`` when an edit changes only its zone (a
    cron) or its anchor (an interval); otherwise it is kept as it is."""
    if "timezone" in changes:
        if not isinstance(trigger, CronTrigger):
            raise InvalidSchedule(
                "timezone", changes["timezone"], f"a {trigger.describe()} trigger has no zone"
            )
        return {"trigger": None, "cron": trigger.expression}
    if "anchor" in changes:
        if not isinstance(trigger, IntervalTrigger):
            raise InvalidSchedule(
                "anchor", changes["anchor"], f"a {trigger.describe()} trigger has no anchor"
            )
        return {"trigger": None, "every": trigger.every, "allow_subsecond": trigger.allow_subsecond}
    return {}
