"""Celery: ``report_completions(url)`` records what each goatbeat task became in the workers.

::

    # in the module that creates your Celery app (the workers import it)
    from goatbeat.completion.celery import report_completions

    report_completions("postgresql://…/goatbeat")   # or None: $GOATBEAT_DATABASE

It connects ``task_prerun`` (the attempt starts: ``running``) and ``task_postrun`` (its state:
``SUCCESS`` -> ``succeeded``, ``RETRY`` -> ``retried`` with the reason, ``FAILURE`` ->
``failed`` with the exception). The key is the ``goatbeat_idempotency_key`` header goatbeat
puts on every message, or the task id when it has a key's shape (goatbeat's task id is the
key, and a retry keeps it); other tasks are left alone.

A pool child killed mid-task (SIGKILL, the OOM killer: ``WorkerLostError``) or past its hard
time limit (``TimeLimitExceeded``) never reaches ``task_postrun``; the worker's main process
sends ``task_failure`` for it, and the run is recorded ``lost`` at once, with the reason (not
when ``task_reject_on_worker_lost`` requeues it: the next delivery reports). A message the
worker drops because its ``expires`` passed (``task_revoked``, expired) is recorded
``expired``. A whole worker killed reports nothing: the leading scheduler ends the run
``lost`` once its bound passes (``max_runtime``, else ``lost_after``).

Given a URL, the worker's main process starts one reporter process (``worker_init``,
:mod:`goatbeat.completion.relay`) that owns the connection; the pool's children send their
reports to it over a pipe and go on with the next task without waiting for the
database. With the reporter gone, a report is written directly. A store or a function as the
target (Django) is written directly, as before.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from goatbeat.completion import Reporter, Target, error_text, looks_like_key
from goatbeat.completion.relay import RelayedReporter
from goatbeat.core.health import Outcome
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["report_completions", "task_key"]

_STATES = {"SUCCESS": Outcome.SUCCEEDED, "FAILURE": Outcome.FAILED, "RETRY": Outcome.RETRIED}
_DEATHS = frozenset({"WorkerLostError", "TimeLimitExceeded"})
"""Exceptions the worker's main process raises for a task whose pool child died with it."""


class _Requested:
    """A revoked request seen as a task, for :func:`task_key` (its headers, its id)."""

    def __init__(self, request: Any) -> None:
        self.request = request


def task_key(task: Any, task_id: str | None) -> str | None:
    """The idempotency key of the Celery task running ``task`` (None: not goatbeat's)."""
    request = getattr(task, "request", None)
    headers = getattr(request, "headers", None) or {}
    key = headers.get(KEY_HEADER) or getattr(request, KEY_HEADER, None)
    if isinstance(key, str) and key:
        return key
    return task_id if looks_like_key(task_id) else None


def report_completions(database: Target = None) -> Reporter:
    """Connect the signals (once per process; calling again replaces the reporter)."""
    from celery import signals

    reporter = RelayedReporter(database)
    begun = threading.local()

    def init(**_: Any) -> None:
        # The worker's main process, before its pool forks: one reporter process for all.
        reporter.start_relay()

    def prerun(sender: Any = None, task_id: str | None = None, task: Any = None, **_: Any) -> None:
        key = task_key(task or sender, task_id)
        if key is None:
            return
        begun.at = (task_id, time.monotonic())
        reporter.started(key)

    def postrun(
        sender: Any = None,
        task_id: str | None = None,
        task: Any = None,
        retval: Any = None,
        state: str | None = None,
        **_: Any,
    ) -> None:
        outcome = _STATES.get(str(state))
        key = task_key(task or sender, task_id)
        if key is None or outcome is None:
            return
        started = getattr(begun, "at", None)
        runtime = None
        if started is not None and started[0] == task_id:
            runtime = max(0.0, time.monotonic() - started[1])
        if outcome is Outcome.SUCCEEDED and reporter.skipped_success(key):
            return
        error = None
        if outcome is not Outcome.SUCCEEDED:
            error = error_text(retval) if isinstance(retval, BaseException) else str(retval)
        reporter.finished(key, outcome, error=error, runtime=runtime)

    def failure(
        sender: Any = None, task_id: str | None = None, exception: Any = None, **_: Any
    ) -> None:
        # Only the deaths the main process sees: an exception the task raised is reported
        # by task_postrun in the child.
        if type(exception).__name__ not in _DEATHS:
            return
        key = task_key(sender, task_id)
        if key is None:
            return
        reporter.finished(
            key, Outcome.LOST, error=f"lost: {error_text(exception)} (the worker process died)"
        )

    def revoked(sender: Any = None, request: Any = None, expired: bool = False, **_: Any) -> None:
        if not expired:
            return
        task_id = getattr(request, "id", None)
        key = task_key(_Requested(request), task_id)
        if key is not None:
            reporter.finished(
                key, Outcome.EXPIRED, error="expired: the worker dropped it unrun (expires)"
            )

    for signal, receiver, uid in (
        (signals.worker_init, init, "goatbeat.completion.init"),
        (signals.task_prerun, prerun, "goatbeat.completion.prerun"),
        (signals.task_postrun, postrun, "goatbeat.completion.postrun"),
        (signals.task_failure, failure, "goatbeat.completion.failure"),
        (signals.task_revoked, revoked, "goatbeat.completion.revoked"),
    ):
        # A receiver already connected under this uid would be kept: replace it.
        signal.disconnect(dispatch_uid=uid)
        signal.connect(receiver, weak=False, dispatch_uid=uid)
    return reporter
