"""Submit occurrences to Django Tasks (``django.tasks``, Django 6.x).

``submit`` resolves the dotted task path to a ``django.tasks.Task`` and calls
``task.using(queue_name=, priority=, backend=).enqueue(*args, **kwargs)``; the task result id
is the backend task id.

Completion comes through the ``django.tasks.signals.task_finished`` signal, fired in the process
that ran the task (usually a worker). Its receiver lives in goatbeat's Django app
(:func:`goatbeat.django.completions.on_task_finished`): it finds the execution by
``backend_task_id`` and writes ``succeeded`` or ``failed``. For the worker to find the row
however soon the task finishes, the submitter has a :class:`TaskLedger` store the backend task
id on the execution in the same transaction as the enqueue (the database backend of
django-tasks then publishes the task and the mapping atomically). The ledger is the Django
app's, installed when it starts (:func:`use_ledger`); this module knows Django Tasks, not
goatbeat's tables.

A backend that runs the task inside ``enqueue`` (``ImmediateBackend``) finishes before any id
exists: the receiver hands the completion to :func:`note_finished_in_flight`, which recognises
the submission in flight on its thread, and the completion is written after the scheduler's
bookkeeping (:meth:`DjangoTasksSubmitter.after_bookkeeping`), so the execution still goes
``claimed -> submitted -> succeeded``.

Routing: ``queue`` becomes ``queue_name`` and ``priority`` the task priority (-100..100);
exchange, routing_key, expires and headers have no Django Tasks equivalent and are rejected
when the schedule is published.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from goatbeat.core.errors import InvalidSchedule, PermanentSubmitError, RetryableSubmitError
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import BaseSubmitter, check_supported
from goatbeat.submitters.dotted import import_dotted

__all__ = [
    "DjangoTasksSubmitter",
    "SUBMITTER",
    "installed_django_tasks",
    "TaskLedger",
    "note_finished_in_flight",
    "resolve_django_task",
    "submitting",
    "task_outcome",
    "use_ledger",
]

_MIN_PRIORITY = -100
_MAX_PRIORITY = 100


def resolve_django_task(path: str) -> Any:
    """The ``django.tasks.Task`` named by ``path`` (``"app.tasks.send_report"``).

    Raises ``LookupError`` naming what is missing or what the object is instead."""
    from django.tasks import Task

    obj = import_dotted(path)
    if not isinstance(obj, Task):
        raise LookupError(
            f"{path!r} is a {type(obj).__name__}, not a Django Task "
            "(decorate it with @django.tasks.task)"
        )
    return obj


def installed_django_tasks() -> frozenset[str]:
    """The ``module_path`` of every ``django.tasks.Task`` of the installed apps.

    Each installed app's ``tasks`` module is imported (as the admin imports ``admin.py``: the
    modules ``INSTALLED_APPS`` names, never one a schedule names; one that fails to import is
    logged and skipped), then every imported module of an installed app is searched."""
    import importlib
    import sys

    from django.apps import apps
    from django.tasks import Task
    from django.utils.module_loading import module_has_submodule

    roots = [config.name for config in apps.get_app_configs()]
    for config in apps.get_app_configs():
        try:
            if module_has_submodule(config.module, "tasks"):
                importlib.import_module(f"{config.name}.tasks")
        except Exception as exc:  # one broken module must not hide the others' tasks
            log_event(
                "submitter.unchecked",
                level=logging.WARNING,
                submitter="django_tasks",
                error=f"importing {config.name}.tasks failed: {exc!r}",
            )
    names: set[str] = set()
    for module_name, module in list(sys.modules.items()):
        if module is None or not any(
            module_name == root or module_name.startswith(root + ".") for root in roots
        ):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Task):
                names.add(value.module_path)
    return frozenset(names)


class TaskLedger(Protocol):
    """Where a submission records which task result carries which execution. goatbeat's Django
    app, which owns the execution rows, provides it
    (:class:`goatbeat.django.completions.DjangoTaskLedger`)."""

    @property
    def database(self) -> str:
        """The Django database alias of goatbeat's tables (``GOATBEAT['database']``)."""
        ...

    def record_task_id(self, database: str, execution_id: int, task_id: str) -> None:
        """Store ``task_id`` on the execution while it is still ``claimed``. Called inside the
        enqueue's transaction on ``database``."""
        ...

    def store(self) -> ScheduleStore:
        """The store that completions go to when the submitter is bound to none."""
        ...


