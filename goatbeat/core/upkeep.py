"""Upkeep: what each scheduler iteration leaves for the operators, best effort.

None of it may stop dispatch: a failure is logged (``scheduler.error`` with its ``stage``) and
the loop goes on. After each iteration (:meth:`Upkeep.heartbeat` and the rest, called by
:mod:`goatbeat.core.scheduler`):

- the scheduler's heartbeat row (:meth:`~goatbeat.core.store.ScheduleStore.heartbeat`, at most
  once per ``lease_renew_interval`` and at once when its role changes), and on the first one
  a WARNING when another live process runs under the same scheduler id;
- the record of the occurrences the iteration's claims dropped (misses), and their alerts;
- the leader only (with shards, the holder of shard 0): stored schedules an earlier scheduler
  refused and this one allows go back in, once per process; runs no report will end are ended
  ``lost`` or ``expired`` (every :data:`LOST_CHECK_INTERVAL`); failing and overdue schedules
  are alerted (every :data:`ALERT_CHECK_INTERVAL`).

And between submissions: once the backend accepts again after retryable failures, the
retries waiting out their backoff are brought forward (:meth:`Upkeep.backend_answered`).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from goatbeat.core.alerts import Alert, Alerter, AlertTracker
from goatbeat.core.allowlist import TaskAllowList
from goatbeat.core.clock import Clock
from goatbeat.core.config import Settings
from goatbeat.core.errors import GoatbeatError, short_repr
from goatbeat.core.health import Role, SchedulerBeat
from goatbeat.core.model import Miss
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore
from goatbeat.core.submission import BatchCounts
from goatbeat.core.submit import TaskSubmitter

__all__ = ["Upkeep", "ALERT_CHECK_INTERVAL", "ALERT_SCAN_LIMIT", "LOST_CHECK_INTERVAL"]

ALERT_CHECK_INTERVAL = 30.0
"""How often (seconds, at least) the leader looks for failing and overdue schedules, when
alerts are configured."""
ALERT_SCAN_LIMIT = 1000
"""Schedules read per look (the overdue and the most failing first)."""
LOST_CHECK_INTERVAL = 5.0
"""How often (seconds, at least) the leader ends the runs no report will end (lost, expired:
:meth:`~goatbeat.core.store.ScheduleStore.end_lost_runs`)."""


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
