"""Beat: the plain-Python API. Declare schedules in code, publish them, run the scheduler.

::

    from goatbeat.beat import Beat

    beat = Beat("postgresql://app@db/app", submitter="celery", timezone="Europe/Paris")
    beat.schedule(name="daily-report", task="reports.tasks.generate", cron="0 9 * * mon-fri")
    beat.schedule(name="ping", task=send_ping, args=[42], every="5m", queue="emails")

    @beat.schedule(name="cleanup", every="1h")
    def cleanup() -> None: ...

Every declaration is validated at once (a bad value raises an ``InvalidValue`` naming the
field), including by the submitter (``validate``): a routing option the backend cannot honour
fails at import time, not at 3 a.m. Nothing touches the database until :attr:`Beat.store` is
used; ``goatbeat --app module:beat ...`` drives the rest (``migrate``, ``scheduler``,
``schedule list`` ...).

The embedded default (``sqlite:///goatbeat.db`` with the inline submitter) migrates its own
schema when opened; PostgreSQL is migrated explicitly (``goatbeat migrate``), as production
schemas should be.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from goatbeat.core.alerts import Alerter, AlertHandler, webhook
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import Settings, parse_settings
from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    ScheduleNotFound,
    UnsupportedOption,
    short_repr,
)
from goatbeat.core.model import (
    DEFAULT_CATCH_UP_LIMIT,
    DamagedSchedule,
    Execution,
    MisfirePolicy,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
    StoredSchedule,
)
from goatbeat.core.observability import log_event
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import (
    BackfillResult,
    FieldChange,
    PublishResult,
    ResumeResult,
    ScheduleStore,
)
from goatbeat.core.submit import TaskSubmitter, capability, known_tasks
from goatbeat.core.timeutil import get_zone, iso_z, parse_instant
from goatbeat.core.triggers import (
    OnceTrigger,
    Trigger,
)
from goatbeat.declaring import (
    backend_options_of,
    build_trigger,
    definition_path,
    dramatiq_actor,
    duration,
    options_of,
    task_path,
    trigger_key,
    trigger_options,
)
from goatbeat.publication import PUBLISHING_ORIGINS, log_publication

__all__ = [
    "Beat",
    "task_path",
    "build_trigger",
    "log_publication",
    "alerter_for",
    "PUBLISHING_ORIGINS",
]

F = TypeVar("F", bound=Callable[..., Any])

_EMBEDDED_PREFIXES = ("sqlite:", "memory:")


def alerter_for(settings: Settings) -> Alerter | None:
    """The :class:`~goatbeat.core.alerts.Alerter` of the ``alert_hook`` and ``alert_webhook``
    settings (None when neither is set). The hook is imported now, so a wrong path fails
    when the scheduler starts, naming the setting."""
    handlers: list[AlertHandler] = []
    if settings.alert_hook:
        from goatbeat.submitters.dotted import import_dotted

        try:
            hook = import_dotted(settings.alert_hook)
        except LookupError as exc:
            raise InvalidValue("alert_hook", settings.alert_hook, str(exc)) from None
        if not callable(hook):
            raise InvalidValue(
                "alert_hook", settings.alert_hook, f"{settings.alert_hook!r} is not callable"
            )
        handlers.append(hook)
    if settings.alert_webhook:
        handlers.append(webhook(settings.alert_webhook))
    return Alerter(handlers) if handlers else None


class Beat:
    """Schedules declared in code, a store, a submitter and the settings of the loop.

    ``database``: ``"sqlite:///goatbeat.db"`` (default), ``"memory://"`` or
    ``"postgresql://user@host/db"``. ``submitter``: a name for
    :func:`goatbeat.submitters.load_submitter` (``"inline"``, ``"celery"`` ...) or a
    :class:`~goatbeat.core.submit.TaskSubmitter`; ``submitter_options`` go to its constructor
    (``{"app": "proj.celery:app"}``, ``{"connection": "redis://..."}``). ``timezone``: the zone of cron schedules
    that do not name one. ``settings``: a :class:`Settings` or a mapping of the ``GOATBEAT``
    keys (``lease_ttl``, ``batch_size`` ...), validated at once."""

    def __init__(
        self,
        database: str = "sqlite:///goatbeat.db",
        *,
        submitter: str | TaskSubmitter = "inline",
        submitter_options: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        settings: Settings | Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(database, str) or not database.strip():
            raise InvalidValue("database", database, f"{database!r} is not a database URL")
        get_zone(timezone, "timezone")
        if isinstance(settings, Settings):
            self.settings = dataclasses.replace(settings, database=database, timezone=timezone)
        else:
            self.settings = parse_settings(
                settings, defaults={"database": database, "timezone": timezone}
            )
        self.clock = clock
        self._submitter_spec = submitter
        self._submitter_options = dict(submitter_options or {})
        self._submitter: TaskSubmitter | None = None
        self._store: ScheduleStore | None = None
        self._declared: dict[str, Schedule] = {}
        self._callables: dict[str, Callable[..., Any]] = {}
        self._allow_list: TaskAllowList | None = None
        self._triggers: dict[tuple[Any, ...], Trigger] = {}
        self._zones: set[str] = set()
        """The zone names declarations gave that :func:`get_zone` accepted."""
        self._renames: dict[str, str] = {}
        """``{new name: old name}`` of the declarations that say ``renamed_from=``."""
        self._released: tuple[str, frozenset[str]] | None = None
        """(names joined by newlines, tasks) of the declarations once
        :meth:`release_declarations` let go of them."""

    def __repr__(self) -> str:
        return (
            f"<Beat {self.database!r} submitter={self._submitter_name()!r} "
            f"schedules={len(self._declared)}>"
        )

    # -- configuration ---------------------------------------------------------------------------

    @property
    def database(self) -> str:
        return self.settings.database

    @property
    def timezone(self) -> str:
        return self.settings.timezone

    def use_database(self, database: str) -> None:
        """Point at another database (the CLI's ``--database``); only before the store opens."""
        if self._store is not None:
            raise InvalidValue("database", database, "the store is already open")
        if not isinstance(database, str) or not database.strip():
            raise InvalidValue("database", database, f"{database!r} is not a database URL")
        self.settings = dataclasses.replace(self.settings, database=database)

    def configure(self, **overrides: Any) -> Settings:
        """Change settings keys (``lease_ttl="3s"`` ...), validated like ``GOATBEAT``."""
        for key in ("database", "listen_database", "pooled", "poll_interval"):
            if key in overrides and self._store is not None:
                raise InvalidValue(key, overrides[key], "the store is already open")
        current = dataclasses.asdict(self.settings)
        self.settings = parse_settings(overrides, defaults=current)
        return self.settings

    @property
    def submitter(self) -> TaskSubmitter:
        """The submitter, created on first use (and bound to the store if it wants it)."""
        if self._submitter is None:
            from goatbeat.submitters import load_submitter

            submitter = load_submitter(self._submitter_spec, **self._submitter_options)
            register = capability(submitter, "register")
            for path, func in self._callables.items():
                register(path, func)
            self._submitter = submitter
            if self._store is not None:
                self._bind(submitter, self._store)
        return self._submitter

    def _submitter_name(self) -> str:
        spec = self._submitter_spec
        return spec if isinstance(spec, str) else getattr(spec, "name", type(spec).__name__)

    @property
    def store(self) -> ScheduleStore:
        """The store, opened on first use. SQLite and memory stores are migrated on opening."""
        if self._store is None:
            from goatbeat.stores import open_store

            settings = self.settings
            store = open_store(
                self.database,
                clock=self.clock,
                pooled=settings.pooled,
                listen_database=settings.listen_database,
                poll_interval=settings.poll_interval.total_seconds(),
            )
            if self.database.startswith(_EMBEDDED_PREFIXES):
                store.migrate()
            self._store = store
            if self._submitter is not None:
                self._bind(self._submitter, store)
        return self._store

    @staticmethod
    def _bind(submitter: TaskSubmitter, store: ScheduleStore) -> None:
        capability(submitter, "bind")(store)

    # -- declaring -------------------------------------------------------------------------------

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
        renamed_from = options.pop("renamed_from", None)
        if renamed_from is not None:
            self._check_rename(name, renamed_from)
        _check_option_names(options)
        # A past at= is judged at publication, against the store (_refused_one_offs).
        schedule = self._build(
            name=name, task=task, source=Source.CODE, check_future=False, **options
        )
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

    # -- the allow-list --------------------------------------------------------------------------

    def task_allow_list(self, settings: Settings | None = None) -> TaskAllowList:
        """The tasks schedules stored outside code may name (:mod:`goatbeat.core.allowlist`):
        the tasks of this app's code schedules, the tasks its submitter's backend registered,
        and the ``allowed_tasks`` patterns of ``settings`` (default: the app's), checked on
        what a name resolves to when the backend imports dotted paths (the submitter's
        ``task_definition``)."""
        patterns = (settings or self.settings).allowed_tasks
        return TaskAllowList(
            patterns=patterns,
            declared=self._declared_tasks,
            registered=lambda: known_tasks(self.submitter),
            definition=lambda task: definition_path(self.submitter, task),
        )

    def _declared_tasks(self) -> set[str]:
        if self._released is not None:
            return set(self._released[1])
        return {s.task for s in self._declared.values()}

    def check_task(self, task: str) -> None:
        """Raise :class:`~goatbeat.core.errors.TaskNotAllowed` (field ``task``) unless a
        schedule created outside code (admin, API, importer) may name ``task``. Imports
        ``task`` only when an ``allowed_tasks`` pattern matches it and the backend imports
        dotted paths (to see what it resolves to). The one check every such entry point
        calls."""
        allow = self._allow_list
        if allow is None or allow.patterns != self.settings.allowed_tasks:
            allow = self._allow_list = self.task_allow_list()
        allow.check(task)

    # -- talking to the store ----------------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade the schema (idempotent)."""
        self.store.migrate()

    def publish(
        self, *, dry_run: bool = False, origin: str = "publish", rollback: bool = False
    ) -> PublishResult:
        """Upsert the declared schedules (source ``code``) into the store, and say what it did.

        ``origin`` names what publishes (``"publish"``, ``"scheduler"``, ``"schedule list"``
        ...) for the log. Every publication logs ``schedule.published`` (created, updated,
        unchanged, orphaned), one ``schedule.changed`` per rewritten definition (its fields,
        old and new; a WARNING unless the origin is one of :data:`PUBLISHING_ORIGINS`, since
        a stale checkout would revert what the deployed code declares) and one
        ``schedule.orphaned`` WARNING per enabled code schedule no longer declared. With
        ``dry_run`` nothing is written and nothing logged: the result says what would happen.

        Publications are ordered (the ``release`` setting, else the publications' own
        order): code older than the release that published the stored definitions writes
        nothing and logs ``schedule.publication_superseded`` at WARNING naming the schedules
        kept; the result is ``superseded``. ``rollback=True`` publishes older code on purpose."""
        if self._released is not None:
            raise InvalidValue(
                "schedules", None, "the declarations were released after the start-up publication"
            )
        submitter = self.submitter
        for schedule in self._declared.values():
            submitter.validate(schedule)
        for new, old in self._renames.items():
            if old in self._declared:
                raise InvalidSchedule(
                    "renamed_from",
                    old,
                    f"schedule {new!r} says it was {old!r} before, but {old!r} is still "
                    "declared: remove one of the two",
                )
        schedules = self.schedules
        refused = self._refused_one_offs(schedules)
        if refused:
            schedules = [s for s in schedules if s.name not in refused]
        result = self.store.publish(
            schedules,
            source=Source.CODE,
            dry_run=dry_run,
            release=self.settings.release,
            rollback=rollback,
            renames=self._renames,
        )
        if refused:
            result = dataclasses.replace(
                result,
                refused=refused,
                orphaned=[name for name in result.orphaned if name not in refused],
            )
        if not dry_run:
            log_publication(result, origin=origin)
        return result

    def _refused_one_offs(self, schedules: Sequence[Schedule]) -> dict[str, str]:
        """The declared one-offs whose instant is past and that the store does not already
        hold with that instant, each with the reason. A stored one with the same instant is
        ended (it ran, was missed or skipped): publishing it is no error, whatever the time."""
        now = (self.clock or SystemClock()).now()
        refused: dict[str, str] = {}
        for schedule in schedules:
            trigger = schedule.trigger
            if not isinstance(trigger, OnceTrigger) or trigger.at > now:
                continue
            try:
                stored = self.store.get(schedule.name)
            except ScheduleNotFound:
                stored = None
            if (
                stored is not None
                and not isinstance(stored, DamagedSchedule)
                and stored.source is Source.CODE
                and stored.trigger == trigger
            ):
                continue
            refused[schedule.name] = (
                f"the one-off instant {iso_z(trigger.at)} is already past (now {iso_z(now)}) "
                "and was never stored with it: declare a future instant, or remove the "
                "declaration"
            )
        return refused

    def prune(self) -> list[str]:
        """Disable code schedules in the store that are no longer declared."""
        if self._released is None:
            keep = set(self._declared)
            check = self.store.publish(
                self.schedules,
                source=Source.CODE,
                dry_run=True,
                release=self.settings.release,
                renames=self._renames,
            )
            if check.superseded:
                raise InvalidValue(
                    "schedules",
                    None,
                    f"not pruning: this code is older than the published schedules "
                    f"({check.reason}); prune from the newer release",
                )
        else:
            keep = set(self._released[0].split("\n")) if self._released[0] else set()
        names = self.store.prune(keep, source=Source.CODE)
        if names:
            log_event("schedule.pruned", schedules=names)
        return names

    def publish_at_start(self) -> PublishResult:
        """What a scheduler does when it starts: publish, then (``prune_on_publish``) disable
        the orphaned code schedules."""
        result = self.publish(origin="scheduler")
        if self.settings.prune_on_publish and result.orphaned and not result.superseded:
            self.prune()
        return result

    def release_declarations(self) -> None:
        """Let go of the declared :class:`Schedule` values once they are published, keeping
        only what a running scheduler still asks (their names, for :meth:`prune`, and their
        tasks, for the allow-list): a long-running ``goatbeat scheduler`` of 100,000 code
        schedules does not hold them all for its lifetime. Afterwards :attr:`schedules` is
        empty, and :meth:`publish` refuses (it would disable everything as orphaned)."""
        if self._released is None:
            # The names as one string (a name holds no control character): 100,000 small
            # strings kept alive would pin the memory the declarations shared with them.
            self._released = (
                "\n".join(self._declared),
                frozenset(s.task for s in self._declared.values()),
            )
        self._declared = {}
        self._triggers = {}

    def run_now(self, name: str) -> Execution:
        """Ask the leader for an extra run of ``name`` now."""
        execution = self.store.request_run(name)
        log_event(
            "schedule.run_requested", schedule=name, idempotency_key=execution.idempotency_key
        )
        return execution

    # -- schedules stored in the database (admin, CLI, API) -------------------------------------------

    def create(self, *, name: str, task: str, **options: Any) -> Schedule:
        """Store a new schedule (source ``admin``) from the options :meth:`schedule` takes:
        validated as a declaration is, its task checked against the allow-list (only a known
        task), its options by the submitter. ``InvalidSchedule`` (field ``name``) when the
        name exists. Logs ``schedule.created``."""
        if not isinstance(task, str):
            raise InvalidSchedule("task", task, "a stored schedule names its task by its path")
        schedule = self._build(name=name, task=task, source=Source.ADMIN, **options)
        self.check_task(schedule.task)
        self.submitter.validate(schedule)
        stored = self.store.create(schedule)
        log_event("schedule.created", schedule=name, task=stored.task, source=stored.source)
        return stored

    def edit(self, name: str, **changes: Any) -> tuple[Schedule, list[FieldChange]]:
        """Change a stored schedule that is not declared in code: each option given (as
        :meth:`schedule` takes them; ``None`` clears ``start_at``, ``end_at``, ``max_runtime``,
        ``pause_on_failure`` and the routing options) replaces the stored value, the rest
        stays as stored (a trigger none of whose options is given is kept exactly, so an
        interval keeps its phase). Written with compare-and-set on the version read. A code
        schedule is refused (``InvalidSchedule``, field ``source``): its definition lives in
        code. Returns the stored schedule and the fields changed, old -> new; logs
        ``schedule.changed``."""
        stored = self.store.get(name)
        if isinstance(stored, DamagedSchedule):
            raise stored.error
        if stored.source is Source.CODE:
            raise InvalidSchedule(
                "source",
                stored.source.value,
                f"schedule {name!r} is declared in code: change its declaration and publish; "
                "only enable, disable, pause, resume, run and backfill apply to it",
            )
        options = options_of(stored)
        if {"cron", "every", "at", "solar", "trigger"} & set(changes):
            options.pop("trigger")
        else:
            options.update(trigger_options(stored.trigger, changes))
        options.update(changes)
        rebuilt = self._build(
            name=name, task=options.pop("task"), source=stored.source, check_future=False, **options
        )
        if isinstance(rebuilt.trigger, OnceTrigger) and rebuilt.trigger != stored.trigger:
            self._check_future(name, rebuilt.trigger)
        if rebuilt.task != stored.task:
            self.check_task(rebuilt.task)
        self.submitter.validate(rebuilt)
        from goatbeat.stores import schedule_changes

        changed = schedule_changes(stored, rebuilt)
        result = self.store.update(
            rebuilt.evolve(enabled=stored.enabled), expected_version=stored.version
        )
        if changed:
            log_event(
                "schedule.changed",
                schedule=name,
                fields=[c.field for c in changed],
                old={c.field: c.old for c in changed},
                new={c.field: c.new for c in changed},
                origin="edit",
            )
        return result, changed

    def create_schedule(self, schedule: Schedule, *, origin: str = "create") -> Schedule:
        """Store ``schedule``, already built and checked (the admin's form builds it with the
        core's types, its task through :meth:`check_task`); logs ``schedule.created``, as
        :meth:`create` does. ``InvalidSchedule`` (field ``name``) when the name exists."""
        stored = self.store.create(schedule)
        log_event(
            "schedule.created",
            schedule=stored.name,
            task=stored.task,
            source=stored.source,
            origin=origin,
        )
        return stored

    def update_schedule(
        self, schedule: Schedule, *, origin: str = "update"
    ) -> tuple[Schedule, list[FieldChange]]:
        """Replace the stored definition of ``schedule.name`` by ``schedule`` (built and
        checked as for :meth:`create_schedule`). Returns the stored schedule and the fields
        changed, old -> new; logs ``schedule.changed`` when any did, as :meth:`edit` does."""
        from goatbeat.stores import schedule_changes

        before = self.store.get(schedule.name)
        result = self.store.update(schedule)
        changed = [] if isinstance(before, DamagedSchedule) else schedule_changes(before, result)
        if changed or isinstance(before, DamagedSchedule):
            log_event(
                "schedule.changed",
                schedule=schedule.name,
                fields=[c.field for c in changed],
                old={c.field: c.old for c in changed},
                new={c.field: c.new for c in changed},
                origin=origin,
            )
        return result, changed

    def delete(self, name: str, *, origin: str = "delete") -> None:
        """Delete ``name`` (its executions stay as history); logs ``schedule.deleted`` with
        its source. ``ScheduleNotFound`` if absent."""
        source = self.store.get(name).source
        self.store.delete(name)
        log_event("schedule.deleted", schedule=name, source=str(source), origin=origin)

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        """Enable or disable a stored schedule (any source); logs ``schedule.enabled`` /
        ``schedule.disabled``."""
        stored = self.store.set_enabled(name, enabled)
        log_event("schedule.enabled" if enabled else "schedule.disabled", schedule=name)
        return stored

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        """Pause ``name`` (any source): nothing is claimed until :meth:`resume`. ``note``
        says why and ``by`` who; both show in ``schedule list/show`` and the admin. Logs
        ``schedule.paused``."""
        stored = self.store.pause(name, note=note, by=by)
        log_event("schedule.paused", schedule=name, note=note or None, by=by)
        return stored

    def resume(self, name: str, *, catch_up: bool = False) -> ResumeResult:
        """Resume ``name``: from now (the pause's occurrences are counted as skipped, one
        summary line ``schedule.resumed`` with the count), or with ``catch_up`` (the next
        claim runs them by the misfire policy and ``catch_up_limit``)."""
        result = self.store.resume(name, catch_up=catch_up)
        if result.was_paused:
            log_event(
                "schedule.resumed",
                schedule=name,
                catch_up=catch_up,
                skipped=result.skipped,
                skipped_is_lower_bound=result.skipped_is_lower_bound or None,
                first_skipped=result.first_skipped,
            )
        return result

    def backfill(
        self,
        name: str,
        *,
        start: datetime | str,
        end: datetime | str,
        limit: int = 100,
        dry_run: bool = False,
    ) -> BackfillResult:
        """Submit every instant of ``name`` in ``[start, end)`` once, through the leading
        scheduler, under the scheduled idempotency keys: an instant that already ran is
        reported in ``existing`` and never submitted again. More than ``limit`` instants, a
        range reaching past now, or an empty one: ``InvalidValue`` and nothing written.
        Logs ``schedule.backfilled``."""
        result = self.store.backfill(
            name,
            start=parse_instant(start, "start"),
            end=parse_instant(end, "end"),
            limit=limit,
            dry_run=dry_run,
        )
        if not dry_run:
            log_event(
                "schedule.backfilled",
                schedule=name,
                created=len(result.created),
                existing=len(result.existing),
                first=result.instants[0] if result.instants else None,
                last=result.instants[-1] if result.instants else None,
            )
        return result

    def scheduler(self, **overrides: Any) -> Scheduler:
        """A :class:`Scheduler` on this store and submitter; ``overrides`` are settings keys.
        It refuses stored schedules whose task is outside :meth:`task_allow_list`."""
        settings = self.settings
        if overrides:
            settings = parse_settings(overrides, defaults=dataclasses.asdict(settings))
        return Scheduler(
            self.store,
            self.submitter,
            settings=settings,
            clock=self.clock,
            allowed=self.task_allow_list(settings),
            alerter=alerter_for(settings),
        )

    def run(self, **overrides: Any) -> None:
        """Publish (and prune with ``prune_on_publish``), then run the scheduler until
        SIGTERM/SIGINT."""
        self.publish_at_start()
        self.scheduler(**overrides).run()

    def close(self) -> None:
        """Close the submitter and the store. Idempotent."""
        if self._submitter is not None:
            self._submitter.close()
        if self._store is not None:
            self._store.close()
            self._store = None


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


_SCHEDULE_OPTIONS = frozenset(inspect.signature(Beat._build).parameters) - {
    "self",
    "name",
    "task",
    "source",
    "check_future",
}
