"""Submission: claimed occurrences out to the submitter, and what became of them into the store.

The loop (:mod:`goatbeat.core.scheduler`) decides what to submit and when: pending rows, claimed
batches, and the instant an occurrence claimed ahead may go. :class:`Submission` does the rest,
one batch at a time:

- Sending. One ``submit`` per occurrence, or chunks of
  :data:`~goatbeat.core.submit.SUBMIT_MANY_CHUNK` through the submitter's ``submit_many``. A
  submitter that declares ``concurrent_submits`` may be called from other threads: a batch may
  then be sent from a submission thread while the loop claims the next one
  (:meth:`Submission.send_in_background`), and shared between that many threads, each taking
  every k-th occurrence so the oldest still go out first. The local deadline of the lease the
  batch goes out under (given with each batch) is checked right before each send, or each
  chunk: what it stops stays ``claimed`` for the next leader.
- Bookkeeping. Every outcome of a batch goes to the store in ONE ``record_outcomes`` call, then
  to the submitter's ``after_bookkeeping``; or, when the loop claims the next batch at once,
  in that claim (``claim_due(record=...)``), whose transaction writes them. A :class:`~goatbeat.core.errors.PermanentSubmitError`
  is final at once (``submit_failed``). Anything else is retried with exponential backoff
  (:func:`retry_delay`: 1 s, 2 s, 4 s ... 60 s) for as long as the occurrence is owed: until
  its own misfire grace runs out (``due + misfire_grace`` by the store's clock, ``due`` being
  the jittered instant, or a backfill's request; the
  last try lands on that instant), and in any case ``max_submit_retries`` times. Then it is
  *missed*: ``submit_failed``, counted in its schedule's ``missed_count``, logged
  ``occurrence.missed``. The backoff lives in the execution row (``attempts``, ``retry_at``,
  set by the store's clock): the row stays ``claimed`` and ``pending()`` leaves it out until
  its retry is due, so a store error, a restart or a new leader neither resets the backoff
  nor retries early.
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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from goatbeat.core.bounded import BoundedCall, CallTimedOut
from goatbeat.core.clock import Clock
from goatbeat.core.config import MAX_CLAIM_AHEAD
from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError, StoreError
from goatbeat.core.model import ExecutionKind, LeaseGrant, Occurrence, SubmitOutcome
from goatbeat.core.observability import log_event, logger
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import (
    SUBMIT_MANY_CHUNK,
    TaskSubmitter,
    awaits_bookkeeping,
    capability,
    many_submitter,
    submit_all,
    submit_concurrency,
)

__all__ = [
    "CRASH_ENV",
    "HeldLease",
    "LOG_EACH_LIMIT",
    "BatchCounts",
    "Sent",
    "StoreTime",
    "Submission",
    "lateness",
    "occurrence_fields",
    "retry_delay",
    "store_skew",
]

CRASH_ENV = "GOATBEAT_CRASH_AFTER_SUBMIT"
"""Test hook: exit with status 137 right after the n-th successful submission."""

_T = TypeVar("_T")

RETRY_BASE = 1.0
RETRY_CAP = 60.0
LOG_EACH_LIMIT = 100
"""Up to this many occurrences in one batch, each gets its own INFO ``occurrence.submitted``.
A bigger burst gets one INFO summary (``count``, ``first_key``, ``last_key`` ...) and the
per-occurrence records at DEBUG: formatting a JSON line costs ~40-60 us, a sizeable share of a
broker round trip, and 10,000 identical lines help nobody (the executions table has them all)."""

Sent = tuple[Occurrence, str | None, Exception | None]
"""(occurrence, backend task id, the exception the submission raised)."""


class HeldLease(Protocol):
    """The lease a batch goes out under (a :class:`~goatbeat.core.lease.LeaseManager`). Asked
    from submission threads too."""

    def is_held(self) -> bool:
        """Whether the local deadline still holds: False leaves the rest of the batch
        ``claimed``."""
        ...

    def remaining(self) -> float:
        """Seconds until the local deadline: no broker call is waited for past it."""
        ...


def retry_delay(attempts: int) -> float:
    """Backoff before the next try after ``attempts`` failed attempts: 1 s, 2 s, 4 s ... 60 s."""
    return float(min(RETRY_CAP, RETRY_BASE * 2 ** max(0, attempts - 1)))


@dataclass(slots=True)
class BatchCounts:
    """What became of one batch."""

    submitted: int = 0
    """Successful submissions, resubmissions included."""
    resubmitted: int = 0
    """Pending rows (left ``claimed`` earlier, or manual requests) submitted successfully."""
    retrying: int = 0
    failed: int = 0
    """Marked ``submit_failed`` (permanent errors, and missed occurrences)."""
    missed: int = 0
    """Marked ``submit_failed`` because their misfire grace ran out while retrying."""
    unrecorded: list[SubmitOutcome] = field(default_factory=list)
    """The outcomes :meth:`Submission.submit` was asked to leave to the next claim."""


class Submission:
    """Sends batches through ``submitter`` and records their outcomes in ``store``.

    Each batch comes with the lease it goes out under (:class:`HeldLease`), asked right before
    each send (each chunk). ``wait_for_instant`` blocks until an occurrence claimed ahead is
    due. Both may be called from submission threads."""

    def __init__(
        self,
        store: ScheduleStore,
        submitter: TaskSubmitter,
        *,
        clock: Clock,
        scheduler_id: str,
        max_submit_retries: int,
        wait_for_instant: Callable[[Occurrence], None],
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.clock = clock
        self.scheduler_id = scheduler_id
        self.max_attempts = 1 + max_submit_retries
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
        self._after_bookkeeping: Callable[[], None] | None = capability(
            submitter, "after_bookkeeping"
        )
        self._bounded: BoundedCall | None = None
        self._bound = 0.0
        self.on_submitted: Callable[[float], None] | None = None
        """Called with the lateness (seconds, by the store's clock) of each occurrence the
        backend accepted: the scheduler's observers (metrics)."""

    def bound_calls(self, seconds: float) -> None:
        """Bound each broker call (one ``submit``, or one chunk's ``submit_many``) at
        ``seconds``, and never past the local deadline (the batch's lease), when the
        submitter may be called from another thread (``concurrent_submits``): the call runs in
        a worker thread (:class:`~goatbeat.core.bounded.BoundedCall`) and one with no answer in
        time is logged ``io.timeout`` and counted as a retryable failure of each of its
        occurrences, outcome unknown (README, guarantee case 4: the broker may have taken
        them; they are retried with the same key). While such a call still hangs the next
        ones fail at once rather than pile up behind it. A submitter called from the
        scheduler's thread only is bounded by its own socket timeouts (its ``bound_calls``)."""
        self._bound = seconds
        if self._threads > 0 and self._bounded is None:
            self._bounded = BoundedCall(
                "broker publish",
                workers=self._threads,
                submitter=getattr(self.submitter, "name", type(self.submitter).__name__),
            )

    def _call(self, fn: Callable[[], _T], keys: Sequence[str], lease: HeldLease) -> _T:
        """``fn()``, a broker call, within its bound (see :meth:`bound_calls`)."""
        bounded = self._bounded
        if bounded is None:
            return fn()
        timeout = min(self._bound, lease.remaining())
        try:
            result: _T = bounded.call(fn, timeout, first_key=keys[0], count=len(keys))
        except CallTimedOut as exc:
            raise RetryableSubmitError(f"{exc}; delivery uncertain") from None
        return result

    @property
    def threaded(self) -> bool:
        """Whether a batch may be sent from a submission thread (see
        :meth:`send_in_background`)."""
        return self._threads > 0

    @property
    def queue_depth(self) -> int:
        """How many batches :meth:`send_in_background` may be given before the oldest is
        taken back: two with one submission thread (the next batch waits in its queue, so the
        thread goes from one batch to the next while the loop claims a third), one when a
        batch is shared between several threads (it needs every one of them)."""
        return 2 if self._threads == 1 else 1

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
        lease: HeldLease,
        *,
        pending: bool,
        sent: Iterable[Sent | None] | None = None,
        defer: bool = False,
    ) -> BatchCounts:
        """Submit while ``lease``'s local deadline holds (``grant``: its grant, for the logs);
        record every outcome in one store call.
        Occurrences left unsubmitted at the deadline stay ``claimed`` for the next leader.
        ``pending``: the rows come from ``pending()`` (resubmissions, retries, manual runs).
        ``sent``: the results of submissions already made (:meth:`send_in_background`).
        ``defer``: a claim follows at once; the outcomes are left in ``unrecorded`` for it to
        write (``claim_due(record=...)``), unless the submitter waits for the bookkeeping
        (``after_bookkeeping``, and ``awaits_bookkeeping()`` if it has one)."""
        counts = BatchCounts()
        outcomes: list[SubmitOutcome] = []
        info = logger.isEnabledFor(logging.INFO)
        burst = len(occurrences) > LOG_EACH_LIMIT
        each_level = logging.DEBUG if burst else logging.INFO
        log_each = logger.isEnabledFor(each_level)
        # Lateness is judged by the store's clock, like due-ness: a host whose clock is skewed
        # must not log hours of lateness. One store read per batch gives the offset, made
        # after the first submission: it must not delay what is due.
        skew: list[timedelta | None] = []

        def known_store_now() -> datetime | None:
            """The store's clock; None when it cannot be read right now."""
            if not skew:
                skew.append(_read_skew(self.store, self.clock))
            return None if skew[0] is None else self.clock.now() + skew[0]

        def store_now() -> datetime:
            return known_store_now() or self.clock.now()

        submitted: list[Occurrence] = []
        for one in self._send_all(occurrences, lease) if sent is None else sent:
            if one is None:
                continue  # the local deadline passed first: left claimed
            occ, task_id, exc = one
            if exc is not None:
                outcomes.append(self._failed(occ, exc, grant, counts, known_store_now))
                continue
            outcomes.append(
                SubmitOutcome(
                    execution_id=occ.execution_id,
                    ok=True,
                    backend_task_id=task_id,
                    idempotency_key=occ.idempotency_key,
                )
            )
            counts.submitted += 1
            if self.on_submitted is not None:
                self.on_submitted(lateness(store_now(), occ.scheduled_at))
            if pending:
                counts.resubmitted += 1
                if (
                    info
                    and occ.kind is ExecutionKind.SCHEDULED
                    and not occ.attempts
                    and occ.due_at is None
                ):
                    # (A jittered occurrence that waited in the store is not resubmitted.)
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
                    lateness=lateness(store_now(), occ.due),
                    kind=occ.kind,
                    backend_task_id=task_id,
                )
        if burst and info and submitted:
            self._log_burst(submitted, grant, store_now())
        if outcomes:
            if defer and not awaits_bookkeeping(self.submitter):
                counts.unrecorded = outcomes
                return counts
            self.store.record_outcomes(outcomes)
            if self._after_bookkeeping is not None:
                self._after_bookkeeping()
        return counts

    def _failed(
        self,
        occ: Occurrence,
        exc: Exception,
        grant: LeaseGrant,
        counts: BatchCounts,
        store_now: Callable[[], datetime | None],
    ) -> SubmitOutcome:
        """The outcome of a failed submission: final, or held back for a retry.

        Retried while the occurrence's grace lasts (the retry is brought forward to the end of
        the grace, so the last try lands on it) and, whatever the grace, until
        ``max_submit_retries`` retries were made. Without the store's clock nothing is called
        missed: the row is retried later."""
        attempts = occ.attempts + 1
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, PermanentSubmitError):
            return self._give_up(occ, grant, counts, attempts=attempts, error=error)
        delay = retry_delay(attempts)
        grace = occ.misfire_grace
        left: float | None = None
        if grace is not None:
            now = store_now()
            if now is not None:
                left = (occ.due + grace - now).total_seconds()
        if left is not None and left > 0:
            delay = min(delay, left)
        elif attempts >= self.max_attempts and (grace is None or left is not None):
            if grace is None:
                return self._give_up(occ, grant, counts, attempts=attempts, error=error)
            return self._missed(occ, grant, counts, attempts=attempts, error=error, grace=grace)
        counts.retrying += 1
        log_event(
            "occurrence.submit_retry",
            level=logging.WARNING,
            **occurrence_fields(occ, self.scheduler_id, grant),
            attempts=attempts,
            retry_in=delay,
            error=error,
        )
        return _failed(occ, error, final=False, retry_in=delay)

    def _give_up(
        self, occ: Occurrence, grant: LeaseGrant, counts: BatchCounts, *, attempts: int, error: str
    ) -> SubmitOutcome:
        counts.failed += 1
        log_event(
            "occurrence.submit_failed",
            level=logging.ERROR,
            **occurrence_fields(occ, self.scheduler_id, grant),
            attempts=attempts,
            error=error,
        )
        return _failed(occ, error, final=True)

    def _missed(
        self,
        occ: Occurrence,
        grant: LeaseGrant,
        counts: BatchCounts,
        *,
        attempts: int,
        error: str,
        grace: timedelta,
    ) -> SubmitOutcome:
        """The grace ran out while the backend kept refusing: the occurrence is missed."""
        counts.failed += 1
        counts.missed += 1
        seconds = grace.total_seconds()
        log_event(
            "occurrence.missed",
            level=logging.ERROR,
            **occurrence_fields(occ, self.scheduler_id, grant),
            reason="submit_failed",
            misfire_grace=seconds,
            attempts=attempts,
            error=error,
        )
        message = (
            f"missed: not accepted within its misfire grace ({seconds:g}s) after "
            f"{attempts} attempt{'s' if attempts != 1 else ''}; last error: {error}"
        )
        return _failed(occ, message, final=True, missed=True)

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
            lateness=max(lateness(now, o.due) for o in submitted),
        )

    # -- sending ----------------------------------------------------------------------------------

    def send_in_background(
        self, occurrences: Sequence[Occurrence], lease: HeldLease
    ) -> Future[list[Sent | None]]:
        """Send ``occurrences`` under ``lease`` from a submission thread (only when
        :attr:`threaded`); give the
        result to :meth:`submit` as ``sent``. At most :attr:`queue_depth` at a time, sent in
        the order given: with several threads, one at a time, so the pool has a free worker
        for each share of the batch."""
        return self._pool().submit(self._send_many, occurrences, lease)

    def _send_all(
        self, occurrences: Sequence[Occurrence], lease: HeldLease
    ) -> Iterable[Sent | None]:
        """The result of each submission, in the order of ``occurrences`` (None: not sent)."""
        if self._threads > 1 and len(occurrences) > 1:
            return self._send_many(occurrences, lease)
        return self._send_in_order(occurrences, lease)

    def _send_in_order(
        self, occurrences: Sequence[Occurrence], lease: HeldLease
    ) -> Iterator[Sent | None]:
        """Lazily, so the deadline is checked right before each submission (each chunk, for a
        submitter with ``submit_many``)."""
        if not self._chunked:
            for occ in occurrences:
                yield self._send_one(occ, lease)
            return
        for start in range(0, len(occurrences), SUBMIT_MANY_CHUNK):
            yield from self._send_chunk(occurrences[start : start + SUBMIT_MANY_CHUNK], lease)

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix="goatbeat-submit"
            )
        return self._executor

    def _send_many(self, occurrences: Sequence[Occurrence], lease: HeldLease) -> list[Sent | None]:
        """:meth:`_send_all` for a submitter that may be called from other threads: up to
        ``concurrent_submits`` threads (the calling one included) share the batch, each taking
        every k-th occurrence so the oldest still go out first. They meet only at the end:
        waking a waiting thread per message costs more under the GIL than it would hide."""
        results: list[Sent | None] = [None] * len(occurrences)
        k = max(1, min(self._threads, len(occurrences)))

        def share(first: int) -> None:
            for j, sent in enumerate(self._send_in_order(occurrences[first::k], lease)):
                results[first + j * k] = sent

        # At most one _send_many runs at a time, so the pool has a free worker for each share.
        helpers = [self._pool().submit(share, first) for first in range(1, k)]
        try:
            share(0)
        finally:
            for helper in helpers:
                helper.result()
        return results

    def _send_one(self, occ: Occurrence, lease: HeldLease) -> Sent | None:
        """Submit one occurrence unless the local deadline has passed. May run in a
        submission thread: it touches nothing but the lease's deadline and the crash count.
        An occurrence claimed ahead waits for its instant first."""
        self._wait_for_instant(occ)
        if not lease.is_held():
            return None
        try:
            task_id = self._call(lambda: self.submitter.submit(occ), (occ.idempotency_key,), lease)
        except Exception as exc:  # every failure is retried or recorded
            return occ, None, exc
        self._count_submissions(1)
        return occ, task_id, None

    def _send_chunk(self, chunk: Sequence[Occurrence], lease: HeldLease) -> list[Sent | None]:
        """:meth:`_send_one` for a chunk, through the submitter's ``submit_many``."""
        for occ in chunk:  # in scheduled order: only the first ones can still be ahead
            self._wait_for_instant(occ)
        if not lease.is_held():
            return [None] * len(chunk)
        try:  # every failure is retried or recorded
            answers: Sequence[str | None | Exception] = self._call(
                lambda: submit_all(self.submitter, chunk),
                [o.idempotency_key for o in chunk],
                lease,
            )
        except RetryableSubmitError as exc:  # no answer in time: each one's outcome unknown
            answers = [exc] * len(chunk)
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


