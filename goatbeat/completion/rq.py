"""RQ: the ``Job`` class records what each goatbeat job became, with no change to your code.

::

    GOATBEAT_DATABASE=postgresql://…/goatbeat rq worker --job-class goatbeat.completion.rq.Job

(or a subclass naming the database: ``class Job(goatbeat.completion.rq.Job): database =
"postgresql://…"``). Every job carrying ``goatbeat_idempotency_key`` in its meta (what
goatbeat enqueues) is reported around ``Job.perform``: ``running``, then ``succeeded``, or on
an exception ``retried`` when the job has retries left (``Retry(max=...)``) and ``failed``
otherwise, with the error. Other jobs run untouched. A work horse killed mid-job (SIGKILL,
the OOM killer: RQ's "Work-horse terminated unexpectedly") is recorded ``lost`` at once by the
worker's main process, with RQ's reason, unless RQ retries it. A whole worker killed reports
nothing: the leading scheduler ends the run ``lost`` once its bound passes (``max_runtime``,
else ``lost_after``).

No database connection in the work horse: before its first fork, the worker's main process
starts one reporter process (:mod:`goatbeat.completion.relay`) that owns the connection; each
horse sends its reports over a pipe it inherits, in order with the main process's own
(``lost``). With the reporter gone, a report is written directly, as before. On PostgreSQL
the idempotency guard of a horse also takes its key through the reporter
(``delivery_begin``, committed before the reporter answers) and hands it its success, so a
guarded horse opens no connection either; with no answer it takes the key on its own
connection. The main process
also imports what a guarded horse would import for each job (the idempotency guard's
PostgreSQL ledger, psycopg and the RQ adapter; not the store, which only the fallback writes need), then
freezes its heap (``gc.freeze()``) before the first fork: each fork then copies and tears down
a smaller parent whose objects the horse's collector never walks or touches. (RQ's
``SpawnWorker``, which does not fork, writes directly.)
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import sys
import time
from typing import Any, ClassVar

import rq.job

from goatbeat.completion import DATABASE_ENV, error_text
from goatbeat.completion.relay import RelayedReporter
from goatbeat.core.health import Outcome
from goatbeat.core.observability import log_event
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["Job"]

_reporters: dict[str | None, RelayedReporter] = {}


def _reporter(database: str | None) -> RelayedReporter:
    # One per database and process (a fork inherits its parent's, with its reporter
    # process); Reporter opens lazily.
    found = _reporters.get(database)
    if found is None:
        found = _reporters[database] = RelayedReporter(database)
    return found


_PRELOAD = ("goatbeat.idempotency.postgres", "goatbeat.idempotency.rq")
"""What a guarded horse would import for each job (the ledger, and the ``@idempotent``
adapter the job's module imports): imported in the main process once, so no fork imports
it again. Not the store: with the reporter up a horse never opens it, and a
bigger parent costs every fork (measured: ~2 ms CPU per horse)."""


def _start_relay(database: str | None) -> None:
    """In the worker's main process, before a fork: the database's reporter process."""
    if not (database or os.environ.get(DATABASE_ENV)):
        return  # the horse's Reporter says what is missing
    reporter = _reporter(database)
    if reporter.relay is None:
        for module in _PRELOAD:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        with contextlib.suppress(Exception):
            # The ledger's statements, parsed once here (a cache each horse would fill again:
            # ~5-15 ms of CPU per guarded horse for reading and splitting queries.sql).
            from goatbeat.stores import schema

            schema.queries("postgres")
        # Once, before the first fork: what the parent holds moves to the permanent
        # generation, so no horse's collection walks it (and dirties its copied pages).
        gc.collect()
        gc.freeze()
    reporter.start_relay(begins=True)


def _before_fork() -> None:
    # os.fork() is a C function: frame 1 is its caller. Only RQ's fork of a work horse for a
    # Job of this class (Worker.fork_work_horse(self, job, queue)) starts a reporter.
    try:
        frame = sys._getframe(1)
        job = frame.f_locals.get("job") if frame.f_code.co_name == "fork_work_horse" else None
        if isinstance(job, Job):
            _start_relay(type(job).database)
    except Exception as exc:  # noqa: BLE001 - without a reporter, horses write directly
        log_event(
            "occurrence.relay_gone",
            level=logging.WARNING,
            error=f"{type(exc).__name__}: {exc}",
            hint="no completion reporter process: each work horse writes directly",
        )


os.register_at_fork(before=_before_fork)


class Job(rq.job.Job):
    database: ClassVar[str | None] = None
    """goatbeat's database URL; None: ``$GOATBEAT_DATABASE``."""

    def perform(self) -> Any:
        key = (self.meta or {}).get(KEY_HEADER)
        if not isinstance(key, str) or not key:
            return super().perform()
        reporter = _reporter(type(self).database)
        reporter.started(key)
        began = time.monotonic()
        try:
            result = super().perform()
        except BaseException as exc:
            runtime = time.monotonic() - began
            retries_left = self.retries_left or 0
            outcome = Outcome.RETRIED if retries_left > 0 else Outcome.FAILED
            reporter.finished(key, outcome, error=error_text(exc), runtime=runtime)
            raise
        if not reporter.skipped_success(key):
            reporter.finished(key, Outcome.SUCCEEDED, runtime=time.monotonic() - began)
        return result

    def _handle_failure(self, exc_string: str, *args: Any, **kwargs: Any) -> Any:
        # Called in the worker's main process for a work horse that died (and in the horse
        # for an exception, which perform() reported already).
        key = (self.meta or {}).get(KEY_HEADER)
        if isinstance(key, str) and key and exc_string.startswith(_HORSE_DIED):
            _reporter(type(self).database).finished(
                key, Outcome.LOST, error=f"lost: {exc_string.strip().rstrip(';')}"
            )
        return super()._handle_failure(exc_string, *args, **kwargs)


_HORSE_DIED = "Work-horse terminated unexpectedly"
