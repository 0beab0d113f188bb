"""Health: what an operator asks at 2 a.m., as values, and the rules that answer it.

Is a scheduler leading? Which processes are alive? Is anything waiting to be dispatched, and
since when? Did schedules miss or fail lately? Has each schedule succeeded as often as it
should? The stores read the rows (:meth:`~goatbeat.core.store.ScheduleStore.status`,
:meth:`~goatbeat.core.store.ScheduleStore.schedule_health`); this module holds the values they
return and the pure rules built on them, so ``goatbeat status --check``, the metrics and the
alerts judge the same way:

- :func:`check`: healthy when a scheduler holds an unexpired lease (by the database clock) and
  nothing due waits longer than ``max_lag``;
- :func:`is_overdue`: a schedule whose latest success is older than expected;
- :func:`is_refused`: a schedule a scheduler would not run (its task outside the allow-list)
  that stays refused (:class:`Refusals`); ``check`` is unhealthy while one is.

What a worker reports about a run (:class:`Outcome`) is recorded by
:meth:`~goatbeat.core.store.ScheduleStore.record_completion`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.instance import split_instance
from goatbeat.core.shards import lease_name, parse_lease_name
from goatbeat.core.timeutil import iso_z

__all__ = [
    "Role",
    "Outcome",
    "SchedulerBeat",
    "SchedulerProcess",
    "LeaseState",
    "StatusSnapshot",
    "ScheduleHealth",
    "HealthCheck",
    "Refusal",
    "Refusals",
    "check",
    "is_overdue",
    "is_refused",
    "judge_open_run",
    "LOST_AFTER",
    "LOST_LOOKBACK",
    "STALE_RETENTION",
    "MISS_RETENTION",
    "STATUS_WINDOW",
]

STALE_RETENTION = timedelta(minutes=10)
"""A scheduler row whose heartbeat expired longer ago than this is deleted by the next
heartbeat of any scheduler (until then ``status`` shows it as stale: a crashed replica)."""

MISS_RETENTION = timedelta(days=7)
"""How long the record of each dropped occurrence (``goatbeat_miss``) is kept."""

STATUS_WINDOW = timedelta(hours=1)
"""The window of the missed and failed counts of ``goatbeat status``."""


class Role(enum.StrEnum):
    """What a scheduler process was doing at its last heartbeat."""

    LEADER = "leader"  # held the lease: claims and dispatches
    STANDBY = "standby"  # waits for the lease


class Outcome(enum.StrEnum):
    """How an attempt ended, as the worker saw it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # final: the backend will not run it again
    RETRIED = "retried"  # this attempt failed; the backend runs it again later
    # The backend says the worker died with it (a killed worker, a hard time limit), or the
    # leader's rule found no final report within its bound (:func:`judge_open_run`). A
    # failure, counted once with ``failed``.
    LOST = "lost"
    # The backend dropped it unrun: its expires window passed (neither success nor failure).
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerBeat:
    """What one scheduler process writes at each heartbeat (at most once per lease renewal).

    ``ttl``: how long the row stands for a live process without another heartbeat; the
    scheduler gives its lease TTL plus its renewal interval."""

    scheduler_id: str
    role: Role
    lease: str = "scheduler"
    fencing_token: int | None = None
    hostname: str = ""
    pid: int | None = None
    version: str = ""
    ttl: timedelta = timedelta(seconds=40)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerProcess:
    """A scheduler's row as read back. ``stale``: its heartbeat expired (by the store's clock):
    the process died or cannot reach the database."""

    scheduler_id: str
    role: Role
    lease: str
    fencing_token: int | None
    hostname: str
    pid: int | None
    version: str
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    stale: bool

    @property
    def name(self) -> str:
        """The scheduler id it runs under (``scheduler_id`` is this process's own identity,
        the id plus a suffix of its start: :func:`goatbeat.core.instance.new_instance`)."""
        return split_instance(self.scheduler_id)[0]

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "scheduler_id": self.name,
            "instance": self.scheduler_id,
            "role": self.role.value,
            "lease": self.lease,
            "fencing_token": self.fencing_token,
            "hostname": self.hostname,
            "pid": self.pid,
            "version": self.version,
            "started_at": iso_z(self.started_at),
            "heartbeat_at": iso_z(self.heartbeat_at),
            "heartbeat_age_seconds": _seconds(now - self.heartbeat_at),
            "stale": self.stale,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseState:
    """The lease row. ``valid``: unexpired by the store's (database) clock."""

    name: str
    holder: str
    token: int
    expires_at: datetime
    valid: bool

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.name,
            "holder": self.holder,
            "holder_scheduler_id": split_instance(self.holder)[0],
            "fencing_token": self.token,
            "expires_at": iso_z(self.expires_at),
            "expires_in_seconds": _seconds(self.expires_at - now),
            "valid": self.valid,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSnapshot:
    """The whole system at one instant of the store's clock (``now``)."""

    now: datetime
    lease: LeaseState | None
    schedulers: Sequence[SchedulerProcess] = ()
    shard_leases: Sequence[LeaseState] = ()
    """Every shard lease row (``scheduler/shard-K-of-N``, docs/scaling.md), of any count."""
    due: int = 0
    """Enabled schedules whose ``next_run_at`` has come: not claimed yet."""
    pending: int = 0
    """Executions claimed but not accepted by the backend yet, whose instant has come
    (a crash between claim and submission, submissions backing off, run-now requests)."""
    oldest_due_at: datetime | None = None
    """The oldest instant among those: how far dispatch is behind."""
    oldest_due_name: str | None = None
    missed: int = 0
    """Occurrences dropped by misfire policies within ``window``."""
    failed: int = 0
    """Occurrences scheduled within ``window`` that failed (``failed``: reported by the
    worker; ``submit_failed``: never accepted by the backend)."""
    window: timedelta = STATUS_WINDOW

    @property
    def lag(self) -> float:
        """Seconds the oldest due instant is behind ``now`` (0 when nothing waits)."""
        if self.oldest_due_at is None:
            return 0.0
        return max(0.0, (self.now - self.oldest_due_at).total_seconds())

    @property
    def shards(self) -> list[LeaseState]:
        """The shard leases of the shard count in use, by shard: that of the lease (the
        single one included) expiring last. Empty when the single lease is the one in use.
        A shard never held is listed as an invalid lease with no holder."""
        rows = [*self.shard_leases, *([self.lease] if self.lease is not None else [])]
        if not self.shard_leases:
            return []
        latest = max(rows, key=lambda lease: (lease.valid, lease.expires_at))
        count = parse_lease_name(latest.name).count
        if count == 1:
            return []
        by_name = {lease.name: lease for lease in self.shard_leases}
        never = datetime.min.replace(tzinfo=self.now.tzinfo)
        return [
            by_name.get(name)
            or LeaseState(name=name, holder="", token=0, expires_at=never, valid=False)
            for name in (lease_name(i, count) for i in range(count))
        ]

    @property
    def leader(self) -> SchedulerProcess | None:
        """The live process holding the valid lease, when it has a heartbeat row."""
        if self.lease is None or not self.lease.valid:
            return None
        for process in self.schedulers:
            if process.scheduler_id == self.lease.holder and not process.stale:
                return process
        return None

    @property
    def shared_ids(self) -> dict[str, list[SchedulerProcess]]:
        """Scheduler ids that several live processes run under (a setting shared by every
        replica): only one of them leads, but logs and executions name them alike."""
        by_name: dict[str, list[SchedulerProcess]] = {}
        for process in self.schedulers:
            if not process.stale:
                by_name.setdefault(process.name, []).append(process)
        return {name: procs for name, procs in by_name.items() if len(procs) > 1}

    def to_dict(self) -> dict[str, Any]:
        return {
            "database_time": iso_z(self.now),
            "lease": None if self.lease is None else self.lease.to_dict(self.now),
            "shards": [lease.to_dict(self.now) for lease in self.shards if lease.holder],
            "schedulers": [p.to_dict(self.now) for p in self.schedulers],
            "shared_scheduler_ids": {
                name: [p.scheduler_id for p in procs] for name, procs in self.shared_ids.items()
            },
            "backlog": {
                "due": self.due,
                "pending": self.pending,
                "oldest_at": None if self.oldest_due_at is None else iso_z(self.oldest_due_at),
                "oldest_schedule": self.oldest_due_name,
                "lag_seconds": round(self.lag, 3),
            },
            "window_seconds": self.window.total_seconds(),
            "missed": self.missed,
            "failed": self.failed,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthCheck:
    """The answer of :func:`check`: ``ok`` and one line saying why."""

    ok: bool
    reason: str
    problems: list[str] = field(default_factory=list)


def check(
    snapshot: StatusSnapshot, *, max_lag: timedelta, refusals: Refusals | None = None
) -> HealthCheck:
    """Healthy when a scheduler holds the lease, unexpired by the database clock, nothing
    due has waited longer than ``max_lag``, and no schedule is refused (``refusals``, when
    read: a refused schedule does not run). The reason names the holder, or every problem."""
    problems: list[str] = []
    lease = snapshot.lease
    shards = snapshot.shards
    if shards:
        unheld = [s.name for s in shards if not s.valid]
        if unheld:
            problems.append(f"no scheduler holds {', '.join(unheld)}")
    elif lease is None:
        problems.append("no scheduler has ever held the lease")
    elif not lease.valid:
        ago = _seconds(snapshot.now - lease.expires_at)
        problems.append(
            f"no scheduler holds the lease (the last holder, {lease.holder}, let it expire "
            f"{ago:g}s ago)"
        )
    limit = max_lag.total_seconds()
    if snapshot.oldest_due_at is not None and snapshot.lag > limit:
        what = f"{snapshot.oldest_due_name!r} " if snapshot.oldest_due_name else ""
        problems.append(
            f"backlog: {what}due since {iso_z(snapshot.oldest_due_at)}, "
            f"{snapshot.lag:.0f}s ago (--max-lag {limit:g}s); "
            f"{snapshot.due} schedule(s) due, {snapshot.pending} claimed and not submitted"
        )
    if refusals is not None and refusals.total:
        problems.append(refusals.describe(snapshot.now))
    if problems:
        return HealthCheck(ok=False, reason="; ".join(problems), problems=problems)
    if shards:
        holders = sorted({s.holder for s in shards})
        return HealthCheck(
            ok=True,
            reason=(
                f"{len(holders)} scheduler(s) hold the {len(shards)} shards "
                f"({', '.join(holders)}); lag {snapshot.lag:.0f}s (max {limit:g}s)"
            ),
        )
    assert lease is not None
    left = _seconds(lease.expires_at - snapshot.now)
    return HealthCheck(
        ok=True,
        reason=(
            f"{lease.holder} holds the lease (fencing token {lease.token}, {left:g}s left); "
            f"lag {snapshot.lag:.0f}s (max {limit:g}s)"
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleHealth:
    """One schedule's record of success, as the stores read it for metrics and alerts.

    ``last_success_at`` / ``last_failure_at``: when the latest run reported by a worker
    succeeded / failed for good (None: never reported); ``consecutive_failures``: failures
    since the last success; ``overdue``: :func:`is_overdue` at the instant it was read."""

    name: str
    enabled: bool
    last_status: str | None
    last_run_at: datetime | None
    next_run_at: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    consecutive_failures: int
    missed_count: int
    overdue: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "enabled": self.enabled,
            "last_status": self.last_status,
            "last_run_at": _iso_or_none(self.last_run_at),
            "next_run_at": _iso_or_none(self.next_run_at),
            "last_success_at": _iso_or_none(self.last_success_at),
            "last_failure_at": _iso_or_none(self.last_failure_at),
            "consecutive_failures": self.consecutive_failures,
            "missed_count": self.missed_count,
            "overdue": self.overdue,
        }


def is_overdue(
    *,
    enabled: bool,
    next_run_at: datetime | None,
    last_run_at: datetime | None,
    last_success_at: datetime | None,
    last_failure_at: datetime | None,
    now: datetime,
    overdue_after: timedelta,
) -> bool:
    """Whether a schedule's last success is older than expected at ``now``.

    Expected: every occurrence due more than ``overdue_after`` ago was claimed, and, for a
    schedule whose workers report completions (a success or failure was ever recorded), its
    latest claimed occurrence has succeeded. So a schedule is overdue when it is enabled and

    1. its ``next_run_at`` is more than ``overdue_after`` past (no scheduler claims it: none
       leads, or the backlog is that long); or
    2. it reports completions, its latest run (``last_run_at``) is more than
       ``overdue_after`` past, and no success was recorded since that run was due (it failed,
       is still running, or its message was lost).

    The stores repeat this rule in SQL to pick the overdue schedules first; the conformance
    suite holds them to it."""
    if not enabled:
        return False
    late = now - overdue_after
    if next_run_at is not None and next_run_at <= late:
        return True
    reports = last_success_at is not None or last_failure_at is not None
    if not reports or last_run_at is None or last_run_at > late:
        return False
    return last_success_at is None or last_success_at < last_run_at


def is_refused(
    *,
    enabled: bool,
    paused: bool,
    last_status: str | None,
    source: str,
    next_run_at: datetime | None,
) -> bool:
    """Whether a schedule stays refused: a scheduler would not run its task (outside its
    allow-list, e.g. a release that does not know the task yet) and nothing has run it
    since. Enabled and unpaused (a schedule stopped on purpose is not refused), its
    ``last_status`` ``'refused'``, and either declared in code (a code row keeps its next
    run: each occurrence is refused until a scheduler that knows the task claims it) or out
    of scheduling (``next_run_at`` None): a row not declared in code leaves scheduling when
    refused, until a scheduler that allows its task leads (it schedules it again), an edit,
    or disabling and enabling it. The stores repeat this rule in SQL."""
    if not enabled or paused or last_status != "refused":
        return False
    return source == "code" or next_run_at is None


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A schedule that stays refused (:func:`is_refused`): its task, the reason of its latest
    refusal (as the scheduler wrote it on the refused run; None when that run is gone), and
    since when: the first refused run after its latest run of any other outcome."""

    name: str
    task: str
    source: str
    reason: str | None
    since: datetime | None

    def describe(self, now: datetime) -> str:
        when = "" if self.since is None else f" since {iso_z(self.since)} ({_ago(now, self.since)})"
        return f"{self.name!r}{when}: {self.reason or 'refused (reason not recorded)'}"

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "source": self.source,
            "reason": self.reason,
            "since": _iso_or_none(self.since),
            "since_seconds": None if self.since is None else _seconds(now - self.since),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusals:
    """The schedules that stay refused: ``total`` of them, the first ``schedules`` by name
    (:meth:`~goatbeat.core.store.ScheduleStore.refusals`)."""

    total: int = 0
    schedules: Sequence[Refusal] = ()

    def describe(self, now: datetime) -> str:
        """One line for ``status --check``: how many, the first one, and what to do."""
        if not self.schedules:
            return f"refused: {self.total} schedule(s) do not run"
        first = self.schedules[0].describe(now)
        more = f" and {self.total - 1} more" if self.total > 1 else ""
        return (
            f"refused: {self.total} schedule(s) do not run: {first}{more} (a scheduler that "
            "knows the task runs it again once it leads)"
        )


LOST_AFTER = timedelta(hours=1)
"""The default of the ``lost_after`` setting: how long a run of a schedule with no
``max_runtime`` may go without a final report before it is ended ``lost``."""

LOST_LOOKBACK = timedelta(hours=1)
"""How long after its bound a ``submitted`` run with no word from a worker is still judged
(a run of a schedule whose workers report). Runs older than that, from before the workers
reported, keep what they showed."""


def judge_open_run(
    *,
    status: str,
    submitted_at: datetime | None,
    started_at: datetime | None,
    finished_at: datetime | None,
    max_runtime: float | None,
    expires: float | None,
    now: datetime,
    lost_after: timedelta,
) -> tuple[str, str] | None:
    """Whether a run that has not ended (``submitted``, ``running``, ``retried``) is ended
    by the leader at ``now``, as ``(status, reason)``; None while it may still report.

    - ``submitted`` (of a schedule whose workers report) with an ``expires`` window that
      passed since its submission and no start report: ``expired``;
    - ``submitted`` with no report within its bound of its submission: ``lost``;
    - ``running``/``retried`` with no final report within its bound of its last start (or,
      retried, of its failed attempt's end): ``lost``.

    The bound is the schedule's ``max_runtime`` where set, else ``lost_after``. A report
    that comes later still wins (any status may start or end again)."""
    if max_runtime is not None:
        bound, named = timedelta(seconds=max_runtime), f"max_runtime {max_runtime:g}s"
    else:
        bound, named = lost_after, f"lost_after {lost_after.total_seconds():g}s"
    if status == "submitted":
        if submitted_at is None:
            return None
        if expires is not None and submitted_at + timedelta(seconds=expires) < now:
            return (
                "expired",
                f"expired: no worker started it within its expires window ({expires:g}s "
                "from its submission); the backend drops such a message unrun",
            )
        if submitted_at + bound < now:
            return (
                "lost",
                f"lost: no report from a worker within {named} of its submission (this "
                "schedule's workers report completions)",
            )
        return None
    if status not in ("running", "retried"):
        return None
    since = started_at
    if status == "retried" and finished_at is not None:
        since = max(finished_at, started_at or finished_at)
    since = since or submitted_at
    if since is None or since + bound >= now:
        return None
    what = "its start" if status == "running" else "its failed attempt (retried)"
    return (
        "lost",
        f"lost: no final report within {named} of {what}; the worker died with it "
        "(killed, out of memory, a hard time limit) or its report was lost",
    )


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 3)


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0.0, (now - then).total_seconds())
    return f"{seconds:.0f}s ago"


def _iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else iso_z(value)


def check_scheduler(snapshot: StatusSnapshot, scheduler_id: str) -> HealthCheck:
    """One replica's liveness, from its heartbeat row (``status --check --scheduler-id``):
    healthy while the newest row of that scheduler id (or instance) has not expired by the
    database clock. The loop writes the row as it iterates, so a replica whose loop is wedged,
    SIGSTOPped or cut off from the database fails within its heartbeat's TTL (``lease_ttl +
    lease_renew_interval``); a healthy standby passes. A replica that stopped cleanly removed
    its row: unhealthy too (nothing says it runs)."""
    rows = [p for p in snapshot.schedulers if scheduler_id in (p.name, p.scheduler_id)]
    if not rows:
        reason = (
            f"no heartbeat from scheduler {scheduler_id!r}: not started, stopped, or its "
            "row expired and was removed"
        )
        return HealthCheck(ok=False, reason=reason, problems=[reason])
    newest = max(rows, key=lambda p: p.heartbeat_at)
    where = f"{newest.hostname or '?'} pid {newest.pid if newest.pid is not None else '?'}"
    age = _seconds(snapshot.now - newest.heartbeat_at)
    if newest.stale:
        expired = _seconds(snapshot.now - newest.expires_at)
        reason = (
            f"scheduler {scheduler_id!r} ({where}) last beat {age:g}s ago; its heartbeat "
            f"expired {expired:g}s ago (wedged, stopped or cut off from the database)"
        )
        return HealthCheck(ok=False, reason=reason, problems=[reason])
    left = _seconds(newest.expires_at - snapshot.now)
    return HealthCheck(
        ok=True,
        reason=(
            f"scheduler {scheduler_id!r} ({where}) is alive: {newest.role.value}, last beat "
            f"{age:g}s ago ({left:g}s left)"
        ),
    )