class StoreTime:
    """The store's clock as one iteration of the loop maps it onto the local monotonic clock
    (a claimed occurrence is sent when it is due by the store's clock). Read from submission
    threads too (:meth:`wait_for_instant`)."""

    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        # (local monotonic, store clock) read together.
        self._store_ref: tuple[float, datetime] | None = None

    def forget(self) -> None:
        """Drop the mapping (each iteration maps the store's clock afresh)."""
        self._store_ref = None

    @property
    def mapped(self) -> bool:
        return self._store_ref is not None

    def reference(self) -> datetime:
        """Read the store's clock and pair it with the local monotonic clock read *after* the
        answer came back: mapped through the pair, an instant can only come out late."""
        now = self.store.now()
        self._store_ref = (self.clock.monotonic(), now)
        return now

    def now(self) -> datetime:
        """The store's clock: read through this iteration's reference when there is one (no
        round trip), else asked."""
        ref = self._store_ref
        if ref is None:
            return self.store.now()
        mono, store_now = ref
        return store_now + timedelta(seconds=self.clock.monotonic() - mono)

    def wait_for_instant(self, occ: Occurrence) -> None:
        """Block until the occurrence is due (``occ.due``: its instant, or its jittered
        instant) by the store's clock when it was claimed ahead."""
        ref = self._store_ref
        if ref is None:
            return
        mono, store_now = ref
        ahead = (occ.due - store_now).total_seconds()
        if ahead <= 0:
            return
        # Never more than the largest claim_ahead any replica may use: a clock that jumped
        # must not park a submission for hours.
        ahead = min(ahead, MAX_CLAIM_AHEAD.total_seconds())
        remaining = mono + ahead - self.clock.monotonic()
        if remaining > 0:
            self.clock.sleep(remaining)


