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

Refusal. A scheduler built with an allow-list (:class:`~goatbeat.core.allowlist.TaskAllowList`;
``Beat.scheduler()`` always gives one) checks the task of every occurrence before anything is
sent. An occurrence of a stored schedule whose task is outside it (an admin row, an import, a
row written with SQL) is refused through the store (``refuse``: the claimed executions
``submit_failed`` with the reason, ``last_status='refused'``, and a schedule not declared in
code taken out of scheduling), ``schedule.refused`` is logged once per schedule and process,
and nothing of it reaches the backend.

Reigns. Every lease the scheduler may hold is a :class:`~goatbeat.core.reign.Reign` (its lease,
shard, fencing token, due read and retry flag), and each step above is given the reign it works
for: there is no "current" lease. A single lease is one reign; with shards (``shards`` > 1,
PostgreSQL; docs/scaling.md) there is one per shard and each iteration first balances them
(:class:`~goatbeat.core.reign.ShardBalance`: renew those held, release extras to a member short
of its fair share, take free ones up to this scheduler's share, or any shard left free for a
renewal interval), then does steps 3-5 for each reign held: pending rows, claims, the sleep (the
earliest of every reign's, at most a renewal interval, so the heartbeat that makes this
scheduler a member is written in time). A graceful stop removes the heartbeat row, then
releases every lease; a store error or a bug in the loop drops every lease held.

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
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Protocol, cast

from goatbeat.core.alerts import Alert, Alerter
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.bounded import bound_calls, io_timeout
from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import MAX_CLAIM_AHEAD, Settings
from goatbeat.core.dbwatch import DatabaseWatch
from goatbeat.core.errors import InvalidValue, StoreError, short_repr
from goatbeat.core.instance import new_instance, split_instance
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import (
    ClaimResult,
    ExecutionKind,
    LeaseGrant,
    Occurrence,
    SubmitOutcome,
)
from goatbeat.core.observability import log_event, logger
from goatbeat.core.reign import MIN_IDLE_SLEEP, Reign, ShardBalance
from goatbeat.core.shards import Shard
from goatbeat.core.store import ScheduleStore, ShardedStore
from goatbeat.core.submission import (
    BatchCounts,
    Sent,
    Submission,
    lateness,
    occurrence_fields,
    store_skew,
)
from goatbeat.core.submit import TaskSubmitter
from goatbeat.core.upkeep import ALERT_CHECK_INTERVAL, LOST_CHECK_INTERVAL, Upkeep

__all__ = [
    "Scheduler",
    "IterationResult",
    "SchedulerObserver",
    "ALERT_CHECK_INTERVAL",
    "LOST_CHECK_INTERVAL",
    "MIN_IDLE_SLEEP",
]

ERROR_BACKOFF_BASE = 0.5
ERROR_BACKOFF_CAP = 30.0
_REQUESTED = frozenset({ExecutionKind.MANUAL, ExecutionKind.BACKFILL})
"""Kinds of the executions that arrive unclaimed, on request."""
STOP_POLL = 0.2
"""Longest single wait, so a stop request (signal or another thread) is seen promptly."""


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
    """Failed submissions marked ``submit_failed`` (missed ones included)."""
    missed: int = 0
    """Occurrences dropped by misfire policies, and those whose grace ran out while their
    submission was being retried."""
    conflicts: int = 0
    skipped: int = 0
    """Occurrences the overlap policy recorded as skipped, or buffered."""
    refused: bool = False
    """The claim was refused: this scheduler's lease (fencing token) is no longer current."""
    refused_schedules: int = 0
    """Stored schedules refused for the first time (by this scheduler) because their task is
    not allowed."""
    error: str | None = None
    sleep: float = 0.0


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


class SchedulerObserver(Protocol):
    """What a scheduler tells an observer (the Prometheus adapter, ``goatbeat.metrics``).

    Called on the scheduler's threads, so it must be quick; an exception is logged and
    ignored, never the loop's problem."""

    def iteration(self, result: IterationResult, duration: float) -> None:
        """One iteration ended after ``duration`` seconds (monotonic)."""
        ...

    def submitted(self, lateness: float) -> None:
        """An occurrence was accepted by the backend ``lateness`` seconds after its instant
        (by the store's clock; negative: early, which never happens)."""
        ...


