"""Read a Celery app's ``beat_schedule`` (Django: ``CELERY_BEAT_SCHEDULE``) as source entries.

An entry is a dict with ``task``, ``schedule`` (crontab / schedule / solar / timedelta / number
of seconds), and optionally ``args``, ``kwargs``, ``options`` (queue, exchange, routing_key,
priority, expires, headers) and ``relative``: the keys celery's ``ScheduleEntry`` takes. Each
becomes a :class:`~goatbeat.importers.entries.SourceEntry` of source ``celery``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from goatbeat.conversion import describe_exception, timezone_name, to_trigger
from goatbeat.core.errors import GoatbeatError, InvalidValue
from goatbeat.core.model import Routing, Schedule, Source
from goatbeat.importers import kombu_json
from goatbeat.importers.entries import SourceEntry, celery_instant, celery_misfire_grace

__all__ = [
    "BACKEND_CLEANUP",
    "beat_schedule_of",
    "load_app",
    "app_timezone",
    "known_tasks",
    "read_beat_schedule",
    "read_app",
    "read_entry",
    "read_last_runs",
]

_ENTRY_KEYS = {"task", "schedule", "args", "kwargs", "options", "relative"}
_ROUTING_OPTIONS = {"queue", "exchange", "routing_key", "priority", "expires", "headers"}


def load_app(spec: str) -> Any:
    """The Celery app named by ``module:attribute`` (or ``module``, finding ``app`` or
    ``celery`` in it, as ``celery -A`` does).

    Whatever importing the module raises becomes one ``InvalidValue`` (field ``app``) naming
    the module, the error and where it was raised: never a traceback."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise InvalidValue("app", spec, f"{spec!r} is not 'package.module:attribute'")
    # As `celery -A` does: the project is where the command runs.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            raise InvalidValue("app", spec, f"no module named {exc.name!r}") from None
        raise InvalidValue(
            "app", spec, f"importing {module_name!r} failed: {_where(exc)}"
        ) from None
    except Exception as exc:  # the user's module: anything may go wrong in it
        raise InvalidValue(
            "app", spec, f"importing {module_name!r} failed: {_where(exc)}"
        ) from None
    candidates = [attr] if attr else ["app", "celery"]
    for name in candidates:
        obj: Any = module
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if hasattr(obj, "conf") and hasattr(obj, "tasks"):
            return obj
    raise InvalidValue("app", spec, f"{spec!r} does not name a Celery app (module:attribute)")


def _where(exc: BaseException) -> str:
    """``Type: message (file:line)``: the error and the line of the user's code raising it."""
    frames = traceback.extract_tb(exc.__traceback__)
    place = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return describe_exception(exc) + place


def app_timezone(app: Any) -> str:
    """The IANA zone celery evaluates crontabs in for ``app``."""
    conf = app.conf
    if conf.timezone:
        return timezone_name(conf.timezone)
    if not conf.enable_utc:
        raise InvalidValue(
            "timezone",
            None,
            "the Celery app uses the host's local time (enable_utc=False and no timezone); "
            "set app.conf.timezone (CELERY_TIMEZONE) to an IANA zone first",
        )
    return "UTC"


def known_tasks(app: Any) -> set[str]:
    """Task names registered in ``app`` once its task modules are imported."""
    app.loader.import_default_modules()
    return set(app.tasks.keys())


BACKEND_CLEANUP = "celery.backend_cleanup"


def beat_schedule_of(app: Any) -> dict[str, Any]:
    """``app.conf.beat_schedule`` with the entries stock celery beat adds itself: its
    ``celery.backend_cleanup`` (daily at 04:00 in the app's zone) when results expire and the
    result backend does not expire them on its own. The importer and the drop-in scheduler
    both read the schedule through here, so they agree on it."""
    from celery.schedules import crontab

    data: dict[str, Any] = {}
    declared = dict(app.conf.beat_schedule or {})
    if BACKEND_CLEANUP not in declared and app.conf.result_expires:
        try:
            autoexpire = bool(app.backend.supports_autoexpire)
        except Exception:  # a backend that cannot even be built: beat would fail on it too
            autoexpire = True
        if not autoexpire:
            data[BACKEND_CLEANUP] = {
                "task": BACKEND_CLEANUP,
                "schedule": crontab(minute="0", hour="4"),
                "options": {"expires": 12 * 3600},
            }
    data.update(declared)
    return data


