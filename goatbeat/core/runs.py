"""The values of a schedule's runs: the statuses and kinds of an execution, the idempotency
keys, a claimed :class:`Occurrence` and its stored :class:`Execution`, what a submission
(:class:`SubmitOutcome`), a misfire policy (:class:`Miss`) and a lease (:class:`LeaseGrant`)
hand back."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.routing import Routing
from goatbeat.core.timeutil import iso_z

__all__ = [
    "ExecutionStatus",
    "ExecutionKind",
    "OPEN_STATUSES",
    "FAILURE_STATUSES",
    "ENDED_BY_REPORT",
    "ACTIVE_STATUSES",
    "idempotency_key",
    "manual_key",
    "Occurrence",
    "Execution",
    "LeaseGrant",
    "SubmitOutcome",
    "Miss",
]


class ExecutionStatus(enum.StrEnum):
    CLAIMED = "claimed"  # recorded, not yet accepted by the backend
    SUBMITTED = "submitted"  # the backend accepted it
    # Not accepted, for good: a permanent error, a refused task, or retries until the
    # occurrence's misfire grace ran out (then also counted in the schedule's missed_count).
    SUBMIT_FAILED = "submit_failed"
    # What the worker saw, for backends that report completion (goatbeat.completion, Django
    # Tasks, inline): the run started, an attempt failed and the backend retries it, the end.
    RUNNING = "running"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"  # the backend reported completion (Django Tasks, inline)
    FAILED = "failed"  # the backend reported the task failed
    # Never sent, on purpose: its schedule's overlap policy skipped it (the previous run was
    # still running), or a pause withdrew it while it waited (jitter, buffer_one).
    SKIPPED = "skipped"
    BUFFERED = "buffered"  # overlap buffer_one: waits for the running run to end
    # Ended badly with no final report from a worker: its backend said the worker died (a
    # killed worker, a hard time limit), or no report came within its bound (max_runtime,
    # else the lost_after setting). Counts as a failure. A late report still wins.
    LOST = "lost"
    # Dropped unrun by the backend because its expires window passed, or inferred once the
    # window passed with no start report.
    EXPIRED = "expired"


OPEN_STATUSES = frozenset({"submitted", "running", "retried"})
"""Statuses of a run the backend holds and has not ended: a worker's report, or the leader's
rule for lost and expired runs (:meth:`~goatbeat.core.store.ScheduleStore.end_lost_runs`),
ends it."""

FAILURE_STATUSES = frozenset({"failed", "lost"})
"""Statuses that count as a failure of the schedule (``failing``, ``pause_on_failure``,
alerts, metrics); counted once per run between them."""

ENDED_BY_REPORT = frozenset({"succeeded", "failed", "lost", "expired"})
"""Statuses that end a run (an occurrence buffered behind it may start)."""

ACTIVE_STATUSES = frozenset({"claimed", "submitted", "running", "retried"})
"""Statuses of a run that has not ended: the overlap policy waits for these (``running`` and
``retried`` are the worker's completion reports)."""


class ExecutionKind(enum.StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"  # a past instant submitted on request, under its scheduled key


def idempotency_key(name: str, scheduled_at: datetime) -> str:
    """``<name>:<scheduled_at UTC ISO-8601 Z>``, unique per occurrence in the executions table."""
    return f"{name}:{iso_z(scheduled_at)}"


def manual_key(name: str, requested_at: datetime) -> str:
    return f"{name}:manual:{iso_z(requested_at)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Occurrence:
    """One claimed run of a schedule, ready for a submitter."""

    execution_id: int
    schedule_id: int
    schedule_name: str
    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    routing: Routing
    scheduled_at: datetime
    idempotency_key: str
    kind: ExecutionKind = ExecutionKind.SCHEDULED
    fencing_token: int | None = None
    attempts: int = 0
    misfire_grace: timedelta | None = None
    """The schedule's grace: a failed submission is retried until :attr:`due` plus this
    (a manual run's ``scheduled_at`` is its request). None: unknown (retries by count only)."""
    due_at: datetime | None = None
    """When it is due to be sent, if not at ``scheduled_at``: the jittered instant, or a
    backfill's request. Lateness and the retry grace count from it."""

    @property
    def due(self) -> datetime:
        """``due_at``, else ``scheduled_at``."""
        return self.scheduled_at if self.due_at is None else self.due_at


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """A row of the executions table: the history of one occurrence."""

    id: int
    schedule_id: int | None
    schedule_name: str
    scheduled_at: datetime
    idempotency_key: str
    kind: ExecutionKind
    status: ExecutionStatus
    fencing_token: int | None
    scheduler_id: str | None
    claimed_at: datetime
    submitted_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    backend_task_id: str | None = None
    error: str | None = None
    # Reported by the worker (schema version 5): when the latest attempt started, how long
    # the last finished attempt ran (seconds), which worker ran it, how many attempts the
    # backend retried.
    started_at: datetime | None = None
    runtime: float | None = None
    worker: str | None = None
    retries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGrant:
    """What the store answers to a successful acquire/renew.

    ``expires_at`` is in the *database* clock; callers must not compare it with their own
    clock. The local deadline is the LeaseManager's business."""

    name: str
    holder: str
    token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOutcome:
    """The result of one submission, as the scheduler reports it back to the store."""

    execution_id: int
    ok: bool
    backend_task_id: str | None = None
    error: str | None = None
    final: bool = False  # a failure that will not be retried: mark submit_failed
    retry_in: float | None = None
    """Not final: seconds (from the store's now) before the row may be retried; None: at once."""
    missed: bool = False
    """Final because the occurrence's misfire grace ran out: counted in ``missed_count``."""
    idempotency_key: str | None = None
    """The occurrence's key: the outcome is written only to the execution with this id AND this
    key (None: the id alone). Execution ids can repeat after a promotion (the new primary's
    sequence resumes near the last value it received), and an outcome held across the switch
    must not land on another occurrence's row."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Miss:
    """Occurrences of one schedule that a claim's misfire policy dropped (never claimed)."""

    schedule_id: int
    schedule_name: str
    count: int
    first_at: datetime | None = None
    """The earliest and latest instants dropped (None when not known)."""
    last_at: datetime | None = None