class _Tally:
    __slots__ = (
        "claimed",
        "submitted",
        "resubmitted",
        "retrying",
        "failed",
        "missed",
        "conflicts",
        "skipped",
        "refused_schedules",
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
        self.skipped = 0
        self.refused_schedules = 0
        self.refused = False

    def add(self, batch: BatchCounts) -> None:
        self.submitted += batch.submitted
        self.resubmitted += batch.resubmitted
        self.retrying += batch.retrying
        self.failed += batch.failed
        self.missed += batch.missed

    def merge(self, other: _Tally) -> None:
        for name in self.__slots__:
            if name == "refused":
                self.refused = self.refused or other.refused
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def result(self, **fields: Any) -> IterationResult:
        """The iteration's result: these counts plus ``fields`` (leader, sleep, ...)."""
        counts = {name: getattr(self, name) for name in self.__slots__ if name != "refused"}
        return IterationResult(**counts, **fields)


@dataclass(slots=True, eq=False)
class _Pass:
    """One reign's claims in one iteration (see :meth:`Scheduler._claim_step`)."""

    reign: Reign
    tally: _Tally
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
        self._refusals_logged: set[tuple[int, str]] = set()
        self.submitter = submitter
        self.settings = settings
        self.clock = clock or SystemClock()
        self.scheduler_id = settings.scheduler_id
        """The name in logs, executions and status (several processes may share it)."""
        self.instance = new_instance(settings.scheduler_id)
        """This process: what holds the lease, its fencing token and the heartbeat row."""
        self.lease_name = lease_name
        """The single lease's name (with shards, each shard's lease has its own)."""
        # One reign per lease this scheduler may hold (docs/scaling.md for shards).
        self._balance: ShardBalance | None = None
        if settings.shards > 1:
            if not getattr(store, "supports_shards", False):
                kind = type(store).__name__
                raise InvalidValue(
                    "shards",
                    settings.shards,
                    f"{settings.shards} needs PostgreSQL: {kind} runs a single shard "
                    "(one process); set shards to 1",
                )
            sharded = cast(ShardedStore, store)
            shards = [Shard(index=i, count=settings.shards) for i in range(settings.shards)]
            self.reigns = [
                Reign(self._lease(shard.lease), store, shard=shard, sharded=sharded)
                for shard in shards
            ]
            self._balance = ShardBalance(
                sharded,
                self.reigns,
                instance=self.instance,
                scheduler_id=self.scheduler_id,
                lease_ttl=settings.lease_ttl,
                renew_interval=settings.lease_renew_interval,
                clock=self.clock,
            )
        else:
            self.reigns = [Reign(self._lease(lease_name), store)]
        self._stop = threading.Event()
        self._standby_logged = False
        self._standby_iterations = 0
        # (local monotonic, store clock) read together: when a claimed occurrence is due here.
        self._store_ref: tuple[float, datetime] | None = None
        self._error_streak = 0
        self._stage = "lease"  # what the iteration is doing, for its error's log record
        self._watch = DatabaseWatch(
            store,
            clock=self.clock,
            scheduler_id=self.scheduler_id,
            every=settings.lease_renew_interval,
        )
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
            wait_for_instant=self._wait_for_instant,
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
        self._observers: list[SchedulerObserver] = []

    def _lease(self, name: str) -> LeaseManager:
        return LeaseManager(
            self.store,
            holder=self.instance,
            ttl=self.settings.lease_ttl,
            renew_interval=self.settings.lease_renew_interval,
            name=name,
            clock=self.clock,
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
        self._observers.append(observer)
        self.submission.on_submitted = self._on_submitted

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
        self._store_ref = None  # each iteration maps the store's clock afresh
        for reign in self.reigns:
            reign.due_read = None
        tallies = {reign: _Tally() for reign in self.reigns}
        total = _Tally()
        became_leader = False
        grant: LeaseGrant | None = None
        sleeps: list[float] = []
        self._stage = "lease"
        try:
            if self._balance is None:
                single = self.reigns[0]
                became_leader = self._renew(single)
                if not single.held():
                    self._error_streak = 0
                    return IterationResult(leader=False, sleep=self._standby_sleep())
                grant = single.grant
            else:
                self._watch.watch()
                became_leader, standby_sleep = self._balance.balance()
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

    def _renew(self, reign: Reign) -> bool:
        """Acquire or renew the single lease when due; whether this scheduler became leader."""
        # Past the local deadline we renew at once rather than wait for the renewal slot.
        if not (reign.lease.due_for_renewal() or not reign.held()):
            return False
        self._watch.watch()
        grant = reign.lease.acquire()
        if grant is None:
            self._on_standby(reign)
            return False
        if reign.took(grant):
            self._standby_logged = False
            self._standby_iterations = 0
            return True
        log_event(
            "lease.renewed",
            level=logging.DEBUG,
            scheduler_id=self.scheduler_id,
            fencing_token=grant.token,
            lease=reign.name,
        )
        return False

    def _drop(self, reign: Reign) -> None:
        reign.drop()
        # After a store error the connection may lead to another server (a promoted standby):
        # look at the database's identity before anything is claimed there.
        self._watch.look_again()

    def _drop_every_lease(self) -> None:
        for reign in self.reigns:
            self._drop(reign)

    def _on_standby(self, reign: Reign) -> None:
        reign.token = None
        self._standby_iterations += 1
        if self._standby_logged:
            # A heartbeat: at DEBUG an operator sees the standby is alive and still trying.
            log_event(
                "lease.standby",
                level=logging.DEBUG,
                scheduler_id=self.scheduler_id,
                lease=reign.name,
                heartbeat=True,
                iterations=self._standby_iterations,
            )
            return
        self._standby_logged = True
        holder: str | None = None
        try:
            current = self.store.read_lease(reign.name)
        except StoreError:
            current = None
        if current is not None:
            holder = current[0]
        log_event(
            "lease.standby",
            scheduler_id=self.scheduler_id,
            instance=self.instance,
            lease=reign.name,
            holder=None if holder is None else split_instance(holder)[0],
            holder_instance=holder,
        )

    # -- pending rows: resubmissions, retries, manual runs --------------------------------------

    def _submit_pending(self, reign: Reign, tally: _Tally) -> None:
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
            if self._store_ref is None:
                # Another scheduler may have claimed some ahead of their instant.
                self._store_reference()
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

    def _claim_all(self, tallies: dict[Reign, _Tally]) -> None:
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
        self, occurrences: Sequence[Occurrence], grant: LeaseGrant, tally: _Tally
    ) -> Sequence[Occurrence]:
        """``occurrences`` whose task is allowed; the schedules of the others are refused by
        the store (once each), so nothing of theirs is ever submitted."""
        allow = self.allowed
        if allow is None or all(allow.allows(occ.task) for occ in occurrences):
            return occurrences
        kept: list[Occurrence] = []
        refused: dict[int, Occurrence] = {}
        for occ in occurrences:
            if allow.allows(occ.task):
                kept.append(occ)
            else:
                refused.setdefault(occ.schedule_id, occ)
        for occ in refused.values():
            reason = f"refused: {allow.reason(occ.task)}"
            if not self.store.refuse(occ.schedule_id, occ.task, reason=reason):
                # An edit named another task meanwhile (its claimed rows go out with it on the
                # next pass), or the schedule is gone (its rows ended with it).
                continue
            if (occ.schedule_id, occ.task) in self._refusals_logged:
                continue
            self._refusals_logged.add((occ.schedule_id, occ.task))
            tally.refused_schedules += 1
            if self.alerter is not None:
                self.alerter.emit_all(
                    [
                        Alert.refused(
                            occ.schedule_name,
                            reason,
                            at=self.clock.now(),
                            scheduler_id=self.scheduler_id,
                        )
                    ]
                )
            log_event(
                "schedule.refused",
                level=logging.ERROR,
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                schedule=occ.schedule_name,
                task=short_repr(occ.task),
                error=reason,
            )
        return kept

    def _claim(
        self,
        grant: LeaseGrant,
        limit: int,
        target: datetime | None,
        *,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        if target is not None and self._store_now() >= target:
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

    def _log_claim(self, result: ClaimResult, grant: LeaseGrant, tally: _Tally) -> None:
        occurrences = result.occurrences
        # Occurrences left waiting for their jittered instant are claimed too.
        tally.claimed += len(occurrences) + result.deferred
        tally.skipped += sum(result.skipped.values()) + result.buffered
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
        self.upkeep.misses.extend(result.misses)
        if result.missed:
            tally.missed += result.missed
            log_event(
                "occurrence.missed",
                level=logging.WARNING,
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                missed=result.missed,
                # The schedules that missed something, not every one the batch claimed.
                schedules=sorted({m.schedule_name for m in result.misses if m.count}) or None,
            )
        for name, count in result.skipped.items():
            # The overlap policy: the previous run of the schedule is still running.
            log_event(
                "occurrence.skipped",
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                schedule=name,
                skipped=count,
                reason="overlap",
            )
        if result.buffered:
            log_event(
                "occurrence.buffered",
                scheduler_id=self.scheduler_id,
                fencing_token=grant.token,
                buffered=result.buffered,
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
            skew = store_skew(self.store, self.clock)
            for occ in occurrences:
                log_event(
                    "occurrence.claimed",
                    level=logging.DEBUG,
                    **occurrence_fields(occ, self.scheduler_id, grant),
                    lateness=lateness(self.clock.now() + skew, occ.due),
                )

    # -- submission -----------------------------------------------------------------------------

    def _submit_batch(
        self,
        reign: Reign,
        occurrences: Sequence[Occurrence],
        grant: LeaseGrant,
        tally: _Tally,
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

    def _leader_sleep(self, reign: Reign, tally: _Tally) -> float:
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
            until = nxt - self._store_now() - self.settings.claim_ahead
            candidates.append(until.total_seconds())
        if reign.retries_possible:
            retry_at = reign.next_retry_at()
            if retry_at is None:
                reign.retries_possible = False
            else:
                candidates.append((retry_at - self._store_now()).total_seconds())
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

    # -- operations: heartbeat, misses, leader's checks, observers ------------------------------

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
        for observer in self._observers:
            try:
                observer.iteration(result, duration)
            except Exception:
                logger.exception("scheduler.error", extra={"goatbeat": {"stage": "observer"}})

    def _on_submitted(self, lateness: float) -> None:
        for observer in self._observers:
            try:
                observer.submitted(lateness)
            except Exception:
                logger.exception("scheduler.error", extra={"goatbeat": {"stage": "observer"}})


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
