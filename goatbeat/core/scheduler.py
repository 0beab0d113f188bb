"""The scheduler loop: lease, claim, submit, bookkeeping, sleep.

One :meth:`Scheduler.run_once` is one iteration:

1. Acquire or renew the lease when it is due for renewal. A store failure is logged
   (``scheduler.error``), the lease is dropped locally and the loop backs off; it never crashes.
2. Not the holder (or past the local deadline): dispatch nothing; sleep until the lease could
   expire or a release NOTIFY arrives.
3. On becoming leader (a new fencing token), resubmit every ``claimed`` execution the store
   holds (``pending()``): a crash between submission and bookkeeping left them; their key is
   unchanged, so dispatch is at least once. Every iteration also submits pending rows that are
   not waiting for a retry: manual run requests arrive that way.
4. Claim due occurrences in batches of ``batch_size`` while full batches come back and the local
   deadline still holds, submit them, and record the outcomes of each batch in one call.
5. Sleep (``store.wait``, so a NOTIFY ends it early) until the earliest of the next
   ``next_run_at`` (less ``claim_ahead``), the lease renewal, a submit retry, and ``max_sleep``.

Claiming ahead. When the earliest ``next_run_at`` is less than ``claim_ahead`` (250 ms by
default) away by the store's clock, the iteration claims the schedules due at that instant
already (``claim_due(now=instant)``: due-ness and misfire planning judged at that instant), so
the transaction's round trips and the planning happen before it. Each occurrence is then held
until its ``scheduled_at`` — mapped onto the local monotonic clock from a store-clock reading
taken after the query, so the mapping can only err late — and submitted then, never before.
Rows another scheduler claimed ahead and left ``claimed`` wait for their instant the same way.
A schedule disabled or edited inside that window keeps the occurrence already claimed, as it
would a moment later.

Submit failures. A :class:`~goatbeat.core.errors.PermanentSubmitError` is final at once
(``submit_failed``). Anything else is retried with exponential backoff (1 s, 2 s, 4 s ...
capped at 60 s) — the row stays ``claimed`` with ``attempts`` counted in the store, so a new
leader continues the count — until ``1 + max_submit_retries`` attempts have failed.

Logging on the hot path. ``occurrence.submitted`` is logged at INFO for every occurrence of a
batch of up to ``LOG_EACH_LIMIT`` (100), so an operator sees each fire. A larger burst is
summarised in one INFO ``occurrence.submitted`` record (``count``, ``first_key``, ``last_key``,
earliest ``scheduled_at``, worst ``lateness``) with the per-occurrence records at DEBUG: measured,
one JSON log line costs 40-60 us, which alone would take a 10,000-occurrence burst below 80 % of
a broker's raw send speed. ``occurrence.claimed`` is DEBUG. Nothing is built for a disabled level.

Test hook (fault injection only): with the environment variable
``GOATBEAT_CRASH_AFTER_SUBMIT=<n>`` the process calls ``os._exit(137)`` right after its n-th
successful submission (after the chunk holding it, for a submitter with ``submit_many``),
before the bookkeeping, to play a crash between the two.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import MAX_CLAIM_AHEAD, Settings
from goatbeat.core.errors import PermanentSubmitError, StoreError, short_repr
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import (
    ClaimResult,
    ExecutionKind,
    LeaseGrant,
    Occurrence,
    SubmitOutcome,
)
from goatbeat.core.observability import log_event, logger
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submit import (
    SUBMIT_MANY_CHUNK,
    TaskSubmitter,
    many_submitter,
    submit_all,
    submit_concurrency,
)

__all__ = ["Scheduler", "IterationResult", "retry_delay", "CRASH_ENV", "LOG_EACH_LIMIT"]

CRASH_ENV = "GOATBEAT_CRASH_AFTER_SUBMIT"
"""Test hook: exit with status 137 right after the n-th successful submission."""

RETRY_BASE = 1.0
RETRY_CAP = 60.0
ERROR_BACKOFF_BASE = 0.5
ERROR_BACKOFF_CAP = 30.0
MIN_IDLE_SLEEP = 0.01
"""Floor for the sleep of an iteration that did nothing, so a due row that cannot be claimed
(a lost compare-and-set, a renewal that keeps failing) never turns into a busy loop."""
LOG_EACH_LIMIT = 100
"""Up to this many occurrences in one batch, each gets its own INFO ``occurrence.submitted``.
A bigger burst gets one INFO summary (``count``, ``first_key``, ``last_key`` ...) and the
per-occurrence records at DEBUG: formatting a JSON line costs ~40-60 us, a sizeable share of a
broker round trip, and 10,000 identical lines help nobody (the executions table has them all)."""
STOP_POLL = 0.2
"""Longest single wait, so a stop request (signal or another thread) is seen promptly."""


def retry_delay(attempts: int) -> float:
    """Backoff before the next try after ``attempts`` failed attempts: 1 s, 2 s, 4 s ... 60 s."""
    return float(min(RETRY_CAP, RETRY_BASE * 2 ** max(0, attempts - 1)))


@dataclass(frozen=True, slots=True, kw_only=True)
class IterationResult:
    """What one iteration did, and how long the loop should sleep before the next."""

    leader: bool
    """Whether this scheduler held the lease (within its local deadline) during the iteration."""
    fencing_token: int | None = None
    became_leader: bool = False
    claimed: int = 0
    submitted: int = 0
    """Successful submissions, resubmissions and manual runs included."""
    resubmitted: int = 0
    """Pending rows (left ``claimed`` earlier, or manual requests) submitted successfully."""
    retrying: int = 0
    """Failed submissions that will be retried."""
    failed: int = 0
    """Failed submissions marked ``submit_failed``."""
    missed: int = 0
    conflicts: int = 0
    refused: bool = False
    error: str | None = None
    sleep: float = 0.0


class _Tally:
    __slots__ = (
        "claimed",
        "submitted",
        "resubmitted",
        "retrying",
        "failed",
        "missed",
        "conflicts",
        "refused",
    )

    def __init__(self) -> None:
        self.claimed = 0
        self.submitted = 0
        self.resubmitted = 0
        self.retrying = 0
        self.failed = 0
        self.missed = 0
        self.conflicts = 0
        self.refused = False

    def result(self, **fields: Any) -> IterationResult:
        """The iteration's result: these counts plus ``fields`` (leader, sleep, ...)."""
        counts = {name: getattr(self, name) for name in self.__slots__ if name != "refused"}
        return IterationResult(**counts, **fields)


