"""Upkeep: what each scheduler iteration leaves for the operators, best effort.

None of it may stop dispatch: a failure is logged (``scheduler.error`` with its ``stage``) and
the loop goes on. After each iteration (:meth:`Upkeep.heartbeat` and the rest, called by
:mod:`goatbeat.core.scheduler`):

- the scheduler's heartbeat row (:meth:`~goatbeat.core.store.ScheduleStore.heartbeat`, at most
  once per ``lease_renew_interval`` and at once when its role changes), and on the first one
  a WARNING when another live process runs under the same scheduler id;
- the record of the occurrences the iteration's claims dropped (misses), and their alerts;
- each :class:`SchedulerObserver` (the Prometheus metrics), told the :class:`IterationResult`;
- the leader only (with shards, the holder of shard 0): stored schedules an earlier scheduler
  refused and this one allows go back in, once per process; runs no report will end are ended
  ``lost`` or ``expired`` (every :data:`LOST_CHECK_INTERVAL`); failing and overdue schedules
  are alerted (every :data:`ALERT_CHECK_INTERVAL`).

On the hot path, refusal (:meth:`Upkeep.screen`). A scheduler built with an allow-list
(:class:`~goatbeat.core.allowlist.TaskAllowList`; ``Beat.scheduler()`` always gives one) checks
the task of every occurrence before anything is sent. An occurrence of a stored schedule whose
task is outside it (an admin row, an import, a row written with SQL) is refused through the
store (``refuse``: the claimed executions ``submit_failed`` with the reason,
``last_status='refused'``, and a schedule not declared in code taken out of scheduling),
``schedule.refused`` is logged once per schedule and process, and nothing of it reaches the
backend. And what each claim reported is logged (:meth:`Upkeep.log_claim`).

Between submissions: once the backend accepts again after retryable failures, the retries
waiting out their backoff are brought forward (:meth:`Upkeep.backend_answered`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from goatbeat.core.alerts import Alert, Alerter, AlertTracker
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.clock import Clock
from goatbeat.core.config import Settings
from goatbeat.core.errors import GoatbeatError, short_repr
from goatbeat.core.health import Role, SchedulerBeat
from goatbeat.core.model import ClaimResult, LeaseGrant, Miss, Occurrence
from goatbeat.core.observability import log_event, logger
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submission import BatchCounts, lateness, occurrence_fields, store_skew
from goatbeat.core.submit import TaskSubmitter

__all__ = [
    "Upkeep",
    "IterationResult",
    "SchedulerObserver",
    "Tally",
    "ALERT_CHECK_INTERVAL",
    "ALERT_SCAN_LIMIT",
    "LOST_CHECK_INTERVAL",
]

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


class Tally:
    """What one iteration did so far, counted as it goes; :meth:`result` makes the
    :class:`IterationResult`."""

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

    def merge(self, other: Tally) -> None:
        for name in self.__slots__:
            if name == "refused":
                self.refused = self.refused or other.refused
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def result(self, **fields: Any) -> IterationResult:
        """The iteration's result: these counts plus ``fields`` (leader, sleep, ...)."""
        counts = {name: getattr(self, name) for name in self.__slots__ if name != "refused"}
        return IterationResult(**counts, **fields)


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


