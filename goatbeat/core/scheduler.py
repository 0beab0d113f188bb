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
the scheduler's heartbeat row (:meth:`~goatbeat.core.store.ScheduleStore.heartbeat`, at most
once per ``lease_renew_interval`` and at once when its role changes), the record of the
occurrences its claims dropped, the alerts of :mod:`goatbeat.core.alerts` (leader only), and
each :class:`SchedulerObserver` (the Prometheus metrics). A graceful stop deletes the row.

Refusal. A scheduler built with an allow-list (:class:`~goatbeat.core.allowlist.TaskAllowList`;
``Beat.scheduler()`` always gives one) checks the task of every occurrence before anything is
sent. An occurrence of a stored schedule whose task is outside it (an admin row, an import, a
row written with SQL) is refused through the store (``refuse``: the claimed executions
``submit_failed`` with the reason, ``last_status='refused'``, and a schedule not declared in
code taken out of scheduling), ``schedule.refused`` is logged once per schedule and process,
and nothing of it reaches the backend.

Shards (``shards`` > 1, PostgreSQL; docs/scaling.md). One :class:`LeaseManager` per shard;
each iteration first balances them (:meth:`Scheduler._balance`: renew those held, release
extras to a member short of its fair share, take free ones up to this scheduler's share, or any
shard left free for a renewal interval), then does steps 3-5 for each shard held, ``self.lease``
pointing at that shard's manager: pending rows, claims (one batch per shard in turn when
several are held), the sleep (the earliest of every shard's, at most a renewal interval, so the
heartbeat that makes this scheduler a member is written in time). A graceful stop removes the
heartbeat row, then releases every lease.

Submission. Sending a batch (one by one, in ``submit_many`` chunks, from submission threads),
the retries with backoff after a failed submission, the bookkeeping of every outcome in one
store call and the per-occurrence log records are :mod:`goatbeat.core.submission`'s; this loop
hands it each batch, with its lease check and its store-clock mapping.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import signal
import socket
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Protocol, cast

from goatbeat.core.alerts import Alert, Alerter, AlertTracker
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.bounded import bound_calls, io_timeout
from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import MAX_CLAIM_AHEAD, Settings
from goatbeat.core.errors import GoatbeatError, InvalidValue, StoreError, short_repr
from goatbeat.core.health import Role, SchedulerBeat
from goatbeat.core.instance import new_instance, split_instance
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import (
    ClaimResult,
    ExecutionKind,
    LeaseGrant,
    Miss,
    Occurrence,
    SubmitOutcome,
)
from goatbeat.core.observability import log_event, logger
from goatbeat.core.shards import ALL, Shard, fair_share
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

__all__ = ["Scheduler", "IterationResult", "SchedulerObserver", "ALERT_CHECK_INTERVAL"]

