"""The SQLite dialect runs a claim batch as a fixed number of statements whatever its size, as
PostgreSQL does: each batch primitive passes the batch as one JSON array (``json_each``)
instead of running its statement once per row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.model import ExecutionStatus, OverlapPolicy, Schedule
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import MemoryStore

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def _statements_of_a_claim(count: int, **schedule: Any) -> tuple[int, int]:
    """(statements run, occurrences claimed) of one claim of ``count`` due schedules."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    store.publish(
        [
            Schedule(name=f"job-{i:03}", task="t.job", trigger=IntervalTrigger(60), **schedule)
            for i in range(count)
        ]
    )
    clock.advance(timedelta(minutes=5))
    lease = store.acquire_lease("scheduler", "me", timedelta(seconds=30))
    assert lease is not None
    run: list[str] = []
    conn = store.dialect._conn  # type: ignore[attr-defined]
    conn.set_trace_callback(run.append)
    try:
        claimed = store.claim_due(lease, scheduler_id="me", limit=1000)
    finally:
        conn.set_trace_callback(None)
    return len(run), len(claimed.occurrences)


@pytest.mark.parametrize(
    "schedule",
    [{}, {"overlap": OverlapPolicy.SKIP, "max_runtime": timedelta(minutes=1)}],
    ids=["allow", "skip"],
)
def test_a_claim_runs_as_many_statements_for_fifty_schedules_as_for_two(
    schedule: dict[str, Any],
) -> None:
    few, claimed_few = _statements_of_a_claim(2, **schedule)
    many, claimed_many = _statements_of_a_claim(50, **schedule)
    assert claimed_few > 0 and claimed_many == 25 * claimed_few
    assert many == few


def test_backfill_and_run_requests_of_many_instants_are_one_insert() -> None:
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    store.publish([Schedule(name="job", task="t.job", trigger=IntervalTrigger(60))])
    run: list[str] = []
    conn = store.dialect._conn  # type: ignore[attr-defined]
    conn.set_trace_callback(run.append)
    try:
        result = store.backfill("job", start=T0 - timedelta(hours=1), end=T0, limit=100)
    finally:
        conn.set_trace_callback(None)
    assert len(result.created) == 60
    inserts = [s for s in run if s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1
    statuses = {e.status for e in store.executions(name="job", limit=100)}
    assert statuses == {ExecutionStatus.CLAIMED}
