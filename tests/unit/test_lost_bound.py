"""The leader's lost-run check every few seconds needs the longest ``max_runtime``/``expires``
of all schedules, a pass over the schedule table: the store keeps it (``BOUND_REFRESH``) and
reads it again after a change, so a longer bound written meanwhile is seen at the next check
(MemoryStore, FakeClock), or once told of it by a notification when another process wrote
it (two SQLite stores on one file). The cost at 100,000 schedules: bench/bench_lost_check.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.health import Outcome
from goatbeat.core.model import ExecutionStatus, Routing, Schedule, SubmitOutcome
from goatbeat.core.scheduler import LOST_CHECK_INTERVAL
from goatbeat.stores.dialects.sqlite_tx import SQLiteTx
from goatbeat.stores.sqlite import SQLiteStore
from goatbeat.stores.store import BOUND_REFRESH
from tests.unit.test_lost_runs import START, every_minute
from tests.unit.test_operations import make


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each pass over the schedule table for the bound, as it is made."""
    seen: list[float] = []
    original = SQLiteTx.longest_bound

    def counting(self: Any) -> float:
        seen.append(bound := original(self))
        return bound

    monkeypatch.setattr(SQLiteTx, "longest_bound", counting)
    return seen


def test_the_longest_bound_is_read_once_per_refresh_not_at_every_check(
    reads: list[float],
) -> None:
    _sched, store, clock = make(every_minute(max_runtime=timedelta(minutes=3)))
    for _ in range(20):  # 100 s of checks, one every LOST_CHECK_INTERVAL
        store.end_lost_runs(lost_after=timedelta(hours=1))
        clock.advance(LOST_CHECK_INTERVAL)
    assert reads == [180.0]
    clock.advance(BOUND_REFRESH.total_seconds())
    store.end_lost_runs(lost_after=timedelta(hours=1))
    assert reads == [180.0, 180.0]


def test_a_longer_bound_written_meanwhile_is_seen_at_the_next_check(reads: list[float]) -> None:
    sched, store, clock = make(every_minute(), lost_after="10m")
    sched.run_once()
    first = store.executions(name="job", limit=1)[0]
    assert store.record_started(first.idempotency_key)
    assert store.record_completion(first.idempotency_key, outcome=Outcome.SUCCEEDED)
    clock.advance(60)
    sched.run_once()  # submitted; its worker never says a word
    second = store.executions(name="job", limit=1)[0]
    clock.advance(2.5 * 3600)
    # 2.5 h old: past lost_after (10 min) plus the lookback (1 h), so it keeps what it showed.
    assert store.end_lost_runs(lost_after=timedelta(minutes=10)) == []
    job = store.get("job")
    assert isinstance(job, Schedule)
    store.update(dataclasses.replace(job, routing=Routing(expires=2 * 3600.0)))
    # At once, within BOUND_REFRESH of the last read: the 2 h window is seen.
    [ended] = store.end_lost_runs(lost_after=timedelta(minutes=10))
    assert (ended.idempotency_key, ended.status) == (second.idempotency_key, "expired")
    statuses = {e.idempotency_key: e.status for e in store.executions(name="job", limit=10)}
    assert statuses[second.idempotency_key] is ExecutionStatus.EXPIRED
    assert reads == [0.0, 0.0, 7200.0]  # the start, past BOUND_REFRESH, after the change


def test_a_longer_bound_written_by_another_process_is_seen_once_notified(
    tmp_path: Path, reads: list[float]
) -> None:
    clock = FakeClock(START)
    leader = SQLiteStore(str(tmp_path / "gb.db"), clock=clock)
    admin = SQLiteStore(str(tmp_path / "gb.db"), clock=clock)  # another process, say
    try:
        leader.migrate()
        leader.publish([every_minute()])
        grant = leader.acquire_lease("scheduler", "s1", timedelta(minutes=10))
        assert grant is not None
        [first] = leader.claim_due(grant, scheduler_id="s1", limit=10).occurrences
        leader.record_outcomes([SubmitOutcome(execution_id=first.execution_id, ok=True)])
        assert leader.record_completion(first.idempotency_key, outcome=Outcome.SUCCEEDED)
        clock.advance(60)
        grant = leader.acquire_lease("scheduler", "s1", timedelta(minutes=10))
        assert grant is not None
        [second] = leader.claim_due(grant, scheduler_id="s1", limit=10).occurrences
        leader.record_outcomes([SubmitOutcome(execution_id=second.execution_id, ok=True)])
        clock.advance(2.5 * 3600)
        leader.wait(0)  # what it was told so far
        assert leader.end_lost_runs(lost_after=timedelta(minutes=10)) == []

        job = admin.get("job")
        assert isinstance(job, Schedule)
        admin.update(dataclasses.replace(job, routing=Routing(expires=2 * 3600.0)))
        assert leader.end_lost_runs(lost_after=timedelta(minutes=10)) == []  # not told yet
        assert leader.wait(0)  # the notification of the change
        [ended] = leader.end_lost_runs(lost_after=timedelta(minutes=10))
        assert (ended.idempotency_key, ended.status) == (second.idempotency_key, "expired")
        assert reads[-1] == 7200.0
    finally:
        admin.close()
        leader.close()