_default_ledger: TaskLedger | None = None


def use_ledger(ledger: TaskLedger | None) -> None:
    """Make ``ledger`` the one every :class:`DjangoTasksSubmitter` given none uses
    (goatbeat's Django app installs its own when Django starts)."""
    global _default_ledger
    _default_ledger = ledger


@dataclass(slots=True)
class _InFlight:
    submitter: DjangoTasksSubmitter
    key: str
    task_path: str
    finished: tuple[bool, str | None] | None = None


_local = threading.local()


def submitting() -> str | None:
    """The idempotency key of the occurrence this thread is enqueueing right now, or None.

    Code that runs inside ``enqueue`` (a ``task_enqueued`` receiver; the task itself on an
    immediate backend) learns from it which occurrence it serves: a Django Tasks message
    carries no headers (goatbeat.idempotency.django_tasks relies on it)."""
    inflight: _InFlight | None = getattr(_local, "inflight", None)
    return None if inflight is None else inflight.key


class DjangoTasksSubmitter(BaseSubmitter):
    """Enqueues on Django Tasks. ``backend`` pins a ``TASKS`` alias (default: the task's own);
    ``database`` is the goatbeat database alias (default: the ledger's, ``GOATBEAT['database']``);
    ``ledger`` records task ids (default: the one installed with :func:`use_ledger`)."""

    name: ClassVar[str] = "django_tasks"
    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = False
    supports_headers: ClassVar[bool] = False

    def __init__(
        self,
        store: ScheduleStore | None = None,
        *,
        backend: str | None = None,
        database: str | None = None,
        ledger: TaskLedger | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self._database = database
        self._ledger = ledger
        self._tasks: dict[str, Any] = {}
        self._finished: list[tuple[str, bool, str | None]] = []

    def bind(self, store: ScheduleStore) -> None:
        self.store = store

    @property
    def ledger(self) -> TaskLedger:
        ledger = self._ledger or _default_ledger
        if ledger is None:
            raise PermanentSubmitError(
                "Django Tasks submissions need goatbeat's Django app: add 'goatbeat.django' "
                "to INSTALLED_APPS"
            )
        return ledger

    @property
    def database(self) -> str:
        if self._database is None:
            self._database = self.ledger.database
        return self._database

    def known_tasks(self) -> frozenset[str]:
        return installed_django_tasks()

    def task_definition(self, task: str) -> str:
        """The ``module_path`` of the Django Task ``task`` names: what Django's worker imports
        and runs (the allow-list checks a name an ``allowed_tasks`` pattern matches against
        it, so an alias of another module's task is not that task)."""
        return str(self.resolve(task).module_path)

    def resolve(self, path: str) -> Any:
        task = self._tasks.get(path)
        if task is None:
            task = resolve_django_task(path)
            self._tasks[path] = task
        return task

    def _configured(self, task: Any, occurrence_or_schedule: Occurrence | Schedule) -> Any:
        routing = occurrence_or_schedule.routing
        return task.using(queue_name=routing.queue, priority=routing.priority, backend=self.backend)

    def validate(self, schedule: Schedule) -> None:
        check_supported(self, schedule)
        priority = schedule.routing.priority
        if priority is not None and not _MIN_PRIORITY <= priority <= _MAX_PRIORITY:
            raise InvalidSchedule(
                "priority",
                priority,
                f"{priority} is out of Django Tasks' range {_MIN_PRIORITY}..{_MAX_PRIORITY}",
            )
        try:
            task = self.resolve(schedule.task)
        except LookupError as exc:
            raise InvalidSchedule("task", schedule.task, str(exc)) from None
        from django.tasks.exceptions import InvalidTask, InvalidTaskBackend

        try:
            # using() re-validates against the backend: queue names, priority support...
            self._configured(task, schedule)
        except (InvalidTask, InvalidTaskBackend) as exc:
            raise InvalidSchedule("task", schedule.task, f"{schedule.task!r}: {exc}") from None

    def submit(self, occurrence: Occurrence) -> str | None:
        from django.db import DatabaseError, transaction
        from django.tasks.exceptions import InvalidTask, InvalidTaskBackend

        ledger, database = self.ledger, self.database
        try:
            task = self._configured(self.resolve(occurrence.task), occurrence)
        except LookupError as exc:
            raise PermanentSubmitError(f"task {occurrence.task!r}: {exc}") from None
        except (InvalidTask, InvalidTaskBackend) as exc:
            raise PermanentSubmitError(f"task {occurrence.task!r}: {exc}") from None
        inflight = _InFlight(self, occurrence.idempotency_key, str(task.module_path))
        _local.inflight = inflight
        try:
            with transaction.atomic(using=database):
                result = task.enqueue(*occurrence.args, **occurrence.kwargs)
                ledger.record_task_id(database, occurrence.execution_id, str(result.id))
        except (InvalidTask, InvalidTaskBackend, TypeError, ValueError) as exc:
            # TypeError/ValueError: arguments Django cannot serialise as JSON.
            raise PermanentSubmitError(f"task {occurrence.task!r}: {exc}") from None
        except DatabaseError as exc:
            raise RetryableSubmitError(f"task {occurrence.task!r}: {exc}") from None
        finally:
            _local.inflight = None
        if inflight.finished is not None:
            succeeded, error = inflight.finished
            self._finished.append((occurrence.idempotency_key, succeeded, error))
        return str(result.id)

    def awaits_bookkeeping(self) -> bool:
        """Whether completions wait for :meth:`after_bookkeeping`."""
        return bool(self._finished)

    def after_bookkeeping(self) -> None:
        """Write completions that happened inside ``enqueue`` (immediate backends), now that
        the submission itself is recorded."""
        finished, self._finished = self._finished, []
        if not finished:
            return
        store = self.store or self.ledger.store()
        for key, succeeded, error in finished:
            store.record_finished(key, succeeded=succeeded, error=error)

    def close(self) -> None:
        self._tasks.clear()


SUBMITTER = DjangoTasksSubmitter


def task_outcome(task_result: Any) -> tuple[bool, str | None] | None:
    """``(succeeded, error)`` for a finished task result, None while it is not finished."""
    from django.tasks import TaskResultStatus

    status = task_result.status
    if status not in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
        return None
    succeeded = status == TaskResultStatus.SUCCESSFUL
    return succeeded, None if succeeded else _error_text(task_result)


def note_finished_in_flight(task_result: Any, succeeded: bool, error: str | None) -> bool:
    """When ``task_result`` finished inside the ``enqueue`` of a submission still in flight on
    this thread (an immediate backend), keep its completion for
    :meth:`DjangoTasksSubmitter.after_bookkeeping` and answer True: the execution has no task
    id yet, and must be ``submitted`` before it is finished."""
    inflight: _InFlight | None = getattr(_local, "inflight", None)
    if inflight is None or inflight.finished is not None:
        return False
    if str(task_result.task.module_path) != inflight.task_path:
        return False
    inflight.finished = (succeeded, error)
    return True


def _error_text(task_result: Any) -> str | None:
    errors = list(getattr(task_result, "errors", None) or [])
    if not errors:
        return None
    last = errors[-1]
    lines = [line for line in str(getattr(last, "traceback", "")).strip().splitlines() if line]
    detail = lines[-1] if lines else ""
    return detail or str(getattr(last, "exception_class_path", "task failed"))
