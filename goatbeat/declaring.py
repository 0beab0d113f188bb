"""What a declaration's options become, for :class:`~goatbeat.beat.Beat` and the Django
registry: a task's stored name (:func:`task_path`), a trigger (:func:`build_trigger`, and the
key its cache keeps), durations, the per-schedule options a backend takes, and a stored
schedule read back as the options that declare it; and Beat's declaration API itself
(:class:`DeclaringMixin`: ``schedule()``, and the :class:`Schedule` its options build)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import InvalidSchedule, UnsupportedOption, short_repr
from goatbeat.core.model import (
    DEFAULT_CATCH_UP_LIMIT,
    MisfirePolicy,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
)
from goatbeat.core.submit import TaskSubmitter, capability, task_definition
from goatbeat.core.timeutil import get_zone, iso_z, parse_instant
from goatbeat.core.triggers import (
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)

__all__ = [
    "DeclaringMixin",
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

F = TypeVar("F", bound=Callable[..., Any])

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


class DeclaringMixin:
    """The declaring part of :class:`~goatbeat.beat.Beat`, as a mixin it inherits: the
    declaration API (:meth:`schedule`, as a call or a decorator) and what a declaration's
    options become (``_build``, which the stored schedules' ``create`` and ``edit`` use too).
    Beat gives it the state below, set in its ``__init__``, and the submitter and time zone."""

    clock: Clock | None
    _submitter: TaskSubmitter | None
    _declared: dict[str, Schedule]
    _callables: dict[str, Callable[..., Any]]
    _triggers: dict[tuple[Any, ...], Trigger]
    _zones: set[str]
    _renames: dict[str, str]
    _released: tuple[str, frozenset[str]] | None

    if TYPE_CHECKING:

        @property
        def submitter(self) -> TaskSubmitter: ...

        @property
        def timezone(self) -> str: ...

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules declared in code, in declaration order."""
        return list(self._declared.values())

    @overload
    def schedule(
        self,
        *,
        name: str | None = ...,
        task: None = ...,
        **options: Any,
    ) -> Callable[[F], F]: ...

    @overload
    def schedule(
        self,
        *,
        name: str,
        task: str | Callable[..., Any],
        **options: Any,
    ) -> Schedule: ...

    def schedule(
        self,
        *,
        name: str | None = None,
        task: str | Callable[..., Any] | None = None,
        **options: Any,
    ) -> Schedule | Callable[[F], F]:
        """Declare a schedule, validated at once. Returns the :class:`Schedule`.

        Without ``task=`` it is a decorator: ``@beat.schedule(name="x", every="5m")``
        declares the decorated function (``name`` defaults to its ``__name__``).

        Options: exactly one of ``cron=`` (5 or 6 fields), ``every=`` (``"5m"``, seconds or a
        timedelta), ``at=`` (an aware datetime or ISO string), ``solar=dict(event=, latitude=,
        longitude=)``, ``trigger=`` (a Trigger); ``args=()``, ``kwargs={}``; routing
        ``queue=``, ``exchange=``, ``routing_key=``, ``priority=``, ``expires=`` (seconds or a
        duration, counted from submission unless the submitter counts it from the scheduled
        instant: ``expires_from="scheduled"``), ``headers=``; ``options=``, the backend's own
        per-schedule options (RQ: ``job_timeout``, ``result_ttl``, ``failure_ttl``, ``retry``,
        ``at_front``; Dramatiq: ``max_retries``, ``time_limit``, ``min_backoff``,
        ``max_backoff``), refused when the backend does not take them, stored with the headers;
        ``misfire="run_once"|"skip"|"run_all"``,
        ``misfire_grace="60s"``, ``catch_up_limit=100``; ``start_at=``, ``end_at=``;
        ``timezone=`` (cron only; defaults to the Beat's); ``description=""``; ``enabled=True``;
        ``allow_subsecond=True`` to accept ``every=`` shorter than 1 s (refused otherwise).
        Control: ``jitter="30s"`` (each occurrence is sent at its instant plus a deterministic
        offset in ``[0, jitter)``), ``overlap="allow"|"skip"|"buffer_one"`` with
        ``max_runtime="1h"`` (required unless allow), ``pause_on_failure=3`` (pause after that
        many consecutive failed runs, where the backend reports them).

        Renames: ``renamed_from="ping"`` (the name it was declared under before) makes the
        next publication rename the stored row in place instead of creating a second one:
        history, last run and phase carry over, and the old name stops in the same step
        (:meth:`goatbeat.core.store.ScheduleStore.publish`, ``renames``). Keep it while a
        replica of the release before may still publish; it does nothing once renamed.


        ``at=`` is checked when published, not when declared, so that time passing never
        turns valid code invalid: a one-off already stored with that instant is *ended* once
        the instant has passed (run, missed or skipped) and publishes unchanged; a *new*
        declaration of a past instant (no stored row, or a stored one with another instant)
        is refused by the publication, named in :attr:`PublishResult.refused` and logged
        ``schedule.refused`` at ERROR, while every other schedule is published and runs.

        A Dramatiq actor is stored by its ``actor_name``, on its ``queue_name`` unless
        ``queue=`` names another.
        """
        if task is None:

            def decorator(func: F) -> F:
                self._declare(name=str(name or getattr(func, "__name__", "")), task=func, **options)
                return func

            return decorator
        if name is None:
            raise InvalidSchedule("name", None, "every schedule needs a name=")
        return self._declare(name=name, task=task, **options)

    def _declare(self, *, name: str, task: str | Callable[..., Any], **options: Any) -> Schedule:
        if self._released is not None:
            raise InvalidSchedule("name", name, "declared after the declarations were released")
        if isinstance(name, str) and name in self._declared:
            raise InvalidSchedule("name", name, f"{name!r} is declared twice")
        renamed_from = options.pop("renamed_from") if "renamed_from" in options else None
        if renamed_from is not None:
            self._check_rename(name, renamed_from)
        # A past at= is judged at publication, against the store (_refused_one_offs).
        try:
            schedule = self._build(
                name=name, task=task, source=Source.CODE, check_future=False, **options
            )
        except TypeError:
            # An option _build does not take: named in one line (checked only on a refusal,
            # a call saved on every declaration).
            _check_option_names(options)
            raise
        if callable(task) and not isinstance(task, str):
            path = schedule.task
            self._callables[path] = task
            if self._submitter is not None:
                capability(self._submitter, "register")(path, task)
        self.submitter.validate(schedule)
        self._declared[schedule.name] = schedule
        if renamed_from is not None:
            self._renames[schedule.name] = renamed_from
        return schedule

    def _check_rename(self, name: str, old: Any) -> None:
        if not isinstance(old, str) or not old.strip():
            raise InvalidSchedule(
                "renamed_from", old, f"schedule {name!r}: {short_repr(old)} is not a name"
            )
        if old == name:
            raise InvalidSchedule(
                "renamed_from", old, f"schedule {name!r} cannot be renamed from itself"
            )
        for new, before in self._renames.items():
            if before == old:
                raise InvalidSchedule(
                    "renamed_from",
                    old,
                    f"schedules {new!r} and {name!r} both say they were {old!r} before",
                )

    def _build(
        self,
        *,
        name: str,
        task: str | Callable[..., Any],
        source: Source,
        cron: str | None = None,
        every: str | float | timedelta | None = None,
        at: datetime | str | None = None,
        solar: Mapping[str, Any] | None = None,
        trigger: Trigger | None = None,
        anchor: datetime | str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        exchange: str | None = None,
        routing_key: str | None = None,
        priority: int | None = None,
        expires: float | str | timedelta | None = None,
        headers: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        misfire: str | MisfirePolicy = MisfirePolicy.RUN_ONCE,
        misfire_grace: str | float | timedelta = "60s",
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        start_at: datetime | str | None = None,
        end_at: datetime | str | None = None,
        timezone: str | None = None,
        description: str = "",
        enabled: bool = True,
        one_off: bool = False,
        allow_subsecond: bool = False,
        jitter: str | float | timedelta = 0,
        overlap: str | OverlapPolicy = OverlapPolicy.ALLOW,
        max_runtime: str | float | timedelta | None = None,
        pause_on_failure: int | None = None,
        check_future: bool = True,
    ) -> Schedule:
        """The Schedule the options describe, validated (not by the submitter yet)."""
        path = task_path(task)
        actor = None if type(task) is str else dramatiq_actor(task)
        if actor is not None and queue is None:
            queue = actor[1]
        headers = self._with_options(path, headers, options)
        zone = self.timezone if timezone is None else timezone
        if type(zone) is not str or zone not in self._zones:
            get_zone(zone, "timezone")
            self._zones.add(zone)
        start = None if start_at is None else parse_instant(start_at, "start_at")
        end = None if end_at is None else parse_instant(end_at, "end_at")
        # Triggers are frozen values: a schedules.py that declares the same cron or interval a
        # thousand times gets one trigger, parsed once (and checked once by the store).
        key = trigger_key(cron, every, at, solar, trigger, zone, anchor, start, allow_subsecond)
        built = self._triggers.get(key) if key is not None else None
        if built is None:
            built = build_trigger(
                cron=cron,
                every=every,
                at=at,
                solar=solar,
                trigger=trigger,
                timezone=zone,
                # An interval that starts at start_at fires at start_at, start_at + every, ...
                anchor=start if anchor is None else parse_instant(anchor, "anchor"),
                allow_subsecond=allow_subsecond,
            )
            if key is not None:
                self._triggers[key] = built
        if isinstance(built, OnceTrigger) and check_future:
            self._check_future(name, built)
        if expires is None:
            expires_s = None
        else:
            expires_s = duration(expires, "expires").total_seconds()
        if not isinstance(enabled, bool):
            raise InvalidSchedule("enabled", enabled, f"{enabled!r} is not True or False")
        if (
            queue is None
            and exchange is None
            and routing_key is None
            and priority is None
            and expires_s is None
            and (headers is None or (type(headers) is dict and not headers))
        ):
            # What Routing() of these is, without checking None four times per declaration.
            routing = Routing._trusted(
                queue=None, exchange=None, routing_key=None, priority=None, expires=None, headers={}
            )
        else:
            routing = Routing(
                queue=queue,
                exchange=exchange,
                routing_key=routing_key,
                priority=priority,
                expires=expires_s,
                headers=headers if headers is not None else {},
            )
        # Schedule(...), quicker for the plain values a declaration usually gives.
        return Schedule._declared(
            name=name,
            task=path,
            trigger=built,
            args=args,
            kwargs=kwargs if kwargs is not None else {},
            routing=routing,
            misfire=misfire,
            misfire_grace=duration(misfire_grace, "misfire_grace"),
            catch_up_limit=catch_up_limit,
            start_at=start,
            end_at=end,
            one_off=one_off,
            description=description,
            source=source,
            enabled=enabled,
            jitter=duration(jitter, "jitter"),
            overlap=overlap,
            max_runtime=None if max_runtime is None else duration(max_runtime, "max_runtime"),
            pause_on_failure=pause_on_failure,
        )

    def _check_future(self, name: str, trigger: OnceTrigger) -> None:
        # A past instant would never fire (next_run_at has nothing after now): say so now
        # rather than store a schedule that silently does nothing. Importers of celery's
        # clocked schedules take another path, with celery's own meaning of a past one.
        now = (self.clock or SystemClock()).now()
        if trigger.at <= now:
            raise InvalidSchedule(
                "at",
                trigger.at,
                f"schedule {name!r}: the one-off instant {iso_z(trigger.at)} is already past "
                f"(now {iso_z(now)}); declare a future instant, or remove the declaration of a "
                "one-off that has run",
            )

    def _with_options(
        self, task: str, headers: Mapping[str, Any] | None, options: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """``headers`` with the backend ``options`` added: they travel in the same JSON column,
        where each submitter takes the names it knows (and checks their values in validate)."""
        if options is None:
            return headers
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise InvalidSchedule(
                "options", options, f"{short_repr(options)} is not a mapping of option names"
            )
        if not options:
            return headers
        backend, takes = backend_options_of(self.submitter, task)
        if takes is not None:
            unknown = sorted(set(options) - takes)
            if unknown:
                offered = ", ".join(sorted(takes)) or "none"
                raise UnsupportedOption(
                    "options",
                    dict(options),
                    f"the {backend} backend takes no option "
                    f"{', '.join(map(repr, unknown))} per schedule (it takes: {offered})",
                )
        if headers is not None and not isinstance(headers, Mapping):
            return headers  # Routing reports it
        both = sorted(set(headers or {}) & set(options))
        if both:
            raise InvalidSchedule(
                "options",
                dict(options),
                f"{', '.join(map(repr, both))} given both in headers= and in options=",
            )
        return {**(headers or {}), **options}


def _check_option_names(options: Mapping[str, Any]) -> None:
    """A one-line error naming an option :meth:`Beat.schedule` does not take (it was a bare
    ``TypeError`` from ``_build``)."""
    unknown = set(options) - _SCHEDULE_OPTIONS
    if not unknown:
        return
    name = sorted(unknown)[0]
    if name == "expires_from":
        reason = (
            "expires_from is the submitter's, not a schedule's: give it to the submitter "
            "(CelerySubmitter(..., expires_from='scheduled'), or submitter_options="
            "{'expires_from': 'scheduled'}); per schedule, set expires="
        )
    else:
        reason = f"schedule() takes no option {name!r}"
    raise InvalidSchedule(name, options[name], reason)


_SCHEDULE_OPTIONS = frozenset(inspect.signature(DeclaringMixin._build).parameters) - {
    "self",
    "name",
    "task",
    "source",
    "check_future",
}