ERROR_BACKOFF_BASE = 0.5
ERROR_BACKOFF_CAP = 30.0
RECENT_CLAIMS = 20_000
"""This process's latest claims kept in memory, to name those a promotion lost."""
LOST_KEYS_LOGGED = 1000
"""The lost claims' keys named in ``store.database_changed`` (all of them up to this many)."""
LOST_CHECK_SCHEDULES = 500
"""At most this many schedules are read back to find them (one query each, once)."""
MIN_IDLE_SLEEP = 0.01
"""Floor for the sleep of an iteration that did nothing, so a due row that cannot be claimed
(a lost compare-and-set, a renewal that keeps failing) never turns into a busy loop."""
_REQUESTED = frozenset({ExecutionKind.MANUAL, ExecutionKind.BACKFILL})
"""Kinds of the executions that arrive unclaimed, on request."""
STOP_POLL = 0.2
"""Longest single wait, so a stop request (signal or another thread) is seen promptly."""
ALERT_CHECK_INTERVAL = 30.0
"""How often (seconds, at least) the leader looks for failing and overdue schedules, when
alerts are configured."""
ALERT_SCAN_LIMIT = 1000
"""Schedules read per look (the overdue and the most failing first)."""
LOST_CHECK_INTERVAL = 5.0
"""How often (seconds, at least) the leader ends the runs no report will end (lost, expired:
:meth:`~goatbeat.core.store.ScheduleStore.end_lost_runs`)."""


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
        self.lease = LeaseManager(
            store,
            holder=self.instance,
            ttl=settings.lease_ttl,
            renew_interval=settings.lease_renew_interval,
            name=lease_name,
            clock=self.clock,
        )
        # Shards (docs/scaling.md): one LeaseManager per shard, ``self.lease`` the one whose
        # shard the iteration is working on. One shard keeps the single lease above.
        self._sharded: ShardedStore | None = None
        self._shard: Shard = ALL
        self._shard_leases: dict[int, LeaseManager] = {}
        self._shard_tokens: dict[int, int] = {}
        self._shard_free_since: dict[int, float] = {}
        self._shard_view: tuple[tuple[int, ...], int, int] | None = None
        if settings.shards > 1:
            if not getattr(store, "supports_shards", False):
                kind = type(store).__name__
                raise InvalidValue(
                    "shards",
                    settings.shards,
                    f"{settings.shards} needs PostgreSQL: {kind} runs a single shard "
                    "(one process); set shards to 1",
                )
            self._sharded = cast(ShardedStore, store)
            for index in range(settings.shards):
                shard = Shard(index=index, count=settings.shards)
                self._shard_leases[index] = LeaseManager(
                    store,
                    holder=self.instance,
                    ttl=settings.lease_ttl,
                    renew_interval=settings.lease_renew_interval,
                    name=shard.lease,
                    clock=self.clock,
                )
        self._stop = threading.Event()
        self._leader_token: int | None = None
        self._standby_logged = False
        self._standby_iterations = 0
        # (local monotonic, store clock) read together: when a claimed occurrence is due here.
        self._store_ref: tuple[float, datetime] | None = None
        # This iteration's read of next_due_at(), once made (a 1-tuple: None is an answer).
        self._due_read: tuple[datetime | None] | None = None
        self._error_streak = 0
        # The database's (system identifier, timeline), as last seen, and when (see
        # _watch_database); this process's recent claims, to say what a promotion lost.
        self._identity: tuple[str, int] | None = None
        self._identity_seen_at: datetime | None = None
        self._identity_checked_at: float | None = None
        self._recent_claims: deque[tuple[str, str, datetime, int]] = deque(maxlen=RECENT_CLAIMS)
        # Whether a claimed row may be backing off, so the sleep must ask for the next retry.
        self._retries_possible = True
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
            lease_held=self._lease_held,
            wait_for_instant=self._wait_for_instant,
        )
        # Operations (see the module docstring).
        self.alerter = alerter
        self._alerts = AlertTracker(after_failures=settings.alert_after_failures)
        self._alert_check_at: float | None = None
        self._lost_check_at: float | None = None
        self._readmitted = False  # refused schedules looked at, once per process
        self._backend_failing = False  # the last submissions were retryable failures
        self._observers: list[SchedulerObserver] = []
        self._misses: list[Miss] = []
        self._beat: tuple[Role, int | None] | None = None
        self._beat_at: float | None = None
        self._hostname = socket.gethostname()
        self.version = _version()

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
        self._leader_token = None
        if self._sharded is not None:
            return self._release_shards()
        try:
            released = self.lease.release()
        except StoreError as exc:
            # The lease then expires on its own within lease_ttl.
            self._log_store_error("release", exc)
            released = False
        if self._beat is not None:
            self._beat = None
            self._best_effort("heartbeat", self.store.remove_scheduler, self.instance)
        return released

    def _release_shards(self) -> bool:
        # The heartbeat row goes first: the schedulers the releases wake up then count one
        # member less and take this one's shards at once.
        if self._beat is not None:
            self._beat = None
            self._best_effort("heartbeat", self.store.remove_scheduler, self.instance)
        released = False
        for lease in self._shard_leases.values():
            if lease.grant is None:
                continue
            try:
                released = lease.release() or released
            except StoreError as exc:
                self._log_store_error("release", exc, lease=lease.name)
        self._shard_tokens.clear()
        return released

    def _lease_held(self) -> bool:
        return self.lease.is_held()

    # -- the store, read for the shard being worked on -------------------------------------------

    def _pending(self, limit: int) -> list[Occurrence]:
        if self._sharded is None:
            return self.store.pending(limit=limit)
        return self._sharded.pending(limit=limit, shard=self._shard)

    def _next_due_at(self) -> datetime | None:
        if self._sharded is None:
            return self.store.next_due_at()
        return self._sharded.next_due_at(shard=self._shard)

    def _next_retry_at(self) -> datetime | None:
        if self._sharded is None:
            return self.store.next_retry_at()
        return self._sharded.next_retry_at(shard=self._shard)

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

    def bound_calls(self) -> float:
        """Bound every call this loop makes to a server it does not control (the database,
        the broker, their DNS lookups) at :func:`~goatbeat.core.bounded.io_timeout` of the
        lease, below its local deadline (docs/failover.md, "Bounded waits"). :meth:`run`
        calls it once the start-up publication is done (which may legitimately take longer);
        returns the bound."""
        seconds = self.io_timeout
        bound_calls(self.store, seconds)
        bound_calls(self.submitter, seconds)
        self.submission.bound_calls(seconds, self._lease_remaining)
        return seconds

    def _lease_remaining(self) -> float:
        return self.lease.remaining()

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

    def _iterate(self) -> IterationResult:
        if self._sharded is not None:
            return self._iterate_shards(self._sharded)
        tally = _Tally()
        became_leader = False
        self._store_ref = None  # each iteration maps the store's clock afresh
        self._due_read = None
        stage = "lease"
        try:
            # Past the local deadline we renew at once rather than wait for the renewal slot.
            if self.lease.due_for_renewal() or not self.lease.is_held():
                self._watch_database()
                grant = self.lease.acquire()
                if grant is None:
                    self._on_standby()
                elif grant.token != self._leader_token:
                    became_leader = True
                    self._leader_token = grant.token
                    self._standby_logged = False
                    self._standby_iterations = 0
                    # Rows another reign left backing off: wake for their retries.
                    self._retries_possible = True
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
            self._submit_pending(grant, tally)
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
        # After a store error the connection may lead to another server (a promoted standby):
        # look at the database's identity before anything is claimed there.
        self._identity_checked_at = None

    # -- the database itself: a promotion, a restore ---------------------------------------------

    def _watch_database(self) -> None:
        """Compare the database's identity (system identifier, timeline: the store's optional
        ``database_identity()``) with the last one seen, once per renewal interval. A change
        means a standby was promoted (new timeline) or another database is behind the URL (a
        restore): what the old primary committed and had not shipped is gone, claims
        included, and those occurrences are claimed and sent again (docs/failover.md,
        "When PostgreSQL itself fails over"). Said loudly: :meth:`_database_changed`."""
        identify = getattr(self.store, "database_identity", None)
        if not callable(identify):
            return
        now = self.clock.monotonic()
        every = self.settings.lease_renew_interval.total_seconds()
        if self._identity_checked_at is not None and now - self._identity_checked_at < every:
            return
        identity = identify()
        self._identity_checked_at = now
        if identity is None:
            return
        previous, self._identity = self._identity, identity
        if previous is not None and previous != identity:
            self._database_changed(previous, identity)
        self._identity_seen_at = self.clock.now()

    def _database_changed(self, previous: tuple[str, int], identity: tuple[str, int]) -> None:
        """ERROR ``store.database_changed``: what changed, since when the old database was
        last seen, and the window of this process's own claims the new one does not have
        (they will be claimed and sent again)."""
        lost = self._lost_claims()
        fields: dict[str, Any] = {}
        if lost:
            fields = {
                "lost_claims": len(lost),
                "may_repeat_from": min(at for _, at in lost),
                "may_repeat_to": max(at for _, at in lost),
                "lost_keys": [key for key, _ in lost[:LOST_KEYS_LOGGED]],
            }
        same_cluster = previous[0] == identity[0]
        log_event(
            "store.database_changed",
            level=logging.ERROR,
            scheduler_id=self.scheduler_id,
            reason="promotion: the database is on a new timeline"
            if same_cluster
            else "another database: its system identifier changed (a restore, a new cluster)",
            previous_system_identifier=previous[0],
            system_identifier=identity[0],
            previous_timeline=previous[1],
            timeline=identity[1],
            old_database_last_seen=self._identity_seen_at,
            claimed_by_this_process_and_lost=len(lost),
            **fields,
            detail=(
                "what the old primary committed and had not replicated is gone: occurrences "
                "claimed there are claimed and sent again (their keys repeat). This process's "
                "lost claims are listed; other schedulers' claims since old_database_last_seen "
                "may repeat too. A synchronous standby prevents it (docs/failover.md)"
            ),
        )

    def _lost_claims(self) -> list[tuple[str, datetime]]:
        """(key, scheduled_at) of this process's recent claims the database no longer has as
        this process claimed them: gone, or claimed again since (another fencing token)."""
        by_name: dict[str, list[tuple[str, datetime, int]]] = {}
        for name, key, at, token in self._recent_claims:
            by_name.setdefault(name, []).append((key, at, token))
        lost: list[tuple[str, datetime]] = []
        for name, claims in list(by_name.items())[:LOST_CHECK_SCHEDULES]:
            try:
                found = self.store.executions(name=name, limit=len(claims) + 500)
            except StoreError:
                continue
            kept = {(e.idempotency_key, e.fencing_token, e.scheduler_id) for e in found}
            lost.extend(
                (key, at)
                for key, at, token in claims
                if (key, token, self.scheduler_id) not in kept
            )
        return sorted(lost, key=lambda c: c[1])

    # -- shards ---------------------------------------------------------------------------------

    def _live_window(self) -> timedelta:
        """A scheduler whose heartbeat is older than this no longer counts as a member. Sharded
        schedulers beat at least once per ``lease_renew_interval``; a crashed one drops out
        before its leases expire (``lease_ttl`` after its last renewal), so the survivors'
        shares already include its shards when they come free."""
        renew = self.settings.lease_renew_interval
        return max(renew * 1.5, self.settings.lease_ttl - renew)

    def _iterate_shards(self, store: ShardedStore) -> IterationResult:
        """One iteration with shards: balance the leases (renew those held, release extras,
        take free ones up to this scheduler's fair share), then what :meth:`_iterate` does for
        the single lease, for each shard held: its pending rows, its claims (one batch per
        shard in turn when several are held), the sleep (the earliest of every shard's)."""
        total = _Tally()
        became_leader = False
        self._store_ref = None
        stage = "lease"
        sleeps: list[float] = [self.settings.lease_renew_interval.total_seconds()]
        try:
            self._watch_database()
            became_leader, standby_sleep = self._balance(store)
            sleeps.append(standby_sleep)
            tallies: dict[int, _Tally] = {}
            due_reads: dict[int, tuple[datetime | None] | None] = {}
            stage = "pending"
            for index in self._held_shards():
                tallies[index] = _Tally()
                self._work_on(index)
                self._submit_pending(self._grant(), tallies[index])
            stage = "claim"
            held = self._held_shards()
            if len(held) == 1:
                self._work_on(held[0])
                self._claim_and_submit(self._grant(), tallies[held[0]])
                due_reads[held[0]] = self._due_read
            else:
                # One batch per shard in turn: the due index holds every shard's rows, so
                # draining one shard first would walk past the others' due rows again and
                # again (a backlog would cost its square); in turn, each walk skips about one
                # batch per shard.
                targets: dict[int, datetime | None] = {}
                active = list(held)
                while active and not self._stop.is_set():
                    for index in list(active):
                        lease = self._shard_leases[index]
                        if lease.grant is not None and lease.due_for_renewal():
                            stage = "lease"
                            lease.acquire()  # a long backlog: keep every lease renewed
                            stage = "claim"
                        if not lease.is_held() or self._stop.is_set():
                            active.remove(index)
                            continue
                        self._work_on(index)
                        if index not in targets:
                            targets[index] = self._claim_target()
                            due_reads[index] = self._due_read
                        tally = tallies.setdefault(index, _Tally())
                        if not self._claim_one(self._grant(), tally, targets[index]):
                            active.remove(index)
            stage = "sleep"
            for index in self._held_shards():
                self._work_on(index)
                self._due_read = due_reads.get(index)
                tally = tallies.setdefault(index, _Tally())
                sleeps.append(self._leader_sleep(tally))
            for tally in tallies.values():
                total.merge(tally)
        except StoreError as exc:
            self._error_streak += 1
            backoff = min(
                ERROR_BACKOFF_CAP,
                self.settings.max_sleep.total_seconds(),
                ERROR_BACKOFF_BASE * 2 ** (self._error_streak - 1),
            )
            self._log_store_error(stage, exc, level=logging.ERROR, retry_in=backoff)
            # We cannot know whether a renewal or a claim landed: stop trusting every lease.
            for lease in self._shard_leases.values():
                lease.drop()
            self._shard_tokens.clear()
            self._identity_checked_at = None  # as _drop_lease
            return total.result(
                leader=False, became_leader=became_leader, error=str(exc), sleep=backoff
            )
        self._error_streak = 0
        tokens = [
            lease.grant.token
            for lease in self._shard_leases.values()
            if lease.grant is not None and lease.is_held()
        ]
        sleep = max(0.0, min(sleeps))
        if sleep < MIN_IDLE_SLEEP and not (total.claimed or total.submitted or total.failed):
            sleep = MIN_IDLE_SLEEP
        return total.result(
            leader=bool(tokens),
            fencing_token=tokens[0] if tokens else None,
            became_leader=became_leader,
            refused=total.refused,
            sleep=sleep,
        )

    def _held_shards(self) -> list[int]:
        return [i for i, lease in self._shard_leases.items() if lease.is_held()]

    def _work_on(self, index: int) -> None:
        """Point the loop at shard ``index``: its lease, its reads."""
        self.lease = self._shard_leases[index]
        self._shard = Shard(index=index, count=self.settings.shards)
        self._due_read = None
        self._retries_possible = True

    def _grant(self) -> LeaseGrant:
        grant = self.lease.grant
        assert grant is not None
        return grant

    def _claim_one(self, grant: LeaseGrant, tally: _Tally, target: datetime | None) -> bool:
        """Claim one batch of the current shard and submit it; whether a full batch came."""
        limit = self.settings.batch_size
        if not self.lease.is_held():
            return False
        result = self._claim(grant, limit, target)
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
            return False
        self._log_claim(result, grant, tally)
        if result.deferred:
            self._retries_possible = True
        occurrences = self._screen(result.occurrences, grant, tally)
        self._recent_claims.extend(
            (o.schedule_name, o.idempotency_key, o.scheduled_at, grant.token) for o in occurrences
        )
        more = max(result.schedules_seen, len(occurrences)) >= limit and not self._stop.is_set()
        if occurrences:
            self._submit_batch(occurrences, grant, tally, pending=False)
        return more

    def _balance(self, store: ShardedStore) -> tuple[bool, float]:
        """Renew, release and acquire shard leases. Returns whether a shard was newly taken
        and how long to sleep at most for the shards not held (until one may come free)."""
        count = self.settings.shards
        me = self.instance
        renew = self.settings.lease_renew_interval.total_seconds()
        live = store.live_schedulers(self._live_window(), shards=count)
        if me not in live:
            live = sorted([*live, me])
        target = fair_share(count, live, me)
        rows = store.read_leases([lease.name for lease in self._shard_leases.values()])
        now = store.now()
        mono = self.clock.monotonic()
        became = False
        # Renew what is ours first. A lease still ours in the store that this process stopped
        # trusting (a store error, a refused claim) is renewed at once, as the single lease is.
        for index, lease in self._shard_leases.items():
            row = rows.get(lease.name)
            ours = row is not None and row[0] == me and not row[3]
            if lease.grant is None and not ours:
                continue
            if lease.grant is None or lease.due_for_renewal() or not lease.is_held():
                grant = lease.acquire()
                if grant is None:
                    self._shard_tokens.pop(index, None)
                elif self._shard_tokens.get(index) != grant.token:
                    became = True
                    self._shard_tokens[index] = grant.token
                    self._retries_possible = True
        held = [i for i, lease in self._shard_leases.items() if lease.is_held()]
        # Who holds what (valid leases of live members), to see whether anybody is short.
        holdings: dict[str, int] = {m: 0 for m in live}
        free: list[int] = []
        for index, lease in self._shard_leases.items():
            row = rows.get(lease.name)
            if index in held:
                holdings[me] = holdings.get(me, 0) + 1
                self._shard_free_since.pop(index, None)
            elif row is None or row[3]:
                free.append(index)
                self._shard_free_since.setdefault(index, mono)
            else:
                self._shard_free_since.pop(index, None)
                if row[0] in holdings:
                    holdings[row[0]] += 1
        short = any(holdings[m] < fair_share(count, live, m) for m in live if m != me)
        if len(held) > target and not free and short:
            # Hand the extras over: each release NOTIFYs, the member short of its share takes
            # it at once. The highest shards go, so the members agree on the rest.
            for index in sorted(held, reverse=True)[: len(held) - target]:
                self._shard_leases[index].release()
                self._shard_tokens.pop(index, None)
                held.remove(index)
        for index in free:
            lease = self._shard_leases[index]
            # A free shard nobody takes within a renewal interval (the members disagree about
            # who is alive) is taken anyway: a shard without a holder is worse than an uneven
            # split.
            stranded = mono - self._shard_free_since.get(index, mono) >= renew
            if len(held) >= target and not stranded:
                continue
            grant = lease.acquire()
            if grant is None:
                continue
            held.append(index)
            self._shard_free_since.pop(index, None)
            if self._shard_tokens.get(index) != grant.token:
                became = True
                self._shard_tokens[index] = grant.token
                self._retries_possible = True
        # Sleep until a shard this scheduler would take may come free: at its expiry when
        # short of the share, a renewal interval after it (the stranded rule) otherwise.
        until = [renew]
        for index, lease in self._shard_leases.items():
            if index in held:
                continue
            row = rows.get(lease.name)
            if row is None or row[3]:
                since = self._shard_free_since.get(index, mono)
                until.append(max(MIN_IDLE_SLEEP, since + renew - mono))
                continue
            wait = (row[2] - now).total_seconds() + MIN_IDLE_SLEEP
            until.append(wait if len(held) < target else wait + renew)
        view = (tuple(sorted(held)), target, len(live))
        if view != self._shard_view:
            self._shard_view = view
            log_event(
                "lease.shards",
                scheduler_id=self.scheduler_id,
                instance=me,
                shards=count,
                held=list(view[0]),
                target=target,
                live=len(live),
            )
        return became, max(MIN_IDLE_SLEEP, min(until))

    def _on_standby(self) -> None:
        self._leader_token = None
        self._standby_iterations += 1
        if self._standby_logged:
            # A heartbeat: at DEBUG an operator sees the standby is alive and still trying.
            log_event(
                "lease.standby",
                level=logging.DEBUG,
                scheduler_id=self.scheduler_id,
                lease=self.lease.name,
                heartbeat=True,
                iterations=self._standby_iterations,
            )
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
            "lease.standby",
            scheduler_id=self.scheduler_id,
            instance=self.instance,
            lease=self.lease.name,
            holder=None if holder is None else split_instance(holder)[0],
            holder_instance=holder,
        )

    # -- pending rows: resubmissions, retries, manual runs --------------------------------------

    def _submit_pending(self, grant: LeaseGrant, tally: _Tally) -> None:
        """Submit ``claimed`` rows page by page while pages come back full. Rows backing off
        from a failed submission are left out by the store (their ``retry_at``), so every
        page is ready however many wait, and this always ends: a row leaves the next page by
        being submitted, by failing for good, or by failing again (it then backs off)."""
        limit = self.settings.batch_size
        while self.lease.is_held() and not self._stop.is_set():
            rows = self._pending(limit)
            if not rows:
                return
            if self._store_ref is None:
                # Another scheduler may have claimed some ahead of their instant.
                self._store_reference()
            page = len(rows)
            rows = self._claim_manual_runs(rows, grant)
            allowed = self._screen(rows, grant, tally)
            if allowed:
                self._submit_batch(allowed, grant, tally, pending=True)
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

    def _claim_and_submit(self, grant: LeaseGrant, tally: _Tally) -> None:
        """Claim batch after batch while they come back full. With a submitter that may be
        called from other threads, a full batch is sent from a submission thread while this
        one records the outcomes of the batch before it and claims the next (the database
        round trips overlap the broker's); the outcomes of each batch are recorded in one
        call, in claim order, once it was sent. When another claim follows at once, that
        claim writes them (``claim_due(record=...)``): one transaction fewer, and the store
        may overlap the write with the claim's own work."""
        limit = self.settings.batch_size
        if not self.lease.is_held():
            return
        target = self._claim_target()
        # Batches handed to the submission thread, oldest first, not yet recorded.
        in_flight: deque[tuple[Sequence[Occurrence], Future[list[Sent | None]]]] = deque()
        depth = self.submission.queue_depth
        unrecorded: list[SubmitOutcome] = []  # sent, for the next claim to write
        try:
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
                self._log_claim(result, grant, tally)
                if result.deferred:
                    # Held in the store until their jittered instants: wake for the first.
                    self._retries_possible = True
                occurrences = self._screen(result.occurrences, grant, tally)
                self._recent_claims.extend(
                    (o.schedule_name, o.idempotency_key, o.scheduled_at, grant.token)
                    for o in occurrences
                )
                more = (
                    max(result.schedules_seen, len(occurrences)) >= limit
                    and not self._stop.is_set()
                )
                result = None
                if not (occurrences and more and self.submission.threaded):
                    while in_flight:
                        self._record_sent(in_flight.popleft(), grant, tally)
                    if occurrences:
                        unrecorded = self._submit_batch(
                            occurrences, grant, tally, pending=False, defer=more
                        )
                    if more and self.lease.is_held():
                        result = self._claim(grant, limit, target, record=unrecorded)
                        unrecorded = []
                    continue
                in_flight.append((occurrences, self.submission.send_in_background(occurrences)))
                if len(in_flight) > depth:
                    # Taken back while the later batches go out (the thread sends in claim
                    # order); the next claim writes its outcomes.
                    unrecorded = self._record_sent(in_flight.popleft(), grant, tally, defer=True)
                if self.lease.is_held():
                    result = self._claim(grant, limit, target, record=unrecorded)
                    unrecorded = []
        finally:
            # Even when a claim failed (its transaction wrote nothing): what was sent must be
            # recorded, in claim order.
            if unrecorded:
                self.store.record_outcomes(unrecorded)
            while in_flight:
                self._record_sent(in_flight.popleft(), grant, tally)

    def _record_sent(
        self,
        batch: tuple[Sequence[Occurrence], Future[list[Sent | None]]],
        grant: LeaseGrant,
        tally: _Tally,
        *,
        defer: bool = False,
    ) -> list[SubmitOutcome]:
        occurrences, sending = batch
        return self._submit_batch(
            occurrences, grant, tally, pending=False, sent=sending.result(), defer=defer
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

    def _claim_target(self) -> datetime | None:
        """The instant to claim at when the next one is less than ``claim_ahead`` away by the
        store's clock; None to claim what is due now."""
        ahead = self.settings.claim_ahead
        if not ahead:
            return None
        nxt = self._next_due_at()
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
        self._misses.extend(result.misses)
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
        occurrences: Sequence[Occurrence],
        grant: LeaseGrant,
        tally: _Tally,
        *,
        pending: bool,
        sent: list[Sent | None] | None = None,
        defer: bool = False,
    ) -> list[SubmitOutcome]:
        """Submit (or take the results of ``sent``) and record; with ``defer`` (and a store
        whose claims take ``record``) the outcomes are returned for the next claim instead."""
        counts = self.submission.submit(
            occurrences,
            grant,
            pending=pending,
            sent=sent,
            defer=defer and self._claims_record,
        )
        if counts.retrying:
            self._retries_possible = True
            self._backend_failing = True
        elif counts.submitted and self._backend_failing:
            self._backend_back()
        tally.add(counts)
        return counts.unrecorded

    def _backend_back(self) -> None:
        """A submission succeeded after failures: the backend is back, so the retries
        waiting out their backoff go now (within the next iteration) rather than up to the
        backoff cap later; logged ``submitter.recovered``."""
        self._backend_failing = False
        try:
            moved = self.store.retry_now()
        except GoatbeatError as exc:
            self._log_best_effort("retries", exc)
            return
        if moved:
            self._retries_possible = True
            log_event(
                "submitter.recovered",
                scheduler_id=self.scheduler_id,
                submitter=getattr(self.submitter, "name", type(self.submitter).__name__),
                retries_brought_forward=moved,
            )

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
        moved = tally.claimed or tally.missed or tally.conflicts or tally.skipped
        nxt = self._due_read[0] if self._due_read and not moved else self._next_due_at()
        if nxt is not None:
            # Due-ness is judged by the store's clock, so the distance is too; wake early
            # enough to claim ahead of the instant.
            until = nxt - self._store_now() - self.settings.claim_ahead
            candidates.append(until.total_seconds())
        if self._retries_possible:
            retry_at = self._next_retry_at()
            if retry_at is None:
                self._retries_possible = False
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

    # -- operations: heartbeat, misses, alerts, observers ---------------------------------------

    def _after_iteration(self, result: IterationResult, duration: float) -> None:
        """What an iteration leaves for the operators; none of it may stop dispatch."""
        self._heartbeat(result)
        misses, self._misses = self._misses, []
        if misses:
            self._best_effort(
                "misses", self.store.record_misses, misses, scheduler_id=self.scheduler_id
            )
            if self.alerter is not None:
                now = self.clock.now()
                self.alerter.emit_all(
                    Alert.missed(m, at=now, scheduler_id=self.scheduler_id) for m in misses
                )
        # With shards, the holder of shard 0 alone looks for failing and overdue schedules
        # (every schedule), so an alert is raised once, not once per replica.
        if result.leader and (self._sharded is None or self._shard_leases[0].is_held()):
            self._readmit_refused()
            self._end_lost_runs()
            self._check_alerts()
        else:
            self._alerts.reset()
            self._alert_check_at = None
            self._lost_check_at = None
            self._readmitted = False  # looked at again when it leads again
        for observer in self._observers:
            try:
                observer.iteration(result, duration)
            except Exception:
                logger.exception("scheduler.error", extra={"goatbeat": {"stage": "observer"}})

    def _heartbeat(self, result: IterationResult) -> None:
        state = (Role.LEADER, result.fencing_token) if result.leader else (Role.STANDBY, None)
        now = self.clock.monotonic()
        interval = self.settings.lease_renew_interval.total_seconds()
        lease_name = self.lease.name
        if self._sharded is not None:
            # Membership: the other schedulers count this one while its beat is recent (see
            # _live_window), so it beats a little more often than once per renewal.
            interval *= 0.9
            held = [str(i) for i, lease in self._shard_leases.items() if lease.is_held()]
            lease_name = f"scheduler/shard-{','.join(held) or '-'}-of-{self.settings.shards}"
            if len(lease_name) > 64:
                lease_name = f"scheduler/{len(held)}-shards-of-{self.settings.shards}"
        if state == self._beat and self._beat_at is not None and now - self._beat_at < interval:
            return
        self._beat_at = now  # a failed write waits for the next slot too
        beat = SchedulerBeat(
            scheduler_id=self.instance,
            role=state[0],
            lease=lease_name,
            fencing_token=state[1],
            hostname=self._hostname,
            pid=os.getpid(),
            version=self.version,
            ttl=self.settings.lease_ttl + self.settings.lease_renew_interval,
        )
        joined = self._beat is None
        if self._best_effort("heartbeat", self.store.heartbeat, beat):
            self._beat = state
            if joined:
                self._warn_of_twins()
            if joined and self._sharded is not None:
                # A new member: the others wake, count it and hand it its share now rather
                # than at their next renewal.
                self._best_effort("heartbeat", self.store.notify, "lease:scheduler/joined")

    def _warn_of_twins(self) -> None:
        """A WARNING when another live process runs under this scheduler id: the lease tells
        them apart (each start has its own identity), but logs and executions name both
        alike, and usually a setting meant per replica is shared (Django's ``GOATBEAT
        ["scheduler_id"]`` in a settings file every replica reads)."""
        try:
            shared = self.store.status(lease_name=self.lease.name).shared_ids
        except GoatbeatError as exc:
            self._log_best_effort("heartbeat", exc)
            return
        twins = [p for p in shared.get(self.scheduler_id, ()) if p.scheduler_id != self.instance]
        if twins:
            log_event(
                "scheduler.duplicate_id",
                level=logging.WARNING,
                scheduler_id=self.scheduler_id,
                instance=self.instance,
                hostname=self._hostname,
                pid=os.getpid(),
                others=[f"{p.scheduler_id} (host {p.hostname}, pid {p.pid})" for p in twins],
                hint=(
                    "several live processes share this scheduler id; only one leads at a time, "
                    "but logs and executions cannot tell them apart: give each replica its own "
                    "(or leave scheduler_id unset: host:pid:random)"
                ),
            )

    def _readmit_refused(self) -> None:
        """Once per process, when it first leads: a schedule an earlier scheduler refused
        for a task it did not know (a release not rolled out everywhere) and took out of
        scheduling goes back in when this one allows the task; logged
        ``schedule.readmitted``."""
        if self._readmitted or self.allowed is None:
            return
        self._readmitted = True
        try:
            refused = self.store.refused_schedules()
        except GoatbeatError as exc:
            self._log_best_effort("refused", exc)
            return
        for name, task in refused:
            if not self.allowed.allows(task):
                continue
            if self._best_effort("refused", self.store.set_enabled, name, True):
                log_event(
                    "schedule.readmitted",
                    scheduler_id=self.scheduler_id,
                    schedule=name,
                    task=short_repr(task),
                )

    def _end_lost_runs(self) -> None:
        """Runs no worker will report end ``lost`` or ``expired`` (a failure for the
        schedule's health), each logged ``occurrence.lost`` and alerted."""
        now = self.clock.monotonic()
        if self._lost_check_at is not None and now - self._lost_check_at < LOST_CHECK_INTERVAL:
            return
        self._lost_check_at = now
        try:
            ended = self.store.end_lost_runs(lost_after=self.settings.lost_after)
        except GoatbeatError as exc:
            self._log_best_effort("lost", exc)
            return
        at = self.clock.now()
        for run in ended:
            log_event(
                "occurrence.lost",
                level=logging.WARNING,
                scheduler_id=self.scheduler_id,
                schedule=run.schedule_name,
                idempotency_key=run.idempotency_key,
                status=run.status,
                error=run.reason,
            )
        if self.alerter is not None and ended:
            self.alerter.emit_all(
                Alert.lost(run, at=at, scheduler_id=self.scheduler_id) for run in ended
            )

    def _check_alerts(self) -> None:
        if self.alerter is None:
            return
        now = self.clock.monotonic()
        interval = max(ALERT_CHECK_INTERVAL, self.settings.lease_renew_interval.total_seconds())
        if self._alert_check_at is not None and now - self._alert_check_at < interval:
            return
        self._alert_check_at = now
        try:
            health = self.store.schedule_health(
                overdue_after=self.settings.overdue_after, limit=ALERT_SCAN_LIMIT
            )
        except GoatbeatError as exc:
            self._log_best_effort("alerts", exc)
            return
        self.alerter.emit_all(
            self._alerts.update(health, at=self.clock.now(), scheduler_id=self.scheduler_id)
        )

    def _best_effort(self, stage: str, call: Any, *args: Any, **kwargs: Any) -> bool:
        try:
            call(*args, **kwargs)
        except GoatbeatError as exc:
            self._log_best_effort(stage, exc)
            return False
        return True

    def _log_best_effort(self, stage: str, exc: GoatbeatError) -> None:
        # A store that is down, or a schema not yet at version 5: logged, never fatal.
        log_event(
            "scheduler.error",
            level=logging.WARNING,
            scheduler_id=self.scheduler_id,
            stage=stage,
            error=str(exc),
        )

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
