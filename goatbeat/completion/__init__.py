"""Completion reports: what happened to each run, as the task backend's workers saw it.

goatbeat's job ends when the backend accepts a task (README, "Guarantees"), so without help an
execution stays ``submitted`` forever, whatever the worker did with it. One line of setup in
the workers records, for every occurrence goatbeat sent, when it started, how each attempt
ended (``succeeded``, ``failed``, or ``retried`` when the backend runs it again), how long it
ran and the error, on the execution row that carries its idempotency key
(:meth:`~goatbeat.core.store.ScheduleStore.record_started`,
:meth:`~goatbeat.core.store.ScheduleStore.record_completion`):

- Celery: ``goatbeat.completion.celery.report_completions(url)`` (signals);
- Dramatiq: ``goatbeat.completion.dramatiq.report_completions(broker, url)`` (a middleware);
- RQ: ``rq worker --job-class goatbeat.completion.rq.Job`` with ``GOATBEAT_DATABASE`` set;
- Django Tasks reports already (``goatbeat.django``'s ``task_started``/``task_finished``
  receivers).

A message goatbeat did not send (no key) is left alone: no database traffic. A report never
fails the task: a report that cannot be written is logged (``occurrence.finished``,
``recorded=False``) and forgotten. Given a URL, the three adapters write through one
reporter process per worker (:mod:`goatbeat.completion.relay`): the processes and threads
that run tasks open no connection. Otherwise (a store, a function; a reporter gone) each
worker process and thread opens its own connection on first use: a forked Celery child never
shares its parent's socket.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

from goatbeat.core.errors import InvalidValue
from goatbeat.core.health import Outcome
from goatbeat.core.observability import log_event
from goatbeat.core.skips import take_skip
from goatbeat.core.store import ScheduleStore

__all__ = ["Reporter", "Target", "DATABASE_ENV", "error_text", "looks_like_key", "worker_name"]

DATABASE_ENV = "GOATBEAT_DATABASE"
"""Where a reporter given no database finds goatbeat's database URL."""

Target = str | ScheduleStore | Callable[[], ScheduleStore] | None
"""goatbeat's database: a URL (``postgresql://…``, ``sqlite:///path``), a store, a function
returning one (``goatbeat.django.registry.get_store`` under Django), or None for
``$GOATBEAT_DATABASE``."""


_KEY = re.compile(r".+:(manual:)?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def looks_like_key(value: object) -> bool:
    """Whether ``value`` has the shape of an idempotency key (``name:2026-12-01T08:00:00Z``):
    a backend id that is the key itself (Celery's task id) is reported; a random one is not
    even looked up."""
    return isinstance(value, str) and _KEY.fullmatch(value) is not None


def worker_name() -> str:
    """``host:pid``: which worker process ran it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def error_text(exc: BaseException | None) -> str | None:
    """``Type: message``: the line a person needs first."""
    if exc is None:
        return None
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Reporter:
    """Writes completion reports to goatbeat's database; never raises."""

    def __init__(self, target: Target = None) -> None:
        if target is None:
            target = os.environ.get(DATABASE_ENV) or None
            if target is None:
                raise InvalidValue(
                    "database",
                    None,
                    f"give goatbeat's database URL, or set {DATABASE_ENV}",
                )
        if not (isinstance(target, (str, ScheduleStore)) or callable(target)):
            raise InvalidValue(
                "database", target, f"{target!r} is not a database URL, a store or a function"
            )
        self.target: str | ScheduleStore | Callable[[], ScheduleStore] = target
        self._local = threading.local()

    def store(self) -> ScheduleStore:
        """The store for this thread of this process (opened on first use)."""
        target = self.target
        if isinstance(target, ScheduleStore):
            return target
        if not isinstance(target, str):
            return target()
        store: ScheduleStore | None = getattr(self._local, "store", None)
        if store is None or self._local.pid != os.getpid():
            from goatbeat.stores import open_store

            store = open_store(target)
            self._local.store = store
            self._local.pid = os.getpid()
        return store

    def _drop(self) -> None:
        store: ScheduleStore | None = getattr(self._local, "store", None)
        self._local.store = None
        if store is not None:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - it is broken already
                pass

    def close(self) -> None:
        """Close this thread's connection (tests; workers simply exit)."""
        self._drop()

    def started(self, key: str | None, *, worker: str | None = None) -> bool:
        """An attempt of the occurrence ``key`` starts (None: not goatbeat's; nothing done)."""
        if not key:
            return False
        return self._write(
            "occurrence.started",
            key,
            lambda store: store.record_started(key, worker=worker or worker_name()),
            level=logging.DEBUG,
        )

    def finished(
        self,
        key: str | None,
        outcome: Outcome,
        *,
        error: str | None = None,
        runtime: float | None = None,
        worker: str | None = None,
    ) -> bool:
        """An attempt of the occurrence ``key`` ended with ``outcome``."""
        if not key:
            return False
        return self._write(
            "occurrence.finished",
            key,
            lambda store: store.record_completion(
                key,
                outcome=outcome,
                error=error,
                runtime=runtime,
                worker=worker or worker_name(),
            ),
            level=logging.INFO if outcome is Outcome.SUCCEEDED else logging.WARNING,
            outcome=outcome,
            error=error,
            runtime=runtime,
        )

    def skipped_success(self, key: str) -> bool:
        """Whether the success about to be reported for ``key`` is a delivery the guard
        skipped (:mod:`goatbeat.idempotency`), whose first delivery had not succeeded: then
        nothing is reported (the occurrence keeps its first delivery's outcome: still
        running, killed mid-body, which the leader ends ``lost``, or succeeded with its
        success still on its way through the reporter process) and the skip is logged as
        ``occurrence.skipped``. A skip of a first delivery whose success the ledger holds
        reports the success again, as it is."""
        skipped, state = take_skip(key)
        if not skipped or state == "succeeded":
            return False
        log_event(
            "occurrence.skipped",
            level=logging.WARNING,
            idempotency_key=key,
            state=state,
            hint="a redelivery the idempotency guard skipped: not a success; the first "
            "delivery's outcome stands (running, killed mid-body, or a success not yet "
            "written by the reporter)",
        )
        return True

    def _write(
        self,
        event: str,
        key: str,
        write: Callable[[ScheduleStore], bool],
        *,
        level: int,
        **fields: Any,
    ) -> bool:
        try:
            recorded = write(self.store())
        except Exception as exc:  # a report must never fail the task
            self._drop()  # reconnect next time
            log_event(
                event,
                level=logging.WARNING,
                idempotency_key=key,
                recorded=False,
                report_error=f"{type(exc).__name__}: {exc}",
                **fields,
            )
            return False
        log_event(event, level=level, idempotency_key=key, recorded=recorded, **fields)
        return recorded
