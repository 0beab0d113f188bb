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
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import rq.job

from goatbeat.completion import Reporter, error_text
from goatbeat.core.health import Outcome
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["Job"]

_reporters: dict[str | None, Reporter] = {}


def _reporter(database: str | None) -> Reporter:
    # One per database and process: the work horse is a fork, and Reporter opens lazily.
    found = _reporters.get(database)
    if found is None:
        found = _reporters[database] = Reporter(database)
    return found


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
