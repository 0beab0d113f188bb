"""Shared helpers for the conformance suite."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.model import LeaseGrant, Occurrence, Schedule
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger

# A fixed instant far from the test machine's clock: claims pass ``now=`` explicitly, so what is
# due never depends on when the suite runs.
T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def hourly(name: str, **kw: Any) -> Schedule:
    """An hourly schedule whose next run is T0 + 1h (the anchor is its last run)."""
    kw.setdefault("task", f"tasks.{name.replace(' ', '_')}")
    kw.setdefault("trigger", IntervalTrigger("1h"))
    kw.setdefault("last_run_at", T0)
    return Schedule(name=name, **kw)


def snapshot(store: ScheduleStore) -> tuple[Any, ...]:
    """Everything a store holds that a test can see, to prove a failed call wrote nothing."""
    return (
        store.list_schedules(),
        store.executions(limit=10_000),
        store.pending(limit=10_000),
    )


def lease(store: ScheduleStore, holder: str = "s1", name: str = "scheduler") -> LeaseGrant:
    grant = store.acquire_lease(name, holder, timedelta(minutes=5))
    assert grant is not None
    return grant


def claim_all(
    store: ScheduleStore, grant: LeaseGrant, now: datetime, *, limit: int = 100
) -> list[Occurrence]:
    """Claim in batches until nothing is due at ``now``."""
    out: list[Occurrence] = []
    while True:
        result = store.claim_due(grant, scheduler_id=grant.holder, limit=limit, now=now)
        assert not result.refused
        out.extend(result.occurrences)
        if result.schedules_seen == 0:
            return out


def keys(items: Sequence[Any]) -> list[str]:
    return [i.idempotency_key for i in items]
