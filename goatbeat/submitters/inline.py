"""InlineSubmitter: runs the task in the scheduler's own process (the embedded default).

It is what ``./dev demo`` and most tests use: no broker, no worker. ``submit`` resolves the
dotted task path (cached), calls it with the occurrence's args and kwargs, and reports the
result to the store as a finished execution (``succeeded``, or ``failed`` with the exception).
A stored schedule's task reaches it only once the allow-list accepted it, on what the path
resolves to (:meth:`InlineSubmitter.task_definition`): an ``allowed_tasks`` pattern never lets
it walk to what a task module imported.
The task runs in the scheduler loop, so keep inline tasks short: a task that blocks for longer
than the lease's local deadline stalls dispatch exactly as it would stall celery beat.

Completion is written *after* the scheduler's bookkeeping (the scheduler calls
:meth:`InlineSubmitter.after_bookkeeping`), so an execution goes ``claimed -> submitted ->
succeeded`` like with any backend, with its ``submitted_at`` set.

Routing options (queue, priority, exchange, expires, headers) have no meaning in-process. The
capability flags say so honestly; by default ``validate`` still accepts schedules that set them,
because the inline submitter usually stands in for the production backend during development.
Pass ``strict=True`` to reject them instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from goatbeat.core.allowlist import defined_at
from goatbeat.core.errors import InvalidSchedule, PermanentSubmitError
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import BaseSubmitter, check_supported
from goatbeat.submitters.dotted import import_dotted

__all__ = ["InlineSubmitter", "resolve_task"]


def resolve_task(path: str) -> Callable[..., Any]:
    """The callable named by ``path``: ``"pkg.module.func"``, ``"pkg.module:Class.method"``.

    Raises ``LookupError`` naming what is missing."""
    obj = import_dotted(path)
    if not callable(obj):
        raise LookupError(f"{path!r} is not callable")
    result: Callable[..., Any] = obj
    return result


class InlineSubmitter(BaseSubmitter):
    """Calls tasks in-process. ``store`` (or :meth:`bind`) receives completion reports."""

    name: ClassVar[str] = "inline"
    supports_queue: ClassVar[bool] = False
    supports_priority: ClassVar[bool] = False
    supports_exchange: ClassVar[bool] = False
    supports_expires: ClassVar[bool] = False
    supports_headers: ClassVar[bool] = False

    def __init__(self, store: ScheduleStore | None = None, *, strict: bool = False) -> None:
        self.store = store
        self.strict = strict
        # Standing in for the production backend, it takes that backend's options (None: any
        # name) and ignores them; strict, it takes none.
        self.backend_options: frozenset[str] | None = frozenset() if strict else None
        self._tasks: dict[str, Callable[..., Any]] = {}
        self._finished: list[tuple[str, bool, str | None]] = []

    def bind(self, store: ScheduleStore) -> None:
        """Report completions to ``store`` (Beat does this when it opens its store)."""
        self.store = store

    def register(self, path: str, func: Callable[..., Any]) -> None:
        """Use ``func`` for ``path`` without importing it (Beat registers callables it is given,
        so a task defined in a script or a module still being imported resolves)."""
        self._tasks[path] = func

    def resolve(self, path: str) -> Callable[..., Any]:
        func = self._tasks.get(path)
        if func is None:
            func = resolve_task(path)
            self._tasks[path] = func
        return func

    def task_definition(self, task: str) -> str:
        """Where the callable ``task`` resolves to is defined (``module.qualname``): what the
        allow-list checks a name an ``allowed_tasks`` pattern matches against, since this
        submitter runs whatever the dotted path walks to. ``LookupError`` when it resolves to
        nothing defined anywhere (see :func:`~goatbeat.core.allowlist.defined_at`)."""
        return defined_at(self.resolve(task))

    def validate(self, schedule: Schedule) -> None:
        if self.strict:
            check_supported(self, schedule)
        try:
            self.resolve(schedule.task)
        except LookupError as exc:
            raise InvalidSchedule(
                "task", schedule.task, f"{schedule.task!r} cannot be run inline: {exc}"
            ) from None

    def submit(self, occurrence: Occurrence) -> str | None:
        try:
            func = self.resolve(occurrence.task)
        except LookupError as exc:
            raise PermanentSubmitError(f"task {occurrence.task!r}: {exc}") from None
        key = occurrence.idempotency_key
        try:
            func(*occurrence.args, **occurrence.kwargs)
        except Exception as exc:  # the task failed; the submission itself succeeded
            error = f"{type(exc).__name__}: {exc}"
            log_event(
                "occurrence.finished",
                level=logging.WARNING,
                schedule=occurrence.schedule_name,
                idempotency_key=key,
                succeeded=False,
                error=error,
            )
            self._finished.append((key, False, error))
        else:
            log_event(
                "occurrence.finished",
                level=logging.DEBUG,
                schedule=occurrence.schedule_name,
                idempotency_key=key,
                succeeded=True,
            )
            self._finished.append((key, True, None))
        return key

    def awaits_bookkeeping(self) -> bool:
        """Whether completions wait for :meth:`after_bookkeeping`."""
        return bool(self._finished)

    def after_bookkeeping(self) -> None:
        """Write the completions gathered since the last call (the scheduler calls this once
        the batch's submissions are recorded)."""
        finished, self._finished = self._finished, []
        if self.store is None:
            return
        for key, succeeded, error in finished:
            self.store.record_finished(key, succeeded=succeeded, error=error)

    def close(self) -> None:
        self.after_bookkeeping()
