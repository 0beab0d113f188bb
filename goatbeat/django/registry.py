"""Code schedules of a Django project: ``DjangoRegistry``, ``call`` and ``schedules.py`` discovery.

Every installed app may ship a ``schedules.py`` with ``register(beat)``; :func:`autodiscover`
imports them when Django starts (the app config calls it, as the admin does with ``admin.py``)
and calls each ``register`` with the project's registry. Declaring validates at once, with the
same core types and rules as :class:`goatbeat.beat.Beat` (the registry *is* a Beat).

Discovery goes through every app and collects every problem (a bad cron expression, a task
that does not exist, a name declared by two apps, a ``schedules.py`` that fails to import),
each naming the app and the schedule: :attr:`DjangoRegistry.problems`. They fail Django's
system checks (``goatbeat.E001``, so ``manage.py check``, ``migrate`` and ``runserver`` say so)
and every use of the declarations (``manage.py goatbeat ...``, publishing, pruning, the
scheduler), all listed in one :class:`DeclarationError`. They do not fail the project's start:
a web process keeps serving its pages, and the admin says what is wrong.

A task may be a Django Task, a Celery task, a Dramatiq actor, a plain function (RQ) or a dotted
path. The registry remembers which backend each declared task object belongs to
(:func:`~goatbeat.django.submitter.backend_of`);
:class:`~goatbeat.django.submitter.DjangoRoutingSubmitter` hands each occurrence to it.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goatbeat.beat import Beat, task_path
from goatbeat.core.errors import ConfigError, GoatbeatError, InvalidSchedule, InvalidValue
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import PublishResult, ScheduleStore
from goatbeat.core.submit import capability
from goatbeat.django.submitter import DjangoRoutingSubmitter, backend_of

if TYPE_CHECKING:
    from goatbeat.django.conf import DjangoSettings

__all__ = [
    "Call",
    "DeclarationError",
    "DjangoRegistry",
    "autodiscover",
    "backend_of",
    "discover_into",
    "call",
    "get_registry",
    "get_store",
    "rediscover",
    "reset_store",
]


@dataclass(frozen=True, slots=True)
class Call:
    """A task bound to the arguments each run receives: ``call(send_email, 42)``."""

    task: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def call(func: Any, /, *args: Any, **kwargs: Any) -> Call:
    """Bind ``args`` and ``kwargs`` to ``func`` for a schedule's ``task=``."""
    return Call(func, tuple(args), dict(kwargs))


