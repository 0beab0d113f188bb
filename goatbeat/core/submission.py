"""Submission: claimed occurrences out to the submitter, and what became of them into the store.

The loop (:mod:`goatbeat.core.scheduler`) decides what to submit and when: pending rows, claimed
batches, and the instant an occurrence claimed ahead may go. :class:`Submission` does the rest,
one batch at a time:

- Sending. One ``submit`` per occurrence, or chunks of
  :data:`~goatbeat.core.submit.SUBMIT_MANY_CHUNK` through the submitter's ``submit_many``. A
  submitter that declares ``concurrent_submits`` may be called from other threads: a batch may
  then be sent from a submission thread while the loop claims the next one
  (:meth:`Submission.send_in_background`), and shared between that many threads, each taking
  every k-th occurrence so the oldest still go out first. The local deadline (the loop's
  ``lease_held``) is checked right before each send, or each chunk: what it stops stays
  ``claimed`` for the next leader.
- Bookkeeping. Every outcome of a batch goes to the store in ONE ``record_outcomes`` call, then
  to the submitter's ``after_bookkeeping``. A :class:`~goatbeat.core.errors.PermanentSubmitError`
  is final at once (``submit_failed``). Anything else is retried with exponential backoff
  (:func:`retry_delay`: 1 s, 2 s, 4 s ... 60 s) until ``1 + max_submit_retries`` attempts have
  failed; the row stays ``claimed`` with ``attempts`` counted in the store, so a new leader
  continues the count. :class:`Backoff` holds the waiting rows: the loop leaves them out of
  ``pending()`` and wakes for the earliest.
- Logging on the hot path. ``occurrence.submitted`` is logged at INFO for every occurrence of a
  batch of up to :data:`LOG_EACH_LIMIT`; a larger burst gets one INFO summary and the
  per-occurrence records at DEBUG. Nothing is built for a disabled level.

Test hook (fault injection only): with the environment variable :data:`CRASH_ENV` set to ``n``
the process calls ``os._exit(137)`` right after its n-th successful submission (after the chunk
holding it, for a submitter with ``submit_many``), before the bookkeeping, to play a crash
between the two.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.clock import Clock
from goatbeat.core.errors import PermanentSubmitError, StoreError
from goatbeat.core.model import ExecutionKind, LeaseGrant, Occurrence, SubmitOutcome
from goatbeat.core.observability import log_event, logger
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import (
    SUBMIT_MANY_CHUNK,
    TaskSubmitter,
    many_submitter,
    submit_all,
    submit_concurrency,
)

__all__ = [
    "CRASH_ENV",
    "LOG_EACH_LIMIT",
    "Backoff",
    "BatchCounts",
    "Sent",
    "Submission",
    "lateness",
    "occurrence_fields",
    "retry_delay",
    "store_skew",
]

CRASH_ENV = "GOATBEAT_CRASH_AFTER_SUBMIT"
"""Test hook: exit with status 137 right after the n-th successful submission."""

RETRY_BASE = 1.0
RETRY_CAP = 60.0
LOG_EACH_LIMIT = 100
"""Up to this many occurrences in one batch, each gets its own INFO ``occurrence.submitted``.
A bigger burst gets one INFO summary (``count``, ``first_key``, ``last_key`` ...) and the
per-occurrence records at DEBUG: formatting a JSON line costs ~40-60 us, a sizeable share of a
broker round trip, and 10,000 identical lines help nobody (the executions table has them all)."""

Sent = tuple[Occurrence, str | None, Exception | None]
"""(occurrence, backend task id, the exception the submission raised)."""


def retry_delay(attempts: int) -> float:
    """Backoff before the next try after ``attempts`` failed attempts: 1 s, 2 s, 4 s ... 60 s."""
    return float(min(RETRY_CAP, RETRY_BASE * 2 ** max(0, attempts - 1)))


class Backoff:
    """Executions whose last submission failed and that wait for their retry, each until a
    local monotonic instant. It belongs to one reign: the loop clears it on becoming leader,
    so pending rows go out at once."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._until)

    def hold(self, execution_id: int, attempts: int) -> float:
        """Hold ``execution_id`` for :func:`retry_delay` of ``attempts``; returns that delay."""
        delay = retry_delay(attempts)
        self._until[execution_id] = self._clock.monotonic() + delay
        return delay

    def release(self, execution_id: int) -> bool:
        """Forget ``execution_id`` (submitted, or failed for good); whether it was held."""
        return self._until.pop(execution_id, None) is not None

    def waiting(self) -> list[int]:
        """The executions whose retry is not due yet."""
        now = self._clock.monotonic()
        return [execution_id for execution_id, at in self._until.items() if at > now]

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest retry (negative when overdue); None when none waits."""
        if not self._until:
            return None
        return min(self._until.values()) - self._clock.monotonic()

    def clear(self) -> None:
        self._until.clear()


@dataclass(slots=True)
class BatchCounts:
    """What became of one batch."""

    submitted: int = 0
    """Successful submissions, resubmissions included."""
    resubmitted: int = 0
    """Pending rows (left ``claimed`` earlier, or manual requests) submitted successfully."""
    retrying: int = 0
    failed: int = 0


class Submission:
    """Sends batches through ``submitter`` and records their outcomes in ``store``.

    ``lease_held`` is asked right before each send (each chunk): False leaves the rest of the
    batch ``claimed``. ``wait_for_instant`` blocks until an occurrence claimed ahead is due. Both
    may be called from submission threads."""

    def __init__(
        self,
        store: ScheduleStore,
        submitter: TaskSubmitter,
        *,
        clock: Clock,
        scheduler_id: str,
        max_submit_retries: int,
        lease_held: Callable[[], bool],
        wait_for_instant: Callable[[Occurrence], None],
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.clock = clock
        self.scheduler_id = scheduler_id
        self.max_attempts = 1 + max_submit_retries
        self.backoff = Backoff(clock)
        self._lease_held = lease_held
        self._wait_for_instant = wait_for_instant
        # 0: the submitter is called from the scheduler's thread only.
        self._threads = submit_concurrency(submitter)
        # The submitter takes chunks (``submit_many``) rather than one occurrence at a time.
        self._chunked = many_submitter(submitter) is not None
        self._executor: ThreadPoolExecutor | None = None
        self._submissions = 0
        self._submissions_lock = threading.Lock()
        crash = os.environ.get(CRASH_ENV, "").strip()
        self._crash_after = int(crash) if crash.isdigit() and int(crash) > 0 else 0
        self._after_bookkeeping: Callable[[], None] | None = getattr(
            submitter, "after_bookkeeping", None
        )
        self.on_submitted: Callable[[float], None] | None = None
        """Called with the lateness (seconds, by the store's clock) of each occurrence the
        backend accepted: the scheduler's observers (metrics)."""

    @property
    def threaded(self) -> bool:
        """Whether a batch may be sent from a submission thread (see
        :meth:`send_in_background`)."""
        return self._threads > 0

    def close(self) -> None:
        """Stop the submission threads; they start again on the next threaded send."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    # -- one batch --------------------------------------------------------------------------------

    def submit(
        self,
        occurrences: Sequence[Occurrence],
        grant: LeaseGrant,
        *,
        pending: bool,
        sent: Iterable[Sent | None] | None = None,
    ) -> BatchCounts:
        """Submit while the local deadline holds; record every outcome in one store call.
        Occurrences left unsubmitted at the deadline stay ``claimed`` for the next leader.
        ``pending``: the rows come from ``pending()`` (resubmissions, retries, manual runs).
        ``sent``: the results of submissions already made (:meth:`send_in_background`)."""
        counts = BatchCounts()
        outcomes: list[SubmitOutcome] = []
        info = logger.isEnabledFor(logging.INFO)
        burst = len(occurrences) > LOG_EACH_LIMIT
        each_level = logging.DEBUG if burst else logging.INFO
        log_each = logger.isEnabledFor(each_level)
        # Lateness is judged by the store's clock, like due-ness: a host whose clock is skewed
        # must not log hours of lateness. One store read per batch gives the offset, made
        # after the first submission: it must not delay what is due.
        skew: list[timedelta] = []

        def store_now() -> datetime:
            if not skew:
                skew.append(store_skew(self.store, self.clock))
            return self.clock.now() + skew[0]

        submitted: list[Occurrence] = []
        for one in self._send_all(occurrences) if sent is None else sent:
            if one is None:
                continue  # the local deadline passed first: left claimed
            occ, task_id, exc = one
            if exc is not None:
                outcomes.append(self._failed(occ, exc, grant, counts))
                continue
            outcomes.append(
                SubmitOutcome(execution_id=occ.execution_id, ok=True, backend_task_id=task_id)
            )
            counts.submitted += 1
            if self.on_submitted is not None:
                self.on_submitted(lateness(store_now(), occ.scheduled_at))
            if pending:
                counts.resubmitted += 1
                was_retry = self.backoff.release(occ.execution_id)
                if info and occ.kind is ExecutionKind.SCHEDULED and not was_retry:
                    # A row another leader (or a crash) left claimed, now actually resubmitted.
                    log_event(
                        "occurrence.resubmitted",
                        **occurrence_fields(occ, self.scheduler_id, grant),
                        attempts=occ.attempts,
                    )
            if burst:
                submitted.append(occ)
            if log_each:
                log_event(
                    "occurrence.submitted",
                    level=each_level,
                    **occurrence_fields(occ, self.scheduler_id, grant),
                    lateness=lateness(store_now(), occ.scheduled_at),
                    kind=occ.kind,
                    backend_task_id=task_id,
                )
        if burst and info and submitted:
            self._log_burst(submitted, grant, store_now())
        if outcomes:
            self.store.record_outcomes(outcomes)
            if self._after_bookkeeping is not None:
                self._after_bookkeeping()
        return counts

    def _failed(
        self, occ: Occurrence, exc: Exception, grant: LeaseGrant, counts: BatchCounts
    ) -> SubmitOutcome:
        """The outcome of a failed submission: final, or held back for a retry."""
        attempts = occ.attempts + 1
        final = isinstance(exc, PermanentSubmitError) or attempts >= self.max_attempts
        error = f"{type(exc).__name__}: {exc}"
        if final:
            counts.failed += 1
            self.backoff.release(occ.execution_id)
            log_event(
                "occurrence.submit_failed",
                level=logging.ERROR,
                **occurrence_fields(occ, self.scheduler_id, grant),
                attempts=attempts,
                error=error,
            )
        else:
            counts.retrying += 1
            delay = self.backoff.hold(occ.execution_id, attempts)
            log_event(
                "occurrence.submit_retry",
                level=logging.WARNING,
                **occurrence_fields(occ, self.scheduler_id, grant),
                attempts=attempts,
                retry_in=delay,
                error=error,
            )
        return SubmitOutcome(execution_id=occ.execution_id, ok=False, error=error, final=final)

    def _log_burst(self, submitted: list[Occurrence], grant: LeaseGrant, now: datetime) -> None:
        log_event(
            "occurrence.submitted",
            scheduler_id=self.scheduler_id,
            fencing_token=grant.token,
            count=len(submitted),
            schedules=len({o.schedule_name for o in submitted}),
            first_key=submitted[0].idempotency_key,
            last_key=submitted[-1].idempotency_key,
            scheduled_at=min(o.scheduled_at for o in submitted),
            lateness=max(lateness(now, o.scheduled_at) for o in submitted),
        )

    # -- sending ----------------------------------------------------------------------------------

    def send_in_background(self, occurrences: Sequence[Occurrence]) -> Future[list[Sent | None]]:
        """Send ``occurrences`` from a submission thread (only when :attr:`threaded`); give the
        result to :meth:`submit` as ``sent``. One at a time: the pool has a free worker for
        each share of the batch."""
        return self._pool().submit(self._send_many, occurrences)

    def _send_all(self, occurrences: Sequence[Occurrence]) -> Iterable[Sent | None]:
        """The result of each submission, in the order of ``occurrences`` (None: not sent)."""
        if self._threads > 1 and len(occurrences) > 1:
            return self._send_many(occurrences)
        return self._send_in_order(occurrences)

    def _send_in_order(self, occurrences: Sequence[Occurrence]) -> Iterator[Sent | None]:
        """Lazily, so the deadline is checked right before each submission (each chunk, for a
        submitter with ``submit_many``)."""
        if not self._chunked:
            yield from map(self._send_one, occurrences)
            return
        for start in range(0, len(occurrences), SUBMIT_MANY_CHUNK):
            yield from self._send_chunk(occurrences[start : start + SUBMIT_MANY_CHUNK])

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix="goatbeat-submit"
            )
        return self._executor

    def _send_many(self, occurrences: Sequence[Occurrence]) -> list[Sent | None]:
        """:meth:`_send_all` for a submitter that may be called from other threads: up to
        ``concurrent_submits`` threads (the calling one included) share the batch, each taking
        every k-th occurrence so the oldest still go out first. They meet only at the end:
        waking a waiting thread per message costs more under the GIL than it would hide."""
        results: list[Sent | None] = [None] * len(occurrences)
        k = max(1, min(self._threads, len(occurrences)))

        def share(first: int) -> None:
            for j, sent in enumerate(self._send_in_order(occurrences[first::k])):
                results[first + j * k] = sent

        # At most one _send_many runs at a time, so the pool has a free worker for each share.
        helpers = [self._pool().submit(share, first) for first in range(1, k)]
        try:
            share(0)
        finally:
            for helper in helpers:
                helper.result()
        return results

    def _send_one(self, occ: Occurrence) -> Sent | None:
        """Submit one occurrence unless the local deadline has passed. May run in a
        submission thread: it touches nothing but the lease's deadline and the crash count.
        An occurrence claimed ahead waits for its instant first."""
        self._wait_for_instant(occ)
        if not self._lease_held():
            return None
        try:
            task_id = self.submitter.submit(occ)
        except Exception as exc:  # every failure is retried or recorded
            return occ, None, exc
        self._count_submissions(1)
        return occ, task_id, None

    def _send_chunk(self, chunk: Sequence[Occurrence]) -> list[Sent | None]:
        """:meth:`_send_one` for a chunk, through the submitter's ``submit_many``."""
        for occ in chunk:  # in scheduled order: only the first ones can still be ahead
            self._wait_for_instant(occ)
        if not self._lease_held():
            return [None] * len(chunk)
        answers = submit_all(self.submitter, chunk)  # every failure is retried or recorded
        sent: list[Sent | None] = [
            (occ, None, answer) if isinstance(answer, Exception) else (occ, answer, None)
            for occ, answer in zip(chunk, answers, strict=True)
        ]
        self._count_submissions(sum(1 for one in sent if one is not None and one[2] is None))
        return sent

    def _count_submissions(self, count: int) -> None:
        with self._submissions_lock:
            self._submissions += count
            crash = self._crash_after and self._submissions >= self._crash_after
        if crash:
            # Test hook: die between submission and bookkeeping (see module docstring).
            os._exit(137)


def store_skew(store: ScheduleStore, clock: Clock) -> timedelta:
    """The store's clock minus ours (zero when the store cannot answer right now)."""
    try:
        return store.now() - clock.now()
    except StoreError:
        return timedelta(0)


def occurrence_fields(occ: Occurrence, scheduler_id: str, grant: LeaseGrant) -> dict[str, Any]:
    """The fields every per-occurrence log record starts with."""
    return {
        "schedule": occ.schedule_name,
        "idempotency_key": occ.idempotency_key,
        "scheduler_id": scheduler_id,
        "fencing_token": grant.token,
        "scheduled_at": occ.scheduled_at,
    }


def lateness(now: datetime, scheduled_at: datetime) -> float:
    """Seconds ``now`` is past ``scheduled_at`` (negative: early), to the microsecond."""
    return round((now - scheduled_at).total_seconds(), 6)