def read_app(
    app: Any, *, check_tasks: bool = True, last_runs: Mapping[str, datetime] | None = None
) -> list[SourceEntry]:
    """The source entries of the app's beat schedule (:func:`beat_schedule_of`)."""
    tasks = known_tasks(app) if check_tasks else None
    return read_beat_schedule(
        beat_schedule_of(app),
        timezone=app_timezone(app),
        known_tasks=tasks,
        last_runs=last_runs,
    )


def read_last_runs(path: str) -> dict[str, datetime]:
    """Each entry's last run, from a JSON file ``{"entry name": "ISO-8601 instant", ...}``.

    Stock ``celery beat`` keeps its last runs in a pickle shelve (``celerybeat-schedule``),
    which goatbeat never unpickles; docs/migration shows the one line of Python that dumps it
    as this JSON with the project's own interpreter. Naive instants are UTC, as celery reads
    them. InvalidValue (field ``last_runs``) names the file or the entry that is wrong."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise InvalidValue("last_runs", path, f"cannot read {path!r}: {exc}") from None
    except ValueError as exc:
        raise InvalidValue("last_runs", path, f"{path!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidValue(
            "last_runs", path, f"{path!r} must hold an object of entry name -> instant"
        )
    runs: dict[str, datetime] = {}
    for name, text in data.items():
        try:
            instant = celery_instant(text, "last_runs") if isinstance(text, str) else None
        except InvalidValue:
            instant = None
        if instant is None:
            raise InvalidValue(
                "last_runs", text, f"{path!r}: entry {name!r} has {text!r}, not an ISO-8601 instant"
            )
        runs[str(name)] = instant
    return runs


def read_beat_schedule(
    beat_schedule: Mapping[str, Any],
    *,
    timezone: str = "UTC",
    known_tasks: Collection[str] | None = None,
    last_runs: Mapping[str, datetime] | None = None,
) -> list[SourceEntry]:
    """Convert every entry of a beat schedule; never raises for a bad entry.

    ``timezone``: the app's zone (crontabs are evaluated in it). ``known_tasks``: task names
    the app registers; when given, an entry naming another task is reported, not imported.
    ``last_runs``: each entry's last run as celery beat recorded it (:func:`read_last_runs`):
    an interval then keeps celery's phase (its next run is the last one plus the interval) and
    the first goatbeat run is the one celery would have made next."""
    if not isinstance(beat_schedule, Mapping):
        raise InvalidValue("beat_schedule", beat_schedule, "must be a mapping of name -> entry")
    runs = last_runs or {}
    return [
        _read_entry(str(name), entry, timezone, known_tasks, runs.get(str(name)))
        for name, entry in beat_schedule.items()
    ]


def read_entry(
    name: str,
    entry: Any,
    *,
    timezone: str = "UTC",
    known_tasks: Collection[str] | None = None,
    last_run_at: datetime | None = None,
) -> SourceEntry:
    """One entry (a dict of the keys celery's ``ScheduleEntry`` takes) as
    :func:`read_beat_schedule` reads each: celery-redbeat's definitions are such dicts."""
    return _read_entry(name, entry, timezone, known_tasks, last_run_at)


def _read_entry(
    name: str,
    entry: Any,
    zone: str,
    tasks: Collection[str] | None,
    last_run_at: datetime | None = None,
) -> SourceEntry:
    def failed(reason: str, **extra: Any) -> SourceEntry:
        return SourceEntry(name=name, source=Source.CELERY, problem=reason, **extra)

    if not isinstance(entry, Mapping):
        return failed(f"the entry is a {type(entry).__name__}, not a dict")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        return failed(
            f"unknown key(s) {sorted(unknown)}; celery beat accepts {sorted(_ENTRY_KEYS)}"
        )
    task = entry.get("task")
    if not isinstance(task, str) or not task.strip():
        return failed(f"'task' is {task!r}, not a task name")
    if tasks is not None and task not in tasks:
        return failed(
            f"task {task!r} is not registered in the Celery app; check the name or make sure "
            "its module is imported (app.autodiscover_tasks / imports)"
        )
    if "schedule" not in entry:
        return failed("the entry has no 'schedule'")
    sched = entry["schedule"]
    relative = bool(entry.get("relative", False))
    notes: list[str] = []
    try:
        trigger = to_trigger(sched, timezone=zone, relative=relative, last_run_at=last_run_at)
        args = kombu_json.encode(list(_sequence(entry.get("args", ()), "args")), field="args")
        kwargs = kombu_json.encode(
            dict(_mapping(entry.get("kwargs") or {}, "kwargs")), field="kwargs"
        )
        routing, end_at, route_notes = _routing(entry.get("options") or {})
        notes.extend(route_notes)
        schedule = Schedule(
            name=name,
            task=task,
            trigger=trigger,
            misfire_grace=celery_misfire_grace(trigger),
            args=args,
            kwargs=kwargs,
            routing=routing,
            end_at=end_at,
            source=Source.CELERY,
            last_run_at=last_run_at,
        )
    except GoatbeatError as exc:
        return failed(str(exc), task=task)
    except Exception as exc:  # a broken schedule object is this entry's problem only
        return failed(f"cannot be converted: {describe_exception(exc)}", task=task)
    return SourceEntry(
        name=name,
        source=Source.CELERY,
        schedule=schedule,
        notes=tuple(notes),
        celery_schedule=_celery_schedule(sched, relative),
        celery_tz=zone,
        last_run_at=last_run_at,
        task=task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        routing=schedule.routing.to_dict(),
    )


def _celery_schedule(sched: Any, relative: bool) -> Any:
    if isinstance(sched, (int, float, timedelta)) and not isinstance(sched, bool):
        from celery.schedules import schedule as celery_schedule

        every = sched if isinstance(sched, timedelta) else timedelta(seconds=sched)
        return celery_schedule(every, relative)
    return sched


def _sequence(value: Any, field: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise InvalidValue(field, value, f"{value!r} must be a list or tuple")


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    raise InvalidValue(field, value, f"{value!r} must be a dict")


def _routing(options: Any) -> tuple[Routing, datetime | None, list[str]]:
    """Routing from apply_async options; an absolute ``expires`` becomes the schedule's end."""
    if not isinstance(options, Mapping):
        raise InvalidValue("options", options, f"{options!r} must be a dict")
    unknown = set(options) - _ROUTING_OPTIONS
    if unknown:
        raise InvalidValue(
            "options",
            dict(options),
            f"option(s) {sorted(unknown)} have no goatbeat equivalent (goatbeat routes with "
            f"{sorted(_ROUTING_OPTIONS)}); move them to the task's own options and re-run",
        )
    notes: list[str] = []
    expires = options.get("expires")
    end_at: datetime | None = None
    seconds: float | None = None
    if isinstance(expires, datetime):
        end_at = expires if expires.tzinfo is not None else None
        if end_at is None:
            raise InvalidValue("expires", expires, f"{expires.isoformat()} is naive")
        notes.append(
            f"options.expires={expires.isoformat()} is an absolute instant: imported as the "
            "schedule's end_at (nothing runs after it, as celery's expired messages would not)"
        )
    elif isinstance(expires, timedelta):
        seconds = expires.total_seconds()
    elif expires is not None:
        if isinstance(expires, bool) or not isinstance(expires, (int, float)):
            raise InvalidValue("expires", expires, f"{expires!r} is not seconds or a datetime")
        seconds = float(expires)
    headers = options.get("headers") or {}
    routing = Routing(
        queue=options.get("queue"),
        exchange=_name(options.get("exchange")),
        routing_key=options.get("routing_key"),
        priority=options.get("priority"),
        expires=seconds,
        headers=kombu_json.encode(dict(_mapping(headers, "headers")), field="headers"),
    )
    return routing, end_at, notes


def _name(value: Any) -> Any:
    # kombu Exchange objects carry a name; celery accepts either.
    return getattr(value, "name", value)