class DeclarationError(ConfigError):
    """The project's ``schedules.py`` files declare something invalid. ``problems`` lists
    every one, each naming the app and the schedule."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        GoatbeatError.__init__(
            self,
            f"schedules.py: {count} problem{'s' if count != 1 else ''} to fix first: "
            + "; ".join(self.problems),
        )


class DjangoRegistry(Beat):
    """The schedules a Django project declares in code, and its store and submitter.

    ``beat.schedule(name=, task=, cron= | every= | at= | solar= | trigger=, args=, kwargs=,
    queue=, ..., misfire=, misfire_grace=)`` as with :class:`~goatbeat.beat.Beat`; ``task``
    may also be ``call(func, *args, **kwargs)``. The store is the PostgreSQL database named by
    ``GOATBEAT['database']``, reached through Django's own connection."""

    def __init__(self, settings: DjangoSettings | None = None) -> None:
        from goatbeat.django import conf

        django_settings = settings or conf.get()
        self.django_settings = django_settings
        self.backends: dict[str, str] = {}
        """Task path -> backend, for every task declared as an object."""
        self.declared_in: dict[str, str] = {}
        """Schedule name -> label of the app whose ``schedules.py`` declared it."""
        self.problems: list[str] = []
        """What discovery found wrong, each naming the app and the schedule."""
        self._app: str | None = None  # the app whose register() runs (discovery only)
        self._target: str | None = None  # --database: a URL or a DATABASES alias
        self._target_store: ScheduleStore | None = None
        routing = DjangoRoutingSubmitter(
            pinned=django_settings.submitter,
            options=django_settings.submitter_options,
            backends=self.backends,
        )
        super().__init__(
            django_settings.database,
            submitter=routing,
            timezone=django_settings.core.timezone,
            settings=django_settings.core,
        )

    def __repr__(self) -> str:
        return f"<DjangoRegistry database={self.database!r} schedules={len(self.schedules)}>"

    @property
    def store(self) -> ScheduleStore:
        """This thread's store over Django's connection for ``GOATBEAT['database']``; with
        :meth:`use_database`, that database's."""
        store = get_store() if self._target is None else self._target_opened()
        capability(self.submitter, "bind")(store)
        return store

    def schedule(self, *, name: str | None = None, task: Any = None, **options: Any) -> Any:
        try:
            if isinstance(task, Call):
                if task.args and "args" in options:
                    raise InvalidSchedule(
                        "args", options["args"], "give args in call(...) or args="
                    )
                if task.kwargs and "kwargs" in options:
                    raise InvalidSchedule(
                        "kwargs", options["kwargs"], "give kwargs in call(...) or kwargs="
                    )
                if task.args:
                    options["args"] = task.args
                if task.kwargs:
                    options["kwargs"] = dict(task.kwargs)
                task = task.task
            return super().schedule(name=name, task=task, **options)
        except InvalidValue as exc:
            return self._problem(name, exc)

    def _declare(self, *, name: str, task: Any, **options: Any) -> Any:
        first = self.declared_in.get(name)
        try:
            if self._app is not None and first is not None:
                where = (
                    f"twice in app {first!r}"
                    if first == self._app
                    else f"in app {first!r} and in app {self._app!r}"
                )
                raise InvalidSchedule("name", name, f"{name!r} is declared {where}")
            declared = super()._declare(name=name, task=task, **options)
        except InvalidValue as exc:
            return self._problem(name, exc)
        backend = backend_of(task)
        if backend is not None:
            self.backends[task_path(task)] = backend
        self.declared_in[name] = self._app or ""
        return declared

    def _problem(self, name: str | None, exc: InvalidValue) -> None:
        """During discovery, note the problem (naming the app and the schedule) and go on,
        so that every problem is reported at once; otherwise raise it."""
        if self._app is None:
            raise exc
        self.problems.append(f"app {self._app!r}: schedule {name!r}: {exc}")

    def check(self) -> None:
        """Raise :class:`DeclarationError` listing every problem discovery found."""
        if self.problems:
            raise DeclarationError(self.problems)

    def publish(
        self, *, dry_run: bool = False, origin: str = "publish", rollback: bool = False
    ) -> PublishResult:
        self.check()  # a partial set of declarations would orphan the missing ones
        return super().publish(dry_run=dry_run, origin=origin, rollback=rollback)

    def publish_at_start(self) -> PublishResult:
        self.check()
        return super().publish_at_start()

    def prune(self) -> list[str]:
        self.check()  # it would disable every schedule of an app whose schedules.py failed
        return super().prune()

    def scheduler(self, **overrides: Any) -> Scheduler:
        self.check()
        return super().scheduler(**overrides)

    def names(self) -> list[str]:
        """The names declared in code, in declaration order."""
        return [s.name for s in self.schedules]

    def use_database(self, database: str) -> None:
        """The CLI's ``--database`` (``goatbeat --database URL ...`` with
        ``DJANGO_SETTINGS_MODULE`` set, ``manage.py goatbeat --database URL ...``): every
        command works on that database instead of ``GOATBEAT['database']``, the project's
        ``schedules.py`` declarations included. A URL (``postgresql://...``, ``sqlite:///...``)
        gets a store of its own; a name is a ``DATABASES`` alias, reached through Django's
        connection. Until :meth:`close`."""
        if not isinstance(database, str) or not database.strip():
            raise InvalidValue("database", database, f"{database!r} is not a database URL")
        if "://" not in database:
            from django.db import connections

            if database not in connections:
                raise InvalidValue(
                    "database",
                    database,
                    f"{database!r} is neither a URL nor an alias of DATABASES "
                    f"({', '.join(sorted(connections))})",
                )
        self._close_target()
        self._target = database
        self.settings = dataclasses.replace(self.settings, database=database)

    def _target_opened(self) -> ScheduleStore:
        assert self._target is not None
        if self._target_store is None:
            if "://" in self._target:
                from goatbeat.stores import open_store

                self._target_store = open_store(self._target)
            else:
                from goatbeat.django.connection import DjangoConnectionProvider
                from goatbeat.stores.postgres import PostgresStore

                self._target_store = PostgresStore(
                    connection_provider=DjangoConnectionProvider(self._target)
                )
        return self._target_store

    def _close_target(self) -> None:
        if self._target_store is not None:
            self._target_store.close()
        self._target_store = None
        self._target = None
        self.settings = dataclasses.replace(
            self.settings, database=self.django_settings.core.database
        )

    def close(self) -> None:
        """Close the submitters and the ``--database`` store (the project's own connection
        belongs to Django), and forget ``--database``."""
        try:
            self.submitter.close()
        finally:
            self._close_target()


