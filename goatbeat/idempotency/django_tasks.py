"""Django Tasks: ``@idempotent`` above ``@task`` runs each goatbeat occurrence once.

::

    from django.tasks import task
    from goatbeat.idempotency.django_tasks import idempotent

    @idempotent                      # or @idempotent(lease=timedelta(hours=1), ledger=...)
    @task(queue_name="reports")
    def send_report(day): ...

A Django Tasks message has no headers, so the key cannot travel with it. Instead, when the
goatbeat scheduler enqueues a guarded task, a ``task_enqueued`` receiver (connected when this
module is imported, which the scheduler does when it loads the task) notes the task result id
and the occurrence's key in ``goatbeat_task_key``, inside the enqueue's transaction: with
django-tasks-db on goatbeat's database, the task and the note commit together. In the worker
the wrapper finds the key by its task result id (every enqueue of one occurrence gets its own
id, each noted). On a backend that runs the task inside ``enqueue`` (``ImmediateBackend``)
the key is the one being submitted on that thread.

The ledger is a :class:`~goatbeat.idempotency.django.DjangoLedger` (default: on
``GOATBEAT['database']``). A task enqueued by your own code (no note) runs unguarded; a skipped
duplicate returns None without running the body (its task result is SUCCESSFUL).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from inspect import iscoroutinefunction
from typing import Any

from goatbeat.core.errors import InvalidValue
from goatbeat.idempotency import SKIPPED, Guard, Record, guard_for
from goatbeat.idempotency.django import DjangoLedger

__all__ = ["idempotent", "note_enqueued"]

_GUARD_ATTRIBUTE = "__goatbeat_guard__"


def _ledger(guard: Guard) -> DjangoLedger:
    ledger = guard.ledger
    assert isinstance(ledger, DjangoLedger)
    return ledger


def idempotent(
    task: Any = None,
    *,
    ledger: DjangoLedger | None = None,
    record: Record = "before",
    lease: timedelta | None = None,
) -> Any:
    """Guard a ``django.tasks.Task`` (apply it *above* ``@task``); returns the guarded Task,
    which takes the context (to know its task result id) and passes it on only if the
    original did."""
    if ledger is not None and not isinstance(ledger, DjangoLedger):
        raise InvalidValue("ledger", ledger, f"{ledger!r} is not a DjangoLedger")
    get = guard_for(ledger, record=record, lease=lease, default=DjangoLedger)

    def wrap(original: Any) -> Any:
        from django.tasks import Task

        if not isinstance(original, Task):
            raise InvalidValue(
                "task",
                original,
                f"{original!r} is not a Django Task: put @idempotent above @task",
            )
        func = original.func
        passes_context = original.takes_context
        call: Callable[..., Any] = func
        if iscoroutinefunction(func):
            from asgiref.sync import async_to_sync

            call = async_to_sync(func)

        @functools.wraps(func)
        def guarded(context: Any, *args: Any, **kwargs: Any) -> Any:
            def body() -> Any:
                if passes_context:
                    return call(context, *args, **kwargs)
                return call(*args, **kwargs)

            guard = get()
            key = _key_of(str(context.task_result.id), _ledger(guard))
            result = guard.run(key, body)
            return None if result is SKIPPED else result

        if not passes_context:
            # Django checks that a task taking the context names it first.
            signature = inspect.signature(func)
            context = inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            guarded.__signature__ = signature.replace(  # type: ignore[attr-defined]
                parameters=[context, *signature.parameters.values()]
            )
        setattr(guarded, _GUARD_ATTRIBUTE, get)
        return replace(original, func=guarded, takes_context=True)

    if task is None:
        return wrap
    return wrap(task)


def _key_of(task_id: str, ledger: DjangoLedger) -> str | None:
    from goatbeat.submitters.django_tasks import submitting

    return submitting() or ledger.task_key(task_id)


def note_enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
    """``task_enqueued`` receiver: note the key of a guarded task the scheduler is enqueueing.

    Raises when the note cannot be written, which fails that enqueue (the submitter retries
    it): a guarded task must not run without its key."""
    from goatbeat.submitters.django_tasks import submitting

    key = submitting()
    if key is None:
        return  # not a goatbeat submission
    get = getattr(task_result.task.func, _GUARD_ATTRIBUTE, None)
    if get is None:
        return  # not a guarded task
    _ledger(get()).note_task_key(str(task_result.id), key)


def _connect() -> None:
    from django.tasks.signals import task_enqueued

    task_enqueued.connect(note_enqueued, dispatch_uid="goatbeat.idempotency.note_enqueued")


_connect()
