"""Planning a claim batch: which schedules advance and how (compare-and-set values), the
executions they bring, split by each schedule's overlap policy, and the occurrences handed back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.jitter import jittered
from goatbeat.core.misfire import Plan
from goatbeat.core.model import (
    ACTIVE_STATUSES,
    ExecutionKind,
    ExecutionStatus,
    Miss,
    Occurrence,
    OverlapPolicy,
    Schedule,
    idempotency_key,
)

Planner = Callable[[Schedule, datetime], Plan]
"""Misfire planning as the stores call it; :func:`goatbeat.core.misfire.plan` unless a test
injects another (to interleave a concurrent edit between plan and write, for instance)."""


@dataclass(slots=True)
class Advance:
    """The compare-and-set one planned schedule asks for.

    ``plan.run_at`` is split by the overlap policy: ``starts`` are claimed (at most one for
    a schedule whose overlap is not allow), ``buffer`` waits for the running run
    (buffer_one), ``skips`` are recorded as skipped."""

    schedule: Schedule
    plan: Plan
    disable: bool  # a one_off schedule that is being claimed
    starts: list[datetime] = field(default_factory=list)
    buffer: datetime | None = None
    skips: list[datetime] = field(default_factory=list)

    @property
    def last_run_at(self) -> datetime | None:
        return self.plan.run_at[-1] if self.plan.run_at else None

    @property
    def last_status(self) -> str | None:
        if self.starts:
            return ExecutionStatus.CLAIMED.value
        if self.buffer is not None:
            return ExecutionStatus.BUFFERED.value
        if self.skips:
            return ExecutionStatus.SKIPPED.value
        return None


@dataclass(frozen=True, slots=True)
class Planned:
    """One execution a claim inserts."""

    schedule: Schedule
    scheduled_at: datetime
    key: str
    status: str
    due_at: datetime | None
    """The jittered instant of a claimed occurrence of a schedule with jitter."""


@dataclass(slots=True)
class ClaimPlan:
    """A planned claim batch: schedule advances and the executions they bring."""

    advances: list[Advance] = field(default_factory=list)
    schedules_seen: int = 0

    def executions_for(self, advanced_ids: set[int]) -> list[Planned]:
        """Every execution (claimed, buffered, skipped) of the schedules whose
        compare-and-set succeeded, oldest first."""
        out: list[Planned] = []
        claimed = ExecutionStatus.CLAIMED.value
        for adv in self.advances:
            schedule = adv.schedule
            assert schedule.id is not None
            if schedule.id not in advanced_ids:
                continue
            jitter = schedule.jitter
            for at in adv.starts:
                due = jittered(schedule.name, at, jitter) if jitter else None
                out.append(Planned(schedule, at, idempotency_key(schedule.name, at), claimed, due))
            if adv.buffer is not None:
                at = adv.buffer
                key = idempotency_key(schedule.name, at)
                out.append(Planned(schedule, at, key, ExecutionStatus.BUFFERED.value, None))
            for at in adv.skips:
                key = idempotency_key(schedule.name, at)
                out.append(Planned(schedule, at, key, ExecutionStatus.SKIPPED.value, None))
        # Occurrences go out oldest first, whatever order the rows were locked in.
        out.sort(key=lambda p: (p.scheduled_at, p.schedule.id or 0))
        return out

    def missed_for(self, advanced_ids: set[int]) -> int:
        return sum(
            adv.plan.missed
            for adv in self.advances
            if adv.schedule.id is not None and adv.schedule.id in advanced_ids
        )

    def skipped_for(self, advanced_ids: set[int]) -> dict[str, int]:
        return {
            adv.schedule.name: len(adv.skips)
            for adv in self.advances
            if adv.skips and adv.schedule.id in advanced_ids
        }

    def misses_for(self, advanced_ids: set[int]) -> list[Miss]:
        """What :meth:`missed_for` counts, schedule by schedule."""
        return [
            Miss(
                schedule_id=adv.schedule.id,
                schedule_name=adv.schedule.name,
                count=adv.plan.missed,
                first_at=adv.plan.missed_first,
                last_at=adv.plan.missed_last,
            )
            for adv in self.advances
            if adv.plan.missed and adv.schedule.id is not None and adv.schedule.id in advanced_ids
        ]


RunState = tuple[bool, bool]
"""For a schedule whose overlap is not allow: (its last started run is still running, an
occurrence of it is buffered)."""


def split_overlap(
    schedule: Schedule, run_at: Sequence[datetime], state: RunState
) -> tuple[list[datetime], datetime | None, list[datetime]]:
    """``run_at`` as (starts, buffered, skipped) by the schedule's overlap policy, given
    whether its previous run is still running and whether one occurrence already waits.
    Occurrences planned together would overlap each other too: only the oldest starts."""
    policy = schedule.overlap
    if policy is OverlapPolicy.ALLOW or not run_at:
        return list(run_at), None, []
    running, waiting = state
    rest = list(run_at)
    starts = [] if running else [rest.pop(0)]
    buffer = None
    if policy is OverlapPolicy.BUFFER_ONE and not waiting and rest:
        # Temporal's BUFFER_ONE: the first occurrence that finds the run busy waits; later
        # ones are dropped while it does.
        buffer = rest.pop(0)
    return starts, buffer, rest


def plan_batch(
    schedules: Sequence[Schedule],
    now: datetime,
    planner: Planner,
    runs: Mapping[int, RunState] | None = None,
) -> ClaimPlan:
    """Plan every schedule read by a claim. The advances come sorted by id so that stores
    lock rows in one global order. ``runs``: the run state of the schedules whose overlap is
    not allow (absent: nothing running, nothing buffered)."""
    result = ClaimPlan(schedules_seen=len(schedules))
    for schedule in sorted(schedules, key=lambda s: s.id or 0):
        p = planner(schedule, now)
        if not p.due and p.next_run_at == schedule.next_run_at:
            continue
        state = (runs or {}).get(schedule.id or 0, (False, False))
        starts, buffer, skips = split_overlap(schedule, p.run_at, state)
        result.advances.append(
            Advance(
                schedule=schedule,
                plan=p,
                disable=schedule.one_off and bool(p.run_at),
                starts=starts,
                buffer=buffer,
                skips=skips,
            )
        )
    return result


def run_states(rows: Sequence[Mapping[str, Any]], now: datetime) -> dict[int, RunState]:
    """The run state of each due row whose overlap is not allow, from the columns the claim
    reads with it: ``run_status``, ``run_submitted_at``, ``run_claimed_at`` (the run it
    waits for) and ``has_buffered``."""
    out: dict[int, RunState] = {}
    for row in rows:
        if row.get("overlap", "allow") == "allow":
            continue
        try:
            running = run_active(
                row.get("run_status"),
                row.get("run_submitted_at"),
                row.get("run_claimed_at"),
                row.get("max_runtime"),
                now,
            )
            out[int(row["id"])] = (running, bool(row.get("has_buffered")))
        except (TypeError, ValueError, AttributeError, OverflowError):
            continue  # a damaged row: decoding it names the column, and it is quarantined
    return out


def run_active(
    status: str | None,
    submitted_at: datetime | None,
    claimed_at: datetime | None,
    max_runtime: float | None,
    now: datetime,
) -> bool:
    """Whether the run an overlap policy waits for is still running at ``now``: claimed (it
    will be sent), or sent and reported neither finished nor older than ``max_runtime``
    (counted from its submission: a worker that died never reports)."""
    if status == ExecutionStatus.CLAIMED.value:
        return True
    if status not in ACTIVE_STATUSES or max_runtime is None:
        return False
    since = submitted_at or claimed_at
    return since is not None and since + timedelta(seconds=float(max_runtime)) > now


def occurrence_for(
    schedule: Schedule,
    *,
    execution_id: int,
    scheduled_at: datetime,
    key: str,
    token: int | None,
    kind: ExecutionKind = ExecutionKind.SCHEDULED,
    due_at: datetime | None = None,
) -> Occurrence:
    assert schedule.id is not None
    return Occurrence(
        due_at=due_at,
        execution_id=execution_id,
        schedule_id=schedule.id,
        schedule_name=schedule.name,
        task=schedule.task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        routing=schedule.routing,
        scheduled_at=scheduled_at,
        idempotency_key=key,
        kind=kind,
        fencing_token=token,
        attempts=0,
        misfire_grace=schedule.misfire_grace,
    )
