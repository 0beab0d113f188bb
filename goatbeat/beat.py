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
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from goatbeat.core.alerts import Alerter, AlertHandler, webhook
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.clock import Clock
from goatbeat.core.config import Settings, parse_settings
from goatbeat.core.errors import InvalidSchedule, InvalidValue
from goatbeat.core.model import (
    DamagedSchedule,
    Execution,
    Schedule,
    Source,
    StoredSchedule,
)
from goatbeat.core.observability import log_event
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import BackfillResult, FieldChange, ResumeResult, ScheduleStore
from goatbeat.core.submit import TaskSubmitter, capability, known_tasks
from goatbeat.core.timeutil import get_zone, parse_instant
from goatbeat.core.triggers import OnceTrigger, Trigger
from goatbeat.declaring import (
    DeclaringMixin,
    build_trigger,
    definition_path,
    options_of,
    task_path,
    trigger_options,
)
from goatbeat.publication import PUBLISHING_ORIGINS, PublicationMixin, log_publication

__all__ = [
    "Beat",
    "task_path",
    "build_trigger",
    "log_publication",
    "alerter_for",
    "PUBLISHING_ORIGINS",
]

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


class Beat(DeclaringMixin, PublicationMixin):
    """Schedules declared in code, a store, a submitter and the settings of the loop.

    ``database``: ``"sqlite:///goatbeat.db"`` (default), ``"memory://"`` or
    ``"postgresql://user@host/db"``. ``submitter``: a name for
    :func:`goatbeat.submitters.load_submitter` (``"inline"``, ``"celery"`` ...) or a
    :class:`~goatbeat.core.submit.TaskSubmitter`; ``submitter_options`` go to its constructor
    (``{"app": "proj.celery:app"}``, ``{"connection": "redis://..."}``). ``timezone``: the zone of cron schedules
    that do not name one. ``settings``: a :class:`Settings` or a mapping of the ``GOATBEAT``
    keys (``lease_ttl``, ``batch_size`` ...), validated at once.

    Declaring (:meth:`schedule`) is :class:`~goatbeat.declaring.DeclaringMixin`'s, publishing
    (:meth:`publish`, :meth:`prune`) :class:`~goatbeat.publication.PublicationMixin`'s; here
    are the configuration, the store and the submitter, the allow-list, the schedules stored
    in the database, and the scheduler."""

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