class Upkeep:
    """The operations side of one scheduler (see the module docstring). Used from the
    scheduler's thread only."""

    def __init__(
        self,
        store: ScheduleStore,
        submitter: TaskSubmitter,
        *,
        settings: Settings,
        clock: Clock,
        instance: str,
        version: str,
        alerter: Alerter | None,
        allowed: TaskAllowList | None,
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.settings = settings
        self.clock = clock
        self.scheduler_id = settings.scheduler_id
        self.instance = instance
        self.version = version
        self.alerter = alerter
        self.allowed = allowed
        self._refusals_logged: set[tuple[int, str]] = set()
        self.observers: list[SchedulerObserver] = []
        """Told of every iteration and submission (:meth:`iteration_ended`, :meth:`submitted`)."""
        self.misses: list[Miss] = []
        """Occurrences this iteration's claims dropped, recorded after it."""
        self._alerts = AlertTracker(after_failures=settings.alert_after_failures)
        self._alert_check_at: float | None = None
        self._lost_check_at: float | None = None
        self._readmitted = False  # refused schedules looked at, once per process
        self._backend_failing = False  # the last submissions were retryable failures
        self._beat: tuple[Role, int | None] | None = None
        self._beat_at: float | None = None
        self._hostname = socket.gethostname()

    # -- after each iteration -------------------------------------------------------------------

    def record_misses(self) -> None:
        misses, self.misses = self.misses, []
        if misses:
            self._best_effort(
                "misses", self.store.record_misses, misses, scheduler_id=self.scheduler_id
            )
            if self.alerter is not None:
                now = self.clock.now()
                self.alerter.emit_all(
                    Alert.missed(m, at=now, scheduler_id=self.scheduler_id) for m in misses
                )

    def leading(self) -> None:
        """The leader's checks, each at its own pace."""
        self._readmit_refused()
        self._end_lost_runs()
        self._check_alerts()

    def not_leading(self) -> None:
        """Forget the leader's checks: each is made at once when it leads again."""
        self._alerts.reset()
        self._alert_check_at = None
        self._lost_check_at = None
        self._readmitted = False  # looked at again when it leads again

    # -- claims: refusals and what they reported ------------------------------------------------

    def screen(
        self, occurrences: Sequence[Occurrence], grant: LeaseGrant
    ) -> tuple[Sequence[Occurrence], int]:
        """``occurrences`` whose task is allowed; the schedules of the others are refused by
        the store (once each), so nothing of theirs is ever submitted. And how many schedules
        were refused for the first time (by this process)."""
        allow = self.allowed
        if allow is None or all(allow.allows(occ.task) for occ in occurrences):
            return occurrences, 0
        newly_refused = 0
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
            newly_refused += 1
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
        return kept, newly_refused

    def log_claim(self, result: ClaimResult, grant: LeaseGrant) -> None:
        """What a claim reported: damaged rows, misses (kept for :meth:`record_misses`),
        occurrences the overlap policy skipped or buffered, conflicts; each claimed
        occurrence at DEBUG."""
        occurrences = result.occurrences
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
        self.misses.extend(result.misses)
        if result.missed:
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

    def iteration_ended(self, result: IterationResult, duration: float) -> None:
        for observer in self.observers:
            try:
                observer.iteration(result, duration)
            except Exception:
                logger.exception("scheduler.error", extra={"goatbeat": {"stage": "observer"}})

    def submitted(self, lateness: float) -> None:
        for observer in self.observers:
            try:
                observer.submitted(lateness)
            except Exception:
                logger.exception("scheduler.error", extra={"goatbeat": {"stage": "observer"}})

    # -- the heartbeat row ----------------------------------------------------------------------

    def heartbeat(
        self, leader: bool, token: int | None, *, lease: str, shards: list[int] | None
    ) -> None:
        """Write the heartbeat row when due: ``lease`` names the single lease, or with
        ``shards`` (the indexes of those held; None: a single lease) the row names them."""
        state = (Role.LEADER, token) if leader else (Role.STANDBY, None)
        now = self.clock.monotonic()
        interval = self.settings.lease_renew_interval.total_seconds()
        lease_name = lease
        if shards is not None:
            # Membership: the other schedulers count this one while its beat is recent (see
            # ShardBalance.live_window), so it beats a little more often than once per renewal.
            interval *= 0.9
            held = [str(i) for i in shards]
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
                self._warn_of_twins(lease)
            if joined and shards is not None:
                # A new member: the others wake, count it and hand it its share now rather
                # than at their next renewal.
                self._best_effort("heartbeat", self.store.notify, "lease:scheduler/joined")

    def join(
        self, leader: bool, token: int | None, *, lease: str, shards: list[int] | None
    ) -> None:
        """The first heartbeat row, written before this scheduler claims anything (see
        :meth:`heartbeat` for the arguments); nothing once a row was written."""
        if self._beat is None:
            self.heartbeat(leader, token, lease=lease, shards=shards)

    def leave(self) -> None:
        """Take this scheduler's heartbeat row away (a graceful stop)."""
        if self._beat is not None:
            self._beat = None
            self._best_effort("heartbeat", self.store.remove_scheduler, self.instance)

    def _warn_of_twins(self, lease: str) -> None:
        """A WARNING when another live process runs under this scheduler id: the lease tells
        them apart (each start has its own identity), but logs and executions name both
        alike, and usually a setting meant per replica is shared (Django's ``GOATBEAT
        ["scheduler_id"]`` in a settings file every replica reads)."""
        try:
            shared = self.store.status(lease_name=lease).shared_ids
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

    # -- retries --------------------------------------------------------------------------------

    def backend_answered(self, counts: BatchCounts) -> bool:
        """Follow the backend through each batch's outcomes. A submission that succeeds after
        failures means the backend is back, so the retries waiting out their backoff go now
        (within the next iteration) rather than up to the backoff cap later; logged
        ``submitter.recovered``. Whether retries were brought forward."""
        if counts.retrying:
            self._backend_failing = True
            return False
        if not (counts.submitted and self._backend_failing):
            return False
        self._backend_failing = False
        try:
            moved = self.store.retry_now()
        except GoatbeatError as exc:
            self._log_best_effort("retries", exc)
            return False
        if moved:
            log_event(
                "submitter.recovered",
                scheduler_id=self.scheduler_id,
                submitter=getattr(self.submitter, "name", type(self.submitter).__name__),
                retries_brought_forward=moved,
            )
        return bool(moved)

    # -- the leader's checks --------------------------------------------------------------------

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