def store_skew(store: ScheduleStore, clock: Clock) -> timedelta:
    """The store's clock minus ours (zero when the store cannot answer right now)."""
    return _read_skew(store, clock) or timedelta(0)


def _read_skew(store: ScheduleStore, clock: Clock) -> timedelta | None:
    """The store's clock minus ours; None when the store cannot answer right now."""
    try:
        return store.now() - clock.now()
    except StoreError:
        return None


def _failed(occ: Occurrence, error: str, **fields: Any) -> SubmitOutcome:
    """The outcome of ``occ`` not accepted (named by its execution id and key, as every
    outcome is: an id alone may belong to another occurrence after a promotion)."""
    return SubmitOutcome(
        execution_id=occ.execution_id,
        ok=False,
        error=error,
        idempotency_key=occ.idempotency_key,
        **fields,
    )


def occurrence_fields(occ: Occurrence, scheduler_id: str, grant: LeaseGrant) -> dict[str, Any]:
    """The fields every per-occurrence log record starts with (``due_at`` when it is not the
    scheduled instant: jitter, a backfill)."""
    fields: dict[str, Any] = {
        "schedule": occ.schedule_name,
        "idempotency_key": occ.idempotency_key,
        "scheduler_id": scheduler_id,
        "fencing_token": grant.token,
        "scheduled_at": occ.scheduled_at,
    }
    if occ.due_at is not None:
        fields["due_at"] = occ.due_at
    return fields


def lateness(now: datetime, scheduled_at: datetime) -> float:
    """Seconds ``now`` is past ``scheduled_at`` (negative: early), to the microsecond."""
    return round((now - scheduled_at).total_seconds(), 6)
