"""Dramatiq: the ``Completions`` middleware records what each goatbeat message became.

::

    from goatbeat.completion.dramatiq import report_completions

    report_completions(broker, "postgresql://…/goatbeat")   # or None: $GOATBEAT_DATABASE

Every message carrying ``goatbeat_idempotency_key`` in its options (what goatbeat sends) is
reported: ``running`` when the actor is about to run, then ``succeeded``, ``retried`` (the
Retries middleware enqueued it again, with the error) or ``failed`` (rejected: retries
exhausted, ``throws``, or no Retries middleware). The outcome is read from what the broker
does with the message (enqueued again, acknowledged, rejected), so the middleware's place
among the others does not change it. Add it after the middleware that may skip a message
(``goatbeat.idempotency.dramatiq.Idempotency``): a skipped duplicate then reports nothing.

A message an earlier middleware failed and skipped before the actor ran (``AgeLimit``'s
``max_age``: too old to run) is recorded ``expired``, with the reason. Dead letters (retries
exhausted) are ``failed``. A worker process killed mid-task reports nothing (the broker
redelivers the message after its heartbeat times out): the leading scheduler ends the run
``lost`` once its bound passes (``max_runtime``, else ``lost_after``).

Given a URL, each worker process starts one reporter process as it boots
(:mod:`goatbeat.completion.relay`) that owns the connection: the worker threads send their
reports to it over a pipe and go on without waiting for the database. With the
reporter gone, a report is written directly. A store or a function as the target is written
directly, as before.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import dramatiq

from goatbeat.completion import Target, error_text
from goatbeat.completion.relay import RelayedReporter
from goatbeat.core.health import Outcome
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["Completions", "report_completions"]


def report_completions(broker: Any, database: Target = None) -> Completions:
    """Add a :class:`Completions` middleware to ``broker`` (after every other) and return it."""
    middleware = Completions(database)
    broker.add_middleware(middleware)
    return middleware


class Completions(dramatiq.Middleware):
    def __init__(self, database: Target = None) -> None:
        self.reporter = RelayedReporter(database)
        # message id -> (key, runtime, exception text or None), from the end of the attempt
        # to what the broker does with it; acks may come from another thread.
        self._ended: dict[str, tuple[str, float | None, str | None]] = {}
        self._lock = threading.Lock()
        self._begun = threading.local()

    @staticmethod
    def _key(message: Any) -> str | None:
        key = (getattr(message, "options", None) or {}).get(KEY_HEADER)
        return key if isinstance(key, str) and key else None

    def before_worker_boot(self, broker: Any, worker: Any) -> None:
        # In each worker process: one reporter process writes what its threads report.
        self.reporter.start_relay()

    def before_process_message(self, broker: Any, message: Any) -> None:
        key = self._key(message)
        if key is None or message.failed:
            return  # not goatbeat's, or failed by an earlier middleware: the actor won't run
        self._begun.at = (message.message_id, time.monotonic())
        self.reporter.started(key)

    def after_skip_message(self, broker: Any, message: Any) -> None:
        key = self._key(message)
        if key is None or not message.failed:
            return  # not goatbeat's, or skipped and acknowledged (a duplicate): nothing ran
        reason = error_text(getattr(message, "_exception", None)) or "skipped by a middleware"
        self.reporter.finished(
            key, Outcome.EXPIRED, error=f"expired: dropped unrun ({reason}; max_age)"
        )

    def after_process_message(
        self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        key = self._key(message)
        if key is None:
            return
        begun = getattr(self._begun, "at", None)
        runtime = None
        if begun is not None and begun[0] == message.message_id:
            runtime = max(0.0, time.monotonic() - begun[1])
        with self._lock:
            self._ended[message.message_id] = (key, runtime, error_text(exception))

    def _take(self, message: Any) -> tuple[str, float | None, str | None] | None:
        with self._lock:
            return self._ended.pop(message.message_id, None)

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        # The Retries middleware sends the failed message again: this attempt is retried.
        ended = self._take(message)
        if ended is not None:
            key, runtime, error = ended
            self.reporter.finished(key, Outcome.RETRIED, error=error, runtime=runtime)

    def after_ack(self, broker: Any, message: Any) -> None:
        ended = self._take(message)
        if ended is not None:
            key, runtime, error = ended
            outcome = Outcome.SUCCEEDED if error is None else Outcome.FAILED
            self.reporter.finished(key, outcome, error=error, runtime=runtime)

    def after_nack(self, broker: Any, message: Any) -> None:
        ended = self._take(message)
        if ended is not None:
            key, runtime, error = ended
            reason = error or "rejected (message failed)"
            self.reporter.finished(key, Outcome.FAILED, error=reason, runtime=runtime)