class Scheduler:
    """Ties the store, the lease and a submitter together. Not thread-safe: one loop per
    instance (``request_stop`` may be called from any thread or a signal handler)."""

    def __init__(
        self,
        store: ScheduleStore,
        submitter: TaskSubmitter,
        *,
        settings: Settings,
        clock: Clock | None = None,
        lease_name: str = "scheduler",
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.settings = settings
        self.clock = clock or SystemClock()
        self.scheduler_id = settings.scheduler_id
        self.lease = LeaseManager(
            store,
            holder=settings.scheduler_id,
            ttl=settings.lease_ttl,
            renew_interval=settings.lease_renew_interval,
            name=lease_name,
            clock=self.clock,
        )
        self._stop = threading.Event()
        self._leader_token: int | None = None
        self._standby_logged = False
        # execution id -> monotonic instant before which it is not retried
        self._retry_at: dict[int, float] = {}
        # (local monotonic, store clock) read together: when a claimed occurrence is due here.
        self._store_ref: tuple[float, datetime] | None = None
        # This iteration's read of next_due_at(), once made (a 1-tuple: None is an answer).
        self._due_read: tuple[datetime | None] | None = None
        self._error_streak = 0
        self._submissions = 0
        self._submissions_lock = threading.Lock()
        # 0: the submitter is called from this scheduler's thread only.
        self._threads = submit_concurrency(submitter)
        # The submitter takes chunks (``submit_many``) rather than one occurrence at a time.
        self._chunked = many_submitter(submitter) is not None
        self._executor: ThreadPoolExecutor | None = None
        crash = os.environ.get(CRASH_ENV, "").strip()
        self._crash_after = int(crash) if crash.isdigit() and int(crash) > 0 else 0
        self._after_bookkeeping: Callable[[], None] | None = getattr(
            submitter, "after_bookkeeping", None
        )

    # -- control --------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Ask the loop to stop after the current batch. Safe from signal handlers and threads."""
        self._stop.set()

    def release(self) -> bool:
        """Give the lease up now (graceful stop) so a standby takes over at once."""
        self._leader_token = None
        try:
            return self.lease.release()
        except StoreError as exc:
            # The lease then expires on its own within lease_ttl.
            self._log_store_error("release", exc)
            return False

    def _log_store_error(
        self, stage: str, exc: StoreError, *, level: int = logging.WARNING, **fields: Any
    ) -> None:
        log_event(
            "scheduler.error",
            level=level,
            scheduler_id=self.scheduler_id,
            stage=stage,
            error=str(exc),
            **fields,
        )

    def close(self) -> None:
        """Stop the submission threads (if the submitter allowed any). :meth:`run` calls it on
        its way out; the scheduler may still be used afterwards (they are started again)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def run(self, stop: threading.Event | None = None) -> None:
        """Loop until ``stop`` is set, :meth:`request_stop` is called, or SIGTERM/SIGINT arrive
        (handlers are installed only when called from the main thread). On the way out the
        current batch is finished and the lease released."""
        if stop is not None:
            self._stop = stop
        previous = self._install_signal_handlers()
        log_event(
            "scheduler.started",
            scheduler_id=self.scheduler_id,
            submitter=getattr(self.submitter, "name", type(self.submitter).__name__),
            store=_safe_info(self.store),
            lease_ttl=self.settings.lease_ttl,
            lease_renew_interval=self.settings.lease_renew_interval,
            batch_size=self.settings.batch_size,
            claim_ahead=self.settings.claim_ahead,
        )
        try:
            # Start listening for wake-ups before the first iteration (stores that LISTEN do so
            # from their first wait), so a change made during that iteration is not missed.
            try:
                self.store.wait(0)
            except StoreError:
                pass  # the first iteration reports the outage
            while not self._stop.is_set():
                try:
                    result = self.run_once()
                except Exception as exc:
                    # A bug, not an outage (those are StoreErrors, handled in run_once). Keep
                    # the replica alive and loud rather than let it die in a restart loop.
                    logger.exception(
                        "scheduler.error",
                        extra={"goatbeat": {"scheduler_id": self.scheduler_id, "error": repr(exc)}},
                    )
                    self._drop_lease()
                    self._sleep(min(ERROR_BACKOFF_CAP, self.settings.max_sleep.total_seconds()))
                    continue
                if self._stop.is_set():
                    break
                self._sleep(result.sleep)
        finally:
            released = self.release()
            self.close()
            self._restore_signal_handlers(previous)
            log_event("scheduler.stopped", scheduler_id=self.scheduler_id, released=released)

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        previous: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    def _sleep(self, seconds: float) -> None:
        """Sleep in short slices so a stop request is seen quickly; a NOTIFY ends it at once."""
        deadline = self.clock.monotonic() + seconds
        while not self._stop.is_set():
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return
            try:
                if self.store.wait(min(remaining, STOP_POLL)):
                    return
            except StoreError as exc:
                self._log_store_error("wait", exc)
                self._stop.wait(min(remaining, STOP_POLL))

    # -- one iteration --------------------------------------------------------------------------

    def run_once(self) -> IterationResult:
        """One iteration; never raises for store or submitter failures (they are logged)."""
        tally = _Tally()
        became_leader = False
        self._store_ref = None  # each iteration maps the store's clock afresh
        self._due_read = None
        stage = "lease"
        try:
            # Past the local deadline we renew at once rather than wait for the renewal slot.
            if self.lease.due_for_renewal() or not self.lease.is_held():
                grant = self.lease.acquire()
                if grant is None:
                    self._on_standby()
                elif grant.token != self._leader_token:
                    became_leader = True
                    self._leader_token = grant.token
                    self._standby_logged = False
                    # Backoff state belongs to the previous reign; pending rows go out now.
                    self._retry_at.clear()
                else:
                    log_event(
                        "lease.renewed",
                        level=logging.DEBUG,
                        scheduler_id=self.scheduler_id,
                        fencing_token=grant.token,
                        lease=self.lease.name,
                    )
            if not self.lease.is_held():
                self._error_streak = 0
                return IterationResult(leader=False, sleep=self._standby_sleep())
            grant = self.lease.grant
            assert grant is not None
            stage = "pending"
            self._submit_pending(grant, tally, force=became_leader)
            stage = "claim"
            self._claim_and_submit(grant, tally)
            stage = "sleep"
            sleep = self._leader_sleep(tally)
        except StoreError as exc:
            self._error_streak += 1
            backoff = min(
                ERROR_BACKOFF_CAP,
                self.settings.max_sleep.total_seconds(),
                ERROR_BACKOFF_BASE * 2 ** (self._error_streak - 1),
            )
            self._log_store_error(stage, exc, level=logging.ERROR, retry_in=backoff)
            # We cannot know whether a renewal or a claim landed: stop trusting the lease.
            self._drop_lease()
            return tally.result(
                leader=False, became_leader=became_leader, error=str(exc), sleep=backoff
            )
        self._error_streak = 0
        return tally.result(
            leader=not tally.refused,
            fencing_token=grant.token,
            became_leader=became_leader,
            refused=tally.refused,
            sleep=sleep,
        )

    def _drop_lease(self) -> None:
        self.lease.drop()
        self._leader_token = None

    def _on_standby(self) -> None:
        self._leader_token = None
        if self._standby_logged:
            return
        self._standby_logged = True
        holder: str | None = None
        try:
            current = self.store.read_lease(self.lease.name)
        except StoreError:
            current = None
        if current is not None:
            holder = current[0]
        log_event(
            "lease.standby", scheduler_id=self.scheduler_id, lease=self.lease.name, holder=holder
        )

    # -- pending rows: resubmissions, retries, manual runs --------------------------------------

    def _submit_pending(self, grant: LeaseGrant, tally: _Tally, *, force: bool) -> None:
        """Submit ``claimed`` rows page by page while pages come back full. Rows backing off
        from a failed submission are left out of the query, so every page is ready however
        many wait, and this always ends: a row leaves the next page by being submitted, by
        failing for good, or by failing again (it then backs off)."""
        limit = self.settings.batch_size
        retry_at = self._retry_at
        while self.lease.is_held() and not self._stop.is_set():
            now_m = self.clock.monotonic()
            waiting = [] if force else [i for i, at in retry_at.items() if at > now_m]
            rows = self.store.pending(limit=limit, exclude=waiting)
            if not rows:
                return
            if self._store_ref is None:
                # Another scheduler may have claimed some ahead of their instant.
                self._store_reference()
            self._submit_batch(rows, grant, tally, pending=True)
            force = False
            if len(rows) < limit:
                return

    # -- claiming -------------------------------------------------------------------------------

    def _claim_and_submit(self, grant: LeaseGrant, tally: _Tally) -> None:
        """Claim batch after batch while they come back full. With a submitter that may be
        called from other threads, a full batch is sent from a submission thread while this
        one claims the next batch (the database round trips overlap the broker's); the
        outcomes of each batch are still recorded in one call, before the next is sent."""
        limit = self.settings.batch_size
        if not self.lease.is_held():
            return
        target = self._claim_target()
        result: ClaimResult | None = self._claim(grant, limit, target)
        while result is not None:
            if result.refused:
                tally.refused = True
                log_event(
                    "claim.refused",
                    level=logging.WARNING,
                    scheduler_id=self.scheduler_id,
                    fencing_token=grant.token,
                    lease=self.lease.name,
                )
                self._drop_lease()
                return
            occurrences = result.occurrences
            self._log_claim(result, grant, tally)
            more = max(result.schedules_seen, len(occurrences)) >= limit and not self._stop.is_set()
            if not (occurrences and more and self._threads):
                if occurrences:
                    self._submit_batch(occurrences, grant, tally, pending=False)
                result = (
                    self._claim(grant, limit, target) if more and self.lease.is_held() else None
                )
                continue
            sending = self._pool().submit(self._send_many, occurrences)
            try:
                result = self._claim(grant, limit, target) if self.lease.is_held() else None
            finally:
                # Even when that claim failed: what was sent must be recorded.
                self._submit_batch(occurrences, grant, tally, pending=False, sent=sending.result())

    def _claim(self, grant: LeaseGrant, limit: int, target: datetime | None) -> ClaimResult:
        return self.store.claim_due(grant, scheduler_id=self.scheduler_id, limit=limit, now=target)

    def _claim_target(self) -> datetime | None:
        """The instant to claim at when the next one is less than ``claim_ahead`` away by the
        store's clock; None to claim what is due now."""
        ahead = self.settings.claim_ahead
        if not ahead:
            return None
        nxt = self.store.next_due_at()
        self._due_read = (nxt,)
        if nxt is None:
            return None
        now = self._store_reference()
        return nxt if now < nxt <= now + ahead else None

    def _store_reference(self) -> datetime:
        """Read the store's clock and pair it with the local monotonic clock read *after* the
        answer came back: mapped through the pair, an instant can only come out late."""
        now = self.store.now()
        self._store_ref = (self.clock.monotonic(), now)
        return now

    def _store_now(self) -> datetime:
        """The store's clock: read through this iteration's reference when there is one (no
        round trip), else asked."""
        ref = self._store_ref
        if ref is None:
            return self.store.now()
        mono, store_now = ref
        return store_now + timedelta(seconds=self.clock.monotonic() - mono)

    def _wait_for_instant(self, occ: Occurrence) -> None:
        """Block until ``occ.scheduled_at`` by the store's clock when it was claimed ahead."""
        ref = self._store_ref
        if ref is None:
            return
        mono, store_now = ref
        ahead = (occ.scheduled_at - store_now).total_seconds()
        if ahead <= 0:
            return
        # Never more than the largest claim_ahead any replica may use: a clock that jumped
        # must not park a submission for hours.
        ahead = min(ahead, MAX_CLAIM_AHEAD.total_seconds())
        remaining = mono + ahead - self.clock.monotonic()
        if remaining > 0:
            self.clock.sleep(remaining)

    def _log_claim(self, result: ClaimResult, grant: LeaseGrant, tally: _Tally) -> None:
        occurrences = result.occurrences
        tally.claimed += len(occurrences)
        for damaged in result.quarantined:
            # Once per damage: a quarantined row is no longer due until it is repaired.
            log_event(
                "schedule.invalid",
                level=logging.ERROR,
                scheduler_id=self.scheduler_id,
                schedule=damaged.name,
                column=damaged.column,
                value=short_repr(damaged.value),
                error=damaged.detail,
            )
        if result.missed:
            tally.missed += result.missed
            log_event(
                "occurrence.missed",
                level=logging.WARNING,
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                missed=result.missed,
                schedules=sorted({o.schedule_name for o in occurrences}) or None,
            )
        if result.conflicts:
            tally.conflicts += result.conflicts
            log_event(
                "claim.conflict",
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                conflicts=result.conflicts,
            )
        if occurrences and logger.isEnabledFor(logging.DEBUG):
            skew = self._store_skew()
            for occ in occurrences:
                log_event(
                    "occurrence.claimed",
                    level=logging.DEBUG,
                    **_occurrence_fields(occ, self.scheduler_id, grant),
                    lateness=_lateness(self.clock.now() + skew, occ.scheduled_at),
                )

    # -- submission -----------------------------------------------------------------------------

    def _store_skew(self) -> timedelta:
        """The store's clock minus ours (zero when the store cannot answer right now)."""
        try:
            return self.store.now() - self.clock.now()
        except StoreError:
            return timedelta(0)

    def _submit_batch(
        self,
        occurrences: Sequence[Occurrence],
        grant: LeaseGrant,
        tally: _Tally,
        *,
        pending: bool,
        sent: Iterable[_Sent | None] | None = None,
    ) -> None:
        """Submit while the local deadline holds; record every outcome in one store call.
        Occurrences left unsubmitted at the deadline stay ``claimed`` for the next leader.
        ``sent``: the results of submissions already made (by a submission thread)."""
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
                skew.append(self._store_skew())
            return self.clock.now() + skew[0]

        max_attempts = 1 + self.settings.max_submit_retries
        submitted: list[Occurrence] = []
        for one in self._send_all(occurrences) if sent is None else sent:
            if one is None:
                continue  # the local deadline passed first: left claimed
            occ, task_id, exc = one
            if exc is not None:
                attempts = occ.attempts + 1
                final = isinstance(exc, PermanentSubmitError) or attempts >= max_attempts
                error = f"{type(exc).__name__}: {exc}"
                outcomes.append(
                    SubmitOutcome(execution_id=occ.execution_id, ok=False, error=error, final=final)
                )
                if final:
                    tally.failed += 1
                    self._retry_at.pop(occ.execution_id, None)
                    log_event(
                        "occurrence.submit_failed",
                        level=logging.ERROR,
                        **_occurrence_fields(occ, self.scheduler_id, grant),
                        attempts=attempts,
                        error=error,
                    )
                else:
                    tally.retrying += 1
                    delay = retry_delay(attempts)
                    self._retry_at[occ.execution_id] = self.clock.monotonic() + delay
                    log_event(
                        "occurrence.submit_retry",
                        level=logging.WARNING,
                        **_occurrence_fields(occ, self.scheduler_id, grant),
                        attempts=attempts,
                        retry_in=delay,
                        error=error,
                    )
                continue
            outcomes.append(
                SubmitOutcome(execution_id=occ.execution_id, ok=True, backend_task_id=task_id)
            )
            tally.submitted += 1
            if pending:
                tally.resubmitted += 1
                was_retry = self._retry_at.pop(occ.execution_id, None) is not None
                if info and occ.kind is ExecutionKind.SCHEDULED and not was_retry:
                    # A row another leader (or a crash) left claimed, now actually resubmitted.
                    log_event(
                        "occurrence.resubmitted",
                        **_occurrence_fields(occ, self.scheduler_id, grant),
                        attempts=occ.attempts,
                    )
            if burst:
                submitted.append(occ)
            if log_each:
                log_event(
                    "occurrence.submitted",
                    level=each_level,
                    **_occurrence_fields(occ, self.scheduler_id, grant),
                    lateness=_lateness(store_now(), occ.scheduled_at),
                    kind=occ.kind,
                    backend_task_id=task_id,
                )
        if burst and info and submitted:
            now = store_now()
            log_event(
                "occurrence.submitted",
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                count=len(submitted),
                schedules=len({o.schedule_name for o in submitted}),
                first_key=submitted[0].idempotency_key,
                last_key=submitted[-1].idempotency_key,
                scheduled_at=min(o.scheduled_at for o in submitted),
                lateness=max(_lateness(now, o.scheduled_at) for o in submitted),
            )
        if outcomes:
            self.store.record_outcomes(outcomes)
            if self._after_bookkeeping is not None:
                self._after_bookkeeping()

    def _send_all(self, occurrences: Sequence[Occurrence]) -> Iterable[_Sent | None]:
        """The result of each submission, in the order of ``occurrences`` (None: not sent)."""
        if self._threads > 1 and len(occurrences) > 1:
            return self._send_many(occurrences)
        return self._send_in_order(occurrences)

    def _send_in_order(self, occurrences: Sequence[Occurrence]) -> Iterator[_Sent | None]:
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

    def _send_many(self, occurrences: Sequence[Occurrence]) -> list[_Sent | None]:
        """:meth:`_send_all` for a submitter that may be called from other threads: up to
        ``concurrent_submits`` threads (the calling one included) share the batch, each taking
        every k-th occurrence so the oldest still go out first. They meet only at the end:
        waking a waiting thread per message costs more under the GIL than it would hide."""
        results: list[_Sent | None] = [None] * len(occurrences)
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

    def _send_one(self, occ: Occurrence) -> _Sent | None:
        """Submit one occurrence unless the local deadline has passed. May run in a
        submission thread: it touches nothing but the lease's deadline and the crash count.
        An occurrence claimed ahead waits for its instant first."""
        self._wait_for_instant(occ)
        if not self.lease.is_held():
            return None
        try:
            task_id = self.submitter.submit(occ)
        except Exception as exc:  # every failure is retried or recorded
            return occ, None, exc
        self._count_submissions(1)
        return occ, task_id, None

    def _send_chunk(self, chunk: Sequence[Occurrence]) -> list[_Sent | None]:
        """:meth:`_send_one` for a chunk, through the submitter's ``submit_many``."""
        for occ in chunk:  # in scheduled order: only the first ones can still be ahead
            self._wait_for_instant(occ)
        if not self.lease.is_held():
            return [None] * len(chunk)
        answers = submit_all(self.submitter, chunk)  # every failure is retried or recorded
        sent: list[_Sent | None] = [
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

    # -- sleeping -------------------------------------------------------------------------------

    def _leader_sleep(self, tally: _Tally) -> float:
        max_sleep = self.settings.max_sleep.total_seconds()
        candidates = [max_sleep]
        if self.lease.grant is None or not self.lease.is_held():
            candidates.append(0.0)  # refused, or past the local deadline: renew right away
        else:
            candidates.append(self.lease.seconds_until_renewal())
        # The read made before claiming still holds when the claim moved no schedule (an edit
        # since then NOTIFYs, which ends the sleep).
        moved = tally.claimed or tally.missed or tally.conflicts
        nxt = self._due_read[0] if self._due_read and not moved else self.store.next_due_at()
        if nxt is not None:
            # Due-ness is judged by the store's clock, so the distance is too; wake early
            # enough to claim ahead of the instant.
            until = nxt - self._store_now() - self.settings.claim_ahead
            candidates.append(until.total_seconds())
        if self._retry_at:
            candidates.append(min(self._retry_at.values()) - self.clock.monotonic())
        sleep = max(0.0, min(candidates))
        if sleep < MIN_IDLE_SLEEP and not (tally.claimed or tally.submitted or tally.failed):
            sleep = MIN_IDLE_SLEEP
        return sleep

    def _standby_sleep(self) -> float:
        max_sleep = self.settings.max_sleep.total_seconds()
        try:
            current = self.store.read_lease(self.lease.name)
            if current is None:
                return MIN_IDLE_SLEEP
            _holder, _token, expires_at, expired = current
            if expired:
                return MIN_IDLE_SLEEP
            until = (expires_at - self.store.now()).total_seconds()
        except StoreError:
            return min(max_sleep, ERROR_BACKOFF_BASE)
        # Wake just after the expiry; a release NOTIFY ends the wait sooner.
        return max(MIN_IDLE_SLEEP, min(max_sleep, until + MIN_IDLE_SLEEP))


_Sent = tuple[Occurrence, str | None, Exception | None]
"""(occurrence, backend task id, the exception the submission raised)."""


def _occurrence_fields(occ: Occurrence, scheduler_id: str, grant: LeaseGrant) -> dict[str, Any]:
    """The fields every per-occurrence log record starts with."""
    return {
        "schedule": occ.schedule_name,
        "idempotency_key": occ.idempotency_key,
        "scheduler_id": scheduler_id,
        "fencing_token": grant.token,
        "scheduled_at": occ.scheduled_at,
    }


def _lateness(now: datetime, scheduled_at: datetime) -> float:
    return round((now - scheduled_at).total_seconds(), 6)


def _safe_info(store: ScheduleStore) -> Any:
    try:
        return store.info()
    except Exception:  # a log line's description must not stop the start
        return type(store).__name__
