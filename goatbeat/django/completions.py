"""Django Tasks completions, on the side of goatbeat's tables.

The Django Tasks submitter (:mod:`goatbeat.submitters.django_tasks`) knows Django Tasks; this
module knows the execution rows. :class:`DjangoTaskLedger` stores each backend task id on its
execution inside the enqueue's transaction, and the ``django.tasks.signals`` receivers find
the execution by that id in the process that runs the task (usually a worker):
:func:`on_task_started` writes ``running``, :func:`on_task_finished` writes ``succeeded`` or
``failed`` with the runtime Django Tasks measured, as the other backends' completion reports
do (:mod:`goatbeat.completion`). :func:`connect` wires them when the app starts.

The receivers never raise: a completion report must not turn a successful task into a failed
one in the worker. Problems are logged (``occurrence.started``/``occurrence.finished`` at
WARNING) and swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from goatbeat.completion import worker_name
from goatbeat.core.health import Outcome
from goatbeat.core.model import ExecutionStatus
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore
from goatbeat.django import conf
from goatbeat.django.registry import get_store
from goatbeat.submitters import django_tasks

__all__ = ["DjangoTaskLedger", "connect", "on_task_started", "on_task_finished"]


class DjangoTaskLedger:
    """The :class:`~goatbeat.submitters.django_tasks.TaskLedger` over goatbeat's Django models."""

    @property
    def database(self) -> str:
        return conf.get().database

    def record_task_id(self, database: str, execution_id: int, task_id: str) -> None:
        from goatbeat.django.models import Execution

        Execution.objects.using(database).filter(
            id=execution_id, status=ExecutionStatus.CLAIMED.value
        ).update(backend_task_id=task_id)

    def store(self) -> ScheduleStore:
        return get_store()


def connect() -> None:
    """Install the ledger for every Django Tasks submitter and receive ``task_finished``
    (idempotent; the app config calls it when Django starts). Nothing on a Django without
    Django Tasks (5.2)."""
    from goatbeat.django.versions import HAS_DJANGO_TASKS

    if not HAS_DJANGO_TASKS:
        return
    from django.tasks.signals import task_finished, task_started

    django_tasks.use_ledger(DjangoTaskLedger())
    task_started.connect(on_task_started, dispatch_uid="goatbeat.task_started")
    task_finished.connect(on_task_finished, dispatch_uid="goatbeat.task_finished")


# Executions a worker may still report on: sent, or started (and retried) already.
_REPORTABLE = [
    ExecutionStatus.CLAIMED.value,
    ExecutionStatus.SUBMITTED.value,
    ExecutionStatus.RUNNING.value,
    ExecutionStatus.RETRIED.value,
]


def _execution_of(task_result: Any) -> tuple[str, str] | None:
    """(idempotency key, schedule name) of the goatbeat execution ``task_result`` runs."""
    from goatbeat.django.models import Execution

    row = (
        Execution.objects.using(conf.get().database)
        .filter(backend_task_id=str(task_result.id), status__in=_REPORTABLE)
        .values_list("idempotency_key", "schedule_name")
        .first()
    )
    return None if row is None else (str(row[0]), str(row[1]))


def on_task_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    """``task_started`` receiver: mark the goatbeat execution of ``task_result`` running.

    Never raises."""
    try:
        found = _execution_of(task_result)
        if found is not None:
            get_store().record_started(found[0], worker=worker_name())
    except Exception as exc:  # noqa: BLE001 - a report must never fail the task
        log_event(
            "occurrence.started",
            level=logging.WARNING,
            backend_task_id=str(getattr(task_result, "id", "")),
            recorded=False,
            error=f"{type(exc).__name__}: {exc}",
        )


def on_task_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    """``task_finished`` receiver: mark the goatbeat execution of ``task_result`` finished.

    Never raises."""
    try:
        _record_finished(task_result)
    except Exception as exc:  # noqa: BLE001 - a report must never fail the task
        log_event(
            "occurrence.finished",
            level=logging.WARNING,
            backend_task_id=str(getattr(task_result, "id", "")),
            recorded=False,
            error=f"{type(exc).__name__}: {exc}",
        )


def _record_finished(task_result: Any) -> None:
    outcome = django_tasks.task_outcome(task_result)
    if outcome is None:
        return  # not finished yet
    succeeded, error = outcome
    if django_tasks.note_finished_in_flight(task_result, succeeded, error):
        return  # recorded after the submitter's bookkeeping
    row = _execution_of(task_result)
    if row is None:
        return  # not a goatbeat occurrence
    key, schedule_name = row
    runtime = None
    started, finished = (getattr(task_result, n, None) for n in ("started_at", "finished_at"))
    if started is not None and finished is not None:
        runtime = max(0.0, (finished - started).total_seconds())
    recorded = get_store().record_completion(
        key,
        outcome=Outcome.SUCCEEDED if succeeded else Outcome.FAILED,
        error=error,
        runtime=runtime,
        worker=worker_name(),
    )
    log_event(
        "occurrence.finished",
        level=logging.INFO if succeeded else logging.WARNING,
        schedule=schedule_name,
        idempotency_key=key,
        backend_task_id=str(task_result.id),
        succeeded=succeeded,
        error=error,
        runtime=runtime,
        recorded=recorded,
    )