_registry: DjangoRegistry | None = None
_lock = threading.RLock()


def get_registry() -> DjangoRegistry:
    """The project's registry, filled by :func:`autodiscover` on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = _discover()
        return _registry


def autodiscover() -> DjangoRegistry:
    """Import every installed app's ``schedules.py`` and call its ``register(beat)``.

    The app config runs it at startup; later calls return the same registry."""
    return get_registry()


def rediscover() -> DjangoRegistry:
    """Discover again from scratch (after settings or INSTALLED_APPS changed)."""
    global _registry
    with _lock:
        _registry = None
        return get_registry()


def _discover() -> DjangoRegistry:
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    registry = DjangoRegistry()
    found = [
        (app_config.label, f"{app_config.name}.schedules")
        for app_config in apps.get_app_configs()
        if module_has_submodule(app_config.module, "schedules")
    ]
    discover_into(registry, found)
    return registry


def discover_into(registry: DjangoRegistry, modules: Iterable[tuple[str, str]]) -> None:
    """Import each ``(app label, module)`` and call its ``register(registry)``, going on
    after a problem so that :attr:`DjangoRegistry.problems` lists all of them."""
    for label, module_name in modules:
        registry._app = label
        try:
            module = importlib.import_module(module_name)
            register: Callable[[DjangoRegistry], None] | None = getattr(module, "register", None)
            # An app may have a schedules.py of its own that has nothing to do with goatbeat.
            if callable(register):
                register(registry)
        except Exception as exc:
            registry.problems.append(f"app {label!r}: {module_name} failed: {_where(exc)}")
        finally:
            registry._app = None


def _where(exc: BaseException) -> str:
    """``Type: message (file:line)``: where the project's code failed, in one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    place = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{place}"


_stores = threading.local()


def get_store() -> ScheduleStore:
    """This thread's PostgresStore over Django's connection for ``GOATBEAT['database']``.

    Django's connections are per thread, so each thread gets its own store object."""
    from goatbeat.django import conf

    core = conf.get().core
    alias = core.database
    store: ScheduleStore | None = getattr(_stores, "store", None)
    if store is None or getattr(_stores, "alias", None) != alias:
        from goatbeat.django.connection import DjangoConnectionProvider
        from goatbeat.stores.postgres import PostgresStore

        listen = core.listen_database
        store = PostgresStore(
            connection_provider=DjangoConnectionProvider(alias),
            pooled=core.pooled,
            # A URL gets a connection of the store's own; an alias, Django's for this thread.
            listen_database=listen if listen and "://" in listen else None,
            listen_provider=(
                DjangoConnectionProvider(listen) if listen and "://" not in listen else None
            ),
            poll_interval=core.poll_interval.total_seconds(),
        )
        _stores.store = store
        _stores.alias = alias
    return store


def reset_store() -> None:
    """Forget this thread's store (settings changed)."""
    _stores.__dict__.clear()
