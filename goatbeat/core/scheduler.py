"""The scheduler loop: lease, claim, submit, bookkeeping, sleep.

One :meth:`Scheduler.run_once` is one iteration:

1. Acquire or renew the lease when it is due for renewal. A store failure is logged
   (``scheduler.error``), the lease is dropped locally and the loop backs off; it never crashes.
2. Not the holder (or past the local deadline): dispatch nothing; sleep until the lease could
   expire or a release NOTIFY arrives.
3. Resubmit the ``claimed`` executions the store holds (``pending()``): a crash between
   submission and bookkeeping left them (their key is unchanged, so dispatch is at least
   once), manual run requests arrive that way, and failed submissions come back when their
   retry is due. The backoff is in the rows, so a new leader keeps the old one's.
4. Claim due occurrences in batches of ``batch_size`` while full batches come back and the local
   deadline still holds, submit them, and record the outcomes of each batch in one call.
5. Sleep (``store.wait``, so a NOTIFY ends it early) until the earliest of the next
   ``next_run_at`` (less ``claim_ahead``), the lease renewal, the next submit retry
   (``next_retry_at()``, asked only after becoming leader or a failed submission), and
   ``max_sleep``.

Claiming ahead. When the earliest ``next_run_at`` is less than ``claim_ahead`` (250 ms by
default) away by the store's clock, the iteration claims the schedules due at that instant
already (``claim_due(now=instant)``: due-ness and misfire planning judged at that instant), so
the transaction's round trips and the planning happen before it. Each occurrence is then held
until its ``scheduled_at`` — mapped onto the local monotonic clock from a store-clock reading
taken after the query, so the mapping can only err late — and submitted then, never before.
Rows another scheduler claimed ahead and left ``claimed`` wait for their instant the same way.
A schedule disabled or edited inside that window keeps the occurrence already claimed, as it
would a moment later.

Jitter. An occurrence of a schedule with ``jitter`` is claimed at its instant but sent at
``instant + offset`` (:mod:`goatbeat.core.jitter`): the claim leaves it in the store, waiting
(``retry_at``), unless that is within the claim-ahead window, and ``pending()`` returns it
when it is due, here or on the next leader alike. The sleep wakes for it as for a retry.

Overlap. The store applies a schedule's overlap policy when it claims (skipped and buffered
occurrences are logged ``occurrence.skipped`` / ``occurrence.buffered``) and starts a
buffered occurrence in a later claim once the run it waited for has ended; ``next_due_at``
includes the expiry of that run (``max_runtime``), and a completion report wakes the loop.
Operations. After each iteration, best effort (a failure is logged and never stops dispatch):
the heartbeat row, the record of the occurrences its claims dropped, the leader's checks (lost
runs, alerts, refused schedules readmitted) of :mod:`goatbeat.core.upkeep`, and each
:class:`SchedulerObserver` (the Prometheus metrics). A graceful stop deletes the row. The
database's own identity (a promotion, a restore) is watched by :mod:`goatbeat.core.dbwatch`.

Refusal. A scheduler built with an allow-list checks the task of every occurrence before
anything is sent: see :mod:`goatbeat.core.upkeep`.

Reigns. Every lease the scheduler may hold is a :class:`~goatbeat.core.reign.Reign` (its lease,
shard, fencing token, due read and retry flag), and each step above is given the reign it works
for: there is no "current" lease. A single lease is one reign; with shards (``shards`` > 1,
PostgreSQL; docs/scaling.md) there is one per shard and each iteration first balances them
(:class:`~goatbeat.core.reign.ShardBalance`: renew those held, release extras to a member short
of its fair share, take free ones up to this scheduler's share, or any shard left free for a
renewal interval), then does steps 3-5 for each reign held: pending rows, claims, the sleep (the
earliest of every reign's, at most a renewal interval, so the heartbeat that makes this
scheduler a member is written in time); a graceful stop then removes the heartbeat row
first, then releases every lease. A store error or a bug in the loop drops every lease held.

Claims go through one path (:meth:`Scheduler._claim_step`, one batch of one reign). One reign
held claims batch after batch with the submission overlapped (a full batch sent from a
submission thread while the next is claimed, and the outcomes written by the next claim);
several take one batch each in turn, each sent before the next claim: the due index holds every
shard's rows, so draining one shard first would walk past the others' due rows again and again
(a backlog would cost its square).

Submission. Sending a batch (one by one, in ``submit_many`` chunks, from submission threads),
the retries with backoff after a failed submission, the bookkeeping of every outcome in one
store call and the per-occurrence log records are :mod:`goatbeat.core.submission`'s; this loop
hands it each batch, with the lease it goes out under and its store-clock mapping.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import signal
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Any

from goatbeat.core.alerts import Alerter
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.bounded import bound_calls, io_timeout
from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import Settings
from goatbeat.core.dbwatch import DatabaseWatch
from goatbeat.core.errors import StoreError
from goatbeat.core.instance import new_instance
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import (
    ClaimResult,
    ExecutionKind,
    LeaseGrant,
    Occurrence,
    SubmitOutcome,
)
from goatbeat.core.observability import log_event, logger
from goatbeat.core.reign import (
    ERROR_BACKOFF_BASE,
    MIN_IDLE_SLEEP,
    Reign,
    ShardBalance,
    SingleLease,
    lease_plan,
)
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submission import (
    BatchCounts,
    Sent,
    StoreTime,
    Submission,
)
from goatbeat.core.submit import TaskSubmitter
from goatbeat.core.upkeep import (
    ALERT_CHECK_INTERVAL,
    LOST_CHECK_INTERVAL,
    IterationResult,
    SchedulerObserver,
    Tally,
    Upkeep,
)

__all__ = [
    "Scheduler",
    "IterationResult",
    "SchedulerObserver",
    "ALERT_CHECK_INTERVAL",
    "LOST_CHECK_INTERVAL",
    "MIN_IDLE_SLEEP",
]

ERROR_BACKOFF_CAP = 30.0
_REQUESTED = frozenset({ExecutionKind.MANUAL, ExecutionKind.BACKFILL})
"""Kinds of the executions that arrive unclaimed, on request."""
STOP_POLL = 0.2
"""Longest single wait, so a stop request (signal or another thread) is seen promptly."""


def _takes_keyword(function: Any, name: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``name``."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == name and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in parameters
    )


@dataclass(slots=True, eq=False)
class _Pass:
    """One reign's claims in one iteration (see :meth:`Scheduler._claim_step`)."""

    reign: Reign
    tally: Tally
    overlap: bool
    """Send full batches from a submission thread while the next is claimed, and leave their
    outcomes to the next claim; off, each batch is sent and recorded before the next claim."""
    grant: LeaseGrant | None = None
    target: datetime | None = None
    started: bool = False
    in_flight: deque[tuple[Sequence[Occurrence], Future[list[Sent | None]]]] = field(
        default_factory=deque
    )
    """Batches handed to the submission thread, oldest first, not yet recorded."""
    unrecorded: list[SubmitOutcome] = field(default_factory=list)
    """Sent, for the next claim to write."""


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
        allowed: TaskAllowList | None = None,
        alerter: Alerter | None = None,
    ) -> None:
        self.store = store
        self.allowed = allowed
        """The tasks stored schedules may name; None: every task (no check)."""
        self.submitter = submitter
        self.settings = settings
        self.clock = clock or SystemClock()
        self.scheduler_id = settings.scheduler_id
        """The name in logs, executions and status (several processes may share it)."""
        self.instance = new_instance(settings.scheduler_id)
        """This process: what holds the lease, its fencing token and the heartbeat row."""
        self.lease_name = lease_name
        """The single lease's name (with shards, each shard's lease has its own)."""
        self._watch = DatabaseWatch(
            store,
            clock=self.clock,
            scheduler_id=self.scheduler_id,
            every=settings.lease_renew_interval,
        )
        # One reign per lease this scheduler may hold (docs/scaling.md for shards).
        leases = lease_plan(
            store,
            settings,
            instance=self.instance,
            clock=self.clock,
            name=lease_name,
            watch=self._watch,
        )
        self.reigns: list[Reign] = leases.reigns
        self._single = leases if isinstance(leases, SingleLease) else None
        self._balance = leases if isinstance(leases, ShardBalance) else None
        self._stop = threading.Event()
        # When a claimed occurrence is due here (see StoreTime).
        self._store_time = StoreTime(store, self.clock)
        self._error_streak = 0
        self._stage = "lease"  # what the iteration is doing, for its error's log record
        # Whether the store's claims write the outcomes of the batch before (``record``): a
        # store written before that parameter gets its outcomes recorded separately.
        self._claims_record = _takes_keyword(store.claim_due, "record")
        # Connections are bounded from the start (the CLI's first store call included); the
        # statements once run() begins (see bound_calls).
        self.io_timeout = io_timeout(self.lease.valid_for)
        connects = getattr(store, "bound_connects", None)
        if callable(connects):
            connects(self.io_timeout)
        self.submission = Submission(
            store,
            submitter,
            clock=self.clock,
            scheduler_id=settings.scheduler_id,
            max_submit_retries=settings.max_submit_retries,
            wait_for_instant=self._store_time.wait_for_instant,
        )
        self.alerter = alerter
        self.version = _version()
        # Operations (see the module docstring).
        self.upkeep = Upkeep(
            store,
            submitter,
            settings=settings,
            clock=self.clock,
            instance=self.instance,
            version=self.version,
            alerter=alerter,
            allowed=allowed,
        )

    @property
    def lease(self) -> LeaseManager:
        """The first reign's lease: the single lease (with shards, shard 0's)."""
        return self.reigns[0].lease

    # -- control --------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Ask the loop to stop after the current batch. Safe from signal handlers and threads."""
        self._stop.set()

    def observe(self, observer: SchedulerObserver) -> None:
        """Tell ``observer`` about every iteration and submission from now on."""
        self.upkeep.observers.append(observer)
        self.submission.on_submitted = self.upkeep.submitted

    def release(self) -> bool:
        """Give the lease up now (graceful stop) so a standby takes over at once, and take
        this scheduler's heartbeat row away."""
        if self._balance is not None:
            # The heartbeat row goes first: the schedulers the releases wake up then count
            # one member less and take this one's shards at once.
            self.upkeep.leave()
        released = False
        for reign in self.reigns:
            reign.token = None
            if reign.lease.grant is None and self._balance is not None:
                continue
            try:
                released = reign.lease.release() or released
            except StoreError as exc:
                # The lease then expires on its own within lease_ttl.
                fields: dict[str, Any] = {} if self._balance is None else {"lease": reign.name}
                self._log_store_error("release", exc, **fields)
        self.upkeep.leave()
        return released

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
        its way out; the scheduler may still be used afterwards (they are started again).
        Alerts still queued are delivered first (for a few seconds at most)."""
        self.submission.close()
        if self.alerter is not None:
            self.alerter.close()

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
        self.bound_calls()
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
                    self._drop_every_lease()
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

    def bound_calls(self) -> float:
        """Bound every call this loop makes to a server it does not control (the database,
        the broker, their DNS lookups) at :func:`~goatbeat.core.bounded.io_timeout` of the
        lease, below its local deadline (docs/failover.md, "Bounded waits"). :meth:`run`
        calls it once the start-up publication is done (which may legitimately take longer);
        returns the bound."""
        seconds = self.io_timeout
        bound_calls(self.store, seconds)
        bound_calls(self.submitter, seconds)
        self.submission.bound_calls(seconds)
        return seconds

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
        started = self.clock.monotonic()
        result = self._iterate()
        self._after_iteration(result, self.clock.monotonic() - started)
        return result

    def _held(self) -> list[Reign]:
        return [reign for reign in self.reigns if reign.held()]

    def _iterate(self) -> IterationResult:
        self._store_time.forget()  # each iteration maps the store's clock afresh
        for reign in self.reigns:
            reign.due_read = None
        tallies = {reign: Tally() for reign in self.reigns}
        total = Tally()
        became_leader = False
        grant: LeaseGrant | None = None
        sleeps: list[float] = []
        self._stage = "lease"
        try:
            if self._single is not None:
                became_leader = self._single.renew()
                self._join()
                if not self._single.reign.held():
                    self._error_streak = 0
                    return IterationResult(leader=False, sleep=self._single.standby_sleep())
                grant = self._single.reign.grant
            elif self._balance is not None:
                self._watch.watch()
                became_leader, standby_sleep = self._balance.balance()
                self._join()
                sleeps += [self.settings.lease_renew_interval.total_seconds(), standby_sleep]
            self._stage = "pending"
            for reign in self._held():
                self._submit_pending(reign, tallies[reign])
            self._stage = "claim"
            self._claim_all(tallies)
            self._stage = "sleep"
            if self._balance is None:
                sleeps.append(self._leader_sleep(self.reigns[0], tallies[self.reigns[0]]))
            else:
                for reign in self._held():
                    # With shards each iteration asks every shard held for its next retry.
                    reign.retries_possible = True
                    sleeps.append(self._leader_sleep(reign, tallies[reign]))
        except StoreError as exc:
            self._error_streak += 1
            backoff = min(
                ERROR_BACKOFF_CAP,
                self.settings.max_sleep.total_seconds(),
                ERROR_BACKOFF_BASE * 2 ** (self._error_streak - 1),
            )
            self._log_store_error(self._stage, exc, level=logging.ERROR, retry_in=backoff)
            # We cannot know whether a renewal or a claim landed: stop trusting every lease.
            self._drop_every_lease()
            for tally in tallies.values():
                total.merge(tally)
            return total.result(
                leader=False, became_leader=became_leader, error=str(exc), sleep=backoff
            )
        self._error_streak = 0
        for tally in tallies.values():
            total.merge(tally)
        sleep = max(0.0, min(sleeps))
        if sleep < MIN_IDLE_SLEEP and not (total.claimed or total.submitted or total.failed):
            sleep = MIN_IDLE_SLEEP
        token: int | None
        if grant is not None:  # the single lease
            leader, token = not total.refused, grant.token
        else:
            tokens = [r.lease.grant.token for r in self.reigns if r.lease.grant and r.held()]
            leader, token = bool(tokens), tokens[0] if tokens else None
        return total.result(
            leader=leader,
            fencing_token=token,
            became_leader=became_leader,
            refused=total.refused,
            sleep=sleep,
        )

    def _drop(self, reign: Reign) -> None:
        reign.drop()
        # After a store error the connection may lead to another server (a promoted standby):
        # look at the database's identity before anything is claimed there.
        self._watch.look_again()

    def _drop_every_lease(self) -> None:
        for reign in self.reigns:
            self._drop(reign)

    # -- pending rows: resubmissions, retries, manual runs --------------------------------------

    def _submit_pending(self, reign: Reign, tally: Tally) -> None:
        """Submit ``claimed`` rows page by page while pages come back full. Rows backing off
        from a failed submission are left out by the store (their ``retry_at``), so every
        page is ready however many wait, and this always ends: a row leaves the next page by
        being submitted, by failing for good, or by failing again (it then backs off)."""
        limit = self.settings.batch_size
        grant = reign.grant
        while reign.held() and not self._stop.is_set():
            rows = reign.pending(limit)
            if not rows:
                return
            if not self._store_time.mapped:
                # Another scheduler may have claimed some ahead of their instant.
                self._store_time.reference()
            page = len(rows)
            rows = self._claim_manual_runs(rows, grant)
            allowed = self._screen(rows, grant, tally)
            if allowed:
                self._submit_batch(reign, allowed, grant, tally, pending=True)
            if page < limit:
                return

    def _claim_manual_runs(self, rows: list[Occurrence], grant: LeaseGrant) -> list[Occurrence]:
        """Run-now requests and backfills arrive unclaimed: claim them (this scheduler's id and token, a run
        of their schedule) before submitting, as a claim would. Those another leader claimed
        meanwhile, or all of them when the lease is gone, are left out."""
        fresh = [o.execution_id for o in rows if o.kind in _REQUESTED and o.fencing_token is None]
        if not fresh:
            return rows
        claimed = set(
            self.store.claim_manual_runs(grant, scheduler_id=self.scheduler_id, execution_ids=fresh)
        )
        unclaimed = set(fresh) - claimed
        return [
            dataclasses.replace(o, fencing_token=grant.token) if o.execution_id in claimed else o
            for o in rows
            if o.execution_id not in unclaimed
        ]

    # -- claiming -------------------------------------------------------------------------------

    def _claim_all(self, tallies: dict[Reign, Tally]) -> None:
        """Claim for every reign held: batch after batch, overlapped, when one is held; one
        batch per reign in turn when several are (see the module docstring)."""
        held = self._held()
        if len(held) == 1:
            one = _Pass(held[0], tallies[held[0]], overlap=True)
            try:
                while self._claim_step(one):
                    pass
            finally:
                self._end_pass(one)
            return
        passes = [_Pass(reign, tallies[reign], overlap=False) for reign in held]
        active = list(passes)
        try:
            while active and not self._stop.is_set():
                for claims in list(active):
                    lease = claims.reign.lease
                    if lease.grant is not None and lease.due_for_renewal():
                        self._stage = "lease"
                        lease.acquire()  # a long backlog: keep every lease renewed
                        self._stage = "claim"
                    if self._stop.is_set() or not self._claim_step(claims):
                        active.remove(claims)
        finally:
            for claims in passes:
                self._end_pass(claims)

    def _claim_step(self, claims: _Pass) -> bool:
        """Claim one batch of ``claims.reign`` (writing the outcomes the batch before left
        for it) and submit it; whether another batch should follow. With ``overlap`` and a
        submitter that may be called from other threads, a full batch is sent from a
        submission thread while this one records the outcomes of the batch before it and
        claims the next (the database round trips overlap the broker's); the outcomes of
        each batch are recorded in one call, in claim order, once it was sent. When another
        claim follows at once, that claim writes them (``claim_due(record=...)``): one
        transaction fewer, and the store may overlap the write with the claim's own work."""
        reign, tally = claims.reign, claims.tally
        limit = self.settings.batch_size
        if not reign.held():
            return False
        grant = claims.grant = reign.grant
        if not claims.started:
            claims.started = True
            claims.target = self._claim_target(reign)
        # A claim that fails writes nothing: what it was given stays for _end_pass.
        result = self._claim(grant, limit, claims.target, record=claims.unrecorded)
        claims.unrecorded = []
        if result.refused:
            tally.refused = True
            log_event(
                "claim.refused",
                level=logging.WARNING,
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                lease=reign.name,
            )
            self._drop(reign)
            return False
        self._log_claim(result, grant, tally)
        if result.deferred:
            # Held in the store until their jittered instants: wake for the first.
            reign.retries_possible = True
        occurrences = self._screen(result.occurrences, grant, tally)
        self._watch.claimed(occurrences, grant.token)
        more = max(result.schedules_seen, len(occurrences)) >= limit and not self._stop.is_set()
        if not (occurrences and more and claims.overlap and self.submission.threaded):
            while claims.in_flight:
                self._record_sent(claims, claims.in_flight.popleft())
            if occurrences:
                claims.unrecorded = self._submit_batch(
                    reign, occurrences, grant, tally, pending=False, defer=more and claims.overlap
                )
            return more
        sending = self.submission.send_in_background(occurrences, reign.lease)
        claims.in_flight.append((occurrences, sending))
        if len(claims.in_flight) > self.submission.queue_depth:
            # Taken back while the later batches go out (the thread sends in claim order);
            # the next claim writes its outcomes.
            claims.unrecorded = self._record_sent(claims, claims.in_flight.popleft(), defer=True)
        return True

    def _end_pass(self, claims: _Pass) -> None:
        """Even when a claim failed (its transaction wrote nothing): what was sent must be
        recorded, in claim order."""
        if claims.unrecorded:
            unrecorded, claims.unrecorded = claims.unrecorded, []
            self.store.record_outcomes(unrecorded)
        while claims.in_flight:
            self._record_sent(claims, claims.in_flight.popleft())

    def _record_sent(
        self,
        claims: _Pass,
        batch: tuple[Sequence[Occurrence], Future[list[Sent | None]]],
        *,
        defer: bool = False,
    ) -> list[SubmitOutcome]:
        occurrences, sending = batch
        assert claims.grant is not None
        return self._submit_batch(
            claims.reign,
            occurrences,
            claims.grant,
            claims.tally,
            pending=False,
            sent=sending.result(),
            defer=defer,
        )

    def _screen(
        self, occurrences: Sequence[Occurrence], grant: LeaseGrant, tally: Tally
    ) -> Sequence[Occurrence]:
        """``occurrences`` whose task is allowed (see :meth:`Upkeep.screen`)."""
        kept, refused = self.upkeep.screen(occurrences, grant)
        tally.refused_schedules += refused
        return kept

    def _claim(
        self,
        grant: LeaseGrant,
        limit: int,
        target: datetime | None,
        *,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        if target is not None and self._store_time.now() >= target:
            # The instant chosen to claim ahead has come while the pass went on (a batch sent
            # to a slow broker): claim what is due now, that instant included, so a claim never
            # judges due-ness at a moment already past.
            target = None
        # ``record`` only when there is something to write: a store written before that
        # parameter never gets any (see _claims_record).
        extra = {"record": record} if record else {}
        return self.store.claim_due(
            grant, scheduler_id=self.scheduler_id, limit=limit, now=target, **extra
        )

    def _claim_target(self, reign: Reign) -> datetime | None:
        """The instant to claim at when ``reign``'s next one is less than ``claim_ahead`` away
        by the store's clock; None to claim what is due now."""
        ahead = self.settings.claim_ahead
        if not ahead:
            return None
        nxt = reign.next_due_at()
        reign.due_read = (nxt,)
        if nxt is None:
            return None
        now = self._store_time.reference()
        return nxt if now < nxt <= now + ahead else None

    def _log_claim(self, result: ClaimResult, grant: LeaseGrant, tally: Tally) -> None:
        # Occurrences left waiting for their jittered instant are claimed too.
        tally.claimed += len(result.occurrences) + result.deferred
        tally.skipped += sum(result.skipped.values()) + result.buffered
        tally.missed += result.missed
        tally.conflicts += result.conflicts
        self.upkeep.log_claim(result, grant)

    # -- submission -----------------------------------------------------------------------------

    def _submit_batch(
        self,
        reign: Reign,
        occurrences: Sequence[Occurrence],
        grant: LeaseGrant,
        tally: Tally,
        *,
        pending: bool,
        sent: list[Sent | None] | None = None,
        defer: bool = False,
    ) -> list[SubmitOutcome]:
        """Submit (or take the results of ``sent``) under ``reign``'s lease and record; with
        ``defer`` (and a store whose claims take ``record``) the outcomes are returned for the
        next claim instead."""
        counts: BatchCounts = self.submission.submit(
            occurrences,
            grant,
            reign.lease,
            pending=pending,
            sent=sent,
            defer=defer and self._claims_record,
        )
        if counts.retrying:
            reign.retries_possible = True
        if self.upkeep.backend_answered(counts):
            # The backend is back and the retries go now, whichever shard they belong to.
            for each in self.reigns:
                each.retries_possible = True
        tally.add(counts)
        return counts.unrecorded

    # -- sleeping -------------------------------------------------------------------------------

    def _leader_sleep(self, reign: Reign, tally: Tally) -> float:
        max_sleep = self.settings.max_sleep.total_seconds()
        candidates = [max_sleep]
        if reign.lease.grant is None or not reign.held():
            candidates.append(0.0)  # refused, or past the local deadline: renew right away
        else:
            candidates.append(reign.lease.seconds_until_renewal())
        # The read made before claiming still holds when the claim moved no schedule (an edit
        # since then NOTIFYs, which ends the sleep).
        moved = tally.claimed or tally.missed or tally.conflicts or tally.skipped
        nxt = reign.due_read[0] if reign.due_read and not moved else reign.next_due_at()
        if nxt is not None:
            # Due-ness is judged by the store's clock, so the distance is too; wake early
            # enough to claim ahead of the instant.
            until = nxt - self._store_time.now() - self.settings.claim_ahead
            candidates.append(until.total_seconds())
        if reign.retries_possible:
            retry_at = reign.next_retry_at()
            if retry_at is None:
                reign.retries_possible = False
            else:
                candidates.append((retry_at - self._store_time.now()).total_seconds())
        sleep = max(0.0, min(candidates))
        if sleep < MIN_IDLE_SLEEP and not (tally.claimed or tally.submitted or tally.failed):
            sleep = MIN_IDLE_SLEEP
        return sleep

    # -- operations: heartbeat, misses, leader's checks, observers ------------------------------

    def _join(self) -> None:
        """The first heartbeat row, once the leases are taken and before anything is claimed:
        schedulers of another shard count leave a live member's ``claimed`` rows to it
        (``pending()``), and rows claimed before the member's first row would look like a
        dead leader's and be sent again (a rolling change of ``shards``)."""
        shards = None
        if self._balance is not None:
            shards = [i for i, reign in enumerate(self.reigns) if reign.held()]
        tokens = [r.lease.grant.token for r in self.reigns if r.lease.grant and r.held()]
        self.upkeep.join(
            bool(tokens), tokens[0] if tokens else None, lease=self.lease.name, shards=shards
        )

    def _after_iteration(self, result: IterationResult, duration: float) -> None:
        """What an iteration leaves for the operators; none of it may stop dispatch."""
        shards = None
        if self._balance is not None:
            shards = [i for i, reign in enumerate(self.reigns) if reign.held()]
        self.upkeep.heartbeat(
            result.leader, result.fencing_token, lease=self.lease.name, shards=shards
        )
        self.upkeep.record_misses()
        # With shards, the holder of shard 0 alone looks for failing and overdue schedules
        # (every schedule), so an alert is raised once, not once per replica.
        if result.leader and (self._balance is None or self.reigns[0].held()):
            self.upkeep.leading()
        else:
            self.upkeep.not_leading()
        self.upkeep.iteration_ended(result, duration)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("goatbeat")
    except metadata.PackageNotFoundError:
        return ""


def _safe_info(store: ScheduleStore) -> Any:
    try:
        return store.info()
    except Exception:  # a log line's description must not stop the start
        return type(store).__name__
