"""DjangoRoutingSubmitter: one Django project, several task backends.

A Django project may declare Django Tasks, Celery tasks, Dramatiq actors and RQ functions side
by side. This submitter hands each occurrence to the backend its task belongs to: the one
recorded when the task object was declared in ``schedules.py``; else the backend whose registry
knows the name (a task of the Celery app, an actor of the configured Dramatiq broker: admin
schedules and imports name them by plain string); else the one found by importing the task's
dotted path — unless ``GOATBEAT['submitter']`` pins one backend for everything. What a name
resolves to is what the allow-list checks (:meth:`DjangoRoutingSubmitter.task_definition`):
a Celery or Dramatiq name as a name, the rest where its callable is defined. Backends are
created on first use with ``GOATBEAT['submitter_options']``; Dramatiq's broker is the one given
there or set with ``dramatiq.set_broker()``, never Dramatiq's default on localhost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from goatbeat.core.allowlist import defined_at
from goatbeat.core.errors import InvalidSchedule, InvalidValue, PermanentSubmitError
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import (
    BaseSubmitter,
    TaskSubmitter,
    awaits_bookkeeping,
    capability,
    known_tasks,
    submit_all,
    task_definition,
)
from goatbeat.submitters.dotted import import_dotted as import_task

__all__ = ["DjangoRoutingSubmitter", "backend_of", "import_task"]


def backend_of(task: Any) -> str | None:
    """The submitter a task object belongs to, from what it is; None for a dotted path.

    ``django_tasks`` for a ``django.tasks.Task``, ``celery`` for a Celery task, ``dramatiq``
    for an actor, ``rq`` for any other function (RQ enqueues plain functions)."""
    if isinstance(task, str):
        return None
    from goatbeat.django.versions import django_task_type

    django_task = django_task_type()  # None before Django 6.0
    if django_task is not None and isinstance(task, django_task):
        return "django_tasks"
    roots = {f"{c.__module__.partition('.')[0]}.{c.__name__}" for c in type(task).__mro__}
    if "celery.Task" in roots or (
        callable(getattr(task, "apply_async", None))
        and isinstance(getattr(task, "name", None), str)
    ):
        return "celery"
    if "dramatiq.Actor" in roots or (
        callable(getattr(task, "send_with_options", None)) and hasattr(task, "actor_name")
    ):
        return "dramatiq"
    if callable(task):
        return "rq"
    return None


class DjangoRoutingSubmitter(BaseSubmitter):
    """Routes each occurrence to the submitter of its task's backend."""

    name: ClassVar[str] = "django"
    # Each backend checks its own capabilities in validate(); the router itself honours all.
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_exchange: ClassVar[bool] = True
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True

    def __init__(
        self,
        *,
        pinned: str | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        backends: Mapping[str, str] | None = None,
    ) -> None:
        self.pinned = pinned
        self.options = {k: dict(v) for k, v in (options or {}).items()}
        self.backends = backends if backends is not None else {}
        self._detected: dict[str, str] = {}
        self._celery_apps: dict[str, Any] = {}
        self._submitters: dict[str, TaskSubmitter] = {}
        self._store: ScheduleStore | None = None
        self._callables: dict[str, Any] = {}

    # -- which backend ----------------------------------------------------------------------------

    def backend_for(self, task: str) -> str:
        """The backend name for a task path; LookupError when it cannot be told."""
        if self.pinned is not None:
            return self.pinned
        known = self.backends.get(task) or self._detected.get(task)
        if known is not None:
            return known
        registered = self._registered_backend(task)
        if registered is not None:
            self._detected[task] = registered
            return registered
        obj = import_task(task)
        backend = backend_of(obj)
        if backend is None:
            raise LookupError(f"{task!r} is a {type(obj).__name__}, not a task")
        if backend == "celery":
            self._celery_apps.setdefault("celery", getattr(obj, "app", None))
        self._detected[task] = backend
        return backend

    def task_definition(self, task: str) -> str:
        """What ``task`` runs, for the allow-list: the name itself for a backend that finds it
        by registered name (a Celery task, a Dramatiq actor: the worker runs only a task
        registered under that name), else where the callable it resolves to is defined (the
        ``module_path`` of a Django Task, the ``module.qualname`` of an RQ or inline function),
        so a path walked through what a module imported is not taken for the module's own.
        ``LookupError`` when it names nothing that can run."""
        if self.pinned is not None:
            define = task_definition(self.submitter_for(self.pinned))
            return task if define is None else define(task)
        if self._registered_backend(task) is not None:
            return task
        obj = import_task(task)
        backend = backend_of(obj)
        if backend in ("celery", "dramatiq"):
            return task
        if backend == "django_tasks":
            return str(obj.module_path)
        if backend is None:
            raise LookupError(f"{task!r} is a {type(obj).__name__}, not a task")
        return defined_at(obj)

    def _registered_backend(self, task: str) -> str | None:
        """The backend whose registry knows the name ``task`` (a Celery task name such as
        ``"reports.daily"``, a Dramatiq actor name such as ``"send_digest"``), without
        importing anything; None when none does."""
        loaded = self._submitters.get("celery")
        celery_app = (
            getattr(loaded, "app", None) or self._celery_apps.get("celery") or _current_celery_app()
        )
        if celery_app is not None and task in celery_app.tasks:
            return "celery"
        if self._dramatiq_configured():
            try:
                broker = getattr(self.submitter_for("dramatiq"), "broker", None)
            except (InvalidValue, LookupError):
                broker = None
            if task in (getattr(broker, "actors", None) or {}):
                return "dramatiq"
        return None

    def _dramatiq_configured(self) -> bool:
        """Whether a Dramatiq broker is given (the option, or ``dramatiq.set_broker()``):
        asking Dramatiq for one would create its default on localhost."""
        if "broker" in self.options.get("dramatiq", {}):
            return True
        try:
            import dramatiq.broker
        except ImportError:
            return False
        return dramatiq.broker.global_broker is not None

    def submitter_for(self, backend: str) -> TaskSubmitter:
        found = self._submitters.get(backend)
        if found is None:
            from goatbeat.django.versions import django_tasks_missing
            from goatbeat.submitters import load_submitter

            missing = django_tasks_missing("the django_tasks backend")
            if backend == "django_tasks" and missing:
                raise LookupError(missing)
            options = dict(self.options.get(backend, {}))
            if backend == "celery" and "app" not in options:
                app = self._celery_apps.get("celery") or _current_celery_app()
                if app is None:
                    raise LookupError(
                        "no Celery app: set GOATBEAT['submitter_options']['celery']['app']"
                    )
                options["app"] = app
            # Dramatiq without a broker: the submitter takes dramatiq.set_broker()'s, and
            # refuses (naming GOATBEAT['submitter_options']['dramatiq']['broker']) when none.
            found = load_submitter(backend, **options)
            if self._store is not None:
                capability(found, "bind")(self._store)
            register = capability(found, "register")
            for path, func in self._callables.items():
                register(path, func)
            self._submitters[backend] = found
        return found

    def known_tasks(self) -> frozenset[str]:
        """What the project's backends registered: the Celery app's tasks, the configured
        Dramatiq broker's actors, the installed apps' Django ``Task`` objects (only the pinned
        backend's with ``GOATBEAT['submitter']``). RQ keeps no registry. Nothing a schedule
        names is imported, and no backend is invented (no Dramatiq broker unless configured)."""
        backends = [self.pinned] if self.pinned else ["celery", "dramatiq", "django_tasks"]
        names: set[str] = set()
        for backend in backends:
            if backend == "dramatiq" and not self._dramatiq_configured():
                continue
            if backend == "celery" and "celery" not in self.options and not _celery_installed():
                continue
            try:
                submitter = self.submitter_for(backend)
            except (LookupError, InvalidValue, ImportError):
                continue
            names.update(known_tasks(submitter) or ())
        return frozenset(names)

    # -- TaskSubmitter --------------------------------------------------------------------------------

    def validate(self, schedule: Schedule) -> None:
        try:
            submitter = self.submitter_for(self.backend_for(schedule.task))
        except LookupError as exc:
            raise InvalidSchedule("task", schedule.task, f"{schedule.task!r}: {exc}") from None
        submitter.validate(schedule)

    def submit(self, occurrence: Occurrence) -> str | None:
        try:
            submitter = self.submitter_for(self.backend_for(occurrence.task))
        except (LookupError, InvalidValue) as exc:
            # Not an outage: retrying cannot find the task or configure the backend.
            raise PermanentSubmitError(f"task {occurrence.task!r}: {exc}") from None
        return submitter.submit(occurrence)

    def submit_many(self, occurrences: Sequence[Occurrence]) -> list[str | None | Exception]:
        """Each backend gets its share of ``occurrences`` in one ``submit_many`` call when it
        has one (Celery publishes them in one batch), else one ``submit`` at a time."""
        results: list[str | None | Exception] = [None] * len(occurrences)
        shares: dict[str, list[int]] = {}
        for i, occ in enumerate(occurrences):
            try:
                backend = self.backend_for(occ.task)
                self.submitter_for(backend)
            except (LookupError, InvalidValue) as exc:
                results[i] = PermanentSubmitError(f"task {occ.task!r}: {exc}")
                continue
            shares.setdefault(backend, []).append(i)
        for backend, positions in shares.items():
            share = [occurrences[i] for i in positions]
            answers = submit_all(self._submitters[backend], share)
            for i, answer in zip(positions, answers, strict=True):
                results[i] = answer
        return results

    def awaits_bookkeeping(self) -> bool:
        return any(awaits_bookkeeping(s) for s in list(self._submitters.values()))

    def after_bookkeeping(self) -> None:
        for submitter in list(self._submitters.values()):
            capability(submitter, "after_bookkeeping")()

    def bind(self, store: ScheduleStore) -> None:
        self._store = store
        for submitter in self._submitters.values():
            capability(submitter, "bind")(store)

    def register(self, path: str, func: Any) -> None:
        self._callables[path] = func
        for submitter in self._submitters.values():
            capability(submitter, "register")(path, func)

    def close(self) -> None:
        submitters, self._submitters = self._submitters, {}
        for submitter in submitters.values():
            submitter.close()


def _celery_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("celery") is not None


def _current_celery_app() -> Any:
    try:
        from celery import current_app
    except ImportError:
        return None
    return current_app._get_current_object()
