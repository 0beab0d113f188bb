"""Claiming ahead: the claim happens up to ``claim_ahead`` before an occurrence's instant, the
submission never before it. A FakeClock makes every instant exact: its ``sleep`` moves time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.model import ExecutionStatus, Occurrence
from goatbeat.core.scheduler import Scheduler
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every

FIRST = START + timedelta(seconds=10)  # every("a", 10) published at START is first due here


def make(store: MemoryStore, clock: Any, submitter: RecordingSubmitter, **kw: Any) -> Scheduler:
    values: dict[str, Any] = {"scheduler_id": "s1"}
    values.update(kw)
    return Scheduler(store, submitter, settings=Settings(**values), clock=clock)


def record_submit_times(submitter: RecordingSubmitter, clock: Any) -> list[datetime]:
    times: list[datetime] = []

    def on_submit(occ: Occurrence) -> None:
        times.append(clock.now())

    submitter.on_submit = on_submit
    return times


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock)


def test_an_occurrence_inside_the_window_is_claimed_early_and_submitted_at_its_instant(
    store, clock
):
    store.publish([every("a", 10)])
    submitter = RecordingSubmitter()
    times = record_submit_times(submitter, clock)
    sched = make(store, clock, submitter, claim_ahead=timedelta(milliseconds=250))
    clock.set(FIRST - timedelta(milliseconds=200))
    result = sched.run_once()
    assert (result.claimed, result.submitted, result.missed) == (1, 1, 0)
    assert submitter.keys == ["a:2026-03-01T12:00:10Z"]
    assert times == [FIRST]  # held until its instant, not a microsecond before
    (execution,) = store.executions(limit=10)
    assert execution.claimed_at == FIRST - timedelta(milliseconds=200)
    assert execution.status is ExecutionStatus.SUBMITTED
    # The schedule moved on from the instant claimed, not from the moment of the claim.
    assert store.get("a").next_run_at == FIRST + timedelta(seconds=10)


def test_outside_the_window_nothing_is_claimed_and_the_loop_sleeps_to_its_edge(store, clock):
    store.publish([every("a", 10)])
    submitter = RecordingSubmitter()
    sched = make(store, clock, submitter, claim_ahead=timedelta(milliseconds=250))
    clock.set(FIRST - timedelta(milliseconds=300))
    result = sched.run_once()
    assert (result.claimed, result.submitted) == (0, 0)
    assert result.sleep == pytest.approx(0.05)
    assert store.executions(limit=10) == []


def test_claim_ahead_zero_claims_only_what_is_due(store, clock):
    store.publish([every("a", 10)])
    submitter = RecordingSubmitter()
    times = record_submit_times(submitter, clock)
    sched = make(store, clock, submitter, claim_ahead=timedelta(0))
    clock.set(FIRST - timedelta(milliseconds=10))
    result = sched.run_once()
    assert result.claimed == 0
    assert result.sleep == pytest.approx(0.01)
    clock.set(FIRST + timedelta(milliseconds=5))
    assert sched.run_once().submitted == 1
    assert times == [FIRST + timedelta(milliseconds=5)]


def test_only_the_next_instant_is_claimed_so_a_fast_schedule_is_not_coalesced(store, clock):
    # Every 100 ms with a 250 ms window: claiming "everything due within the window" would
    # plan three instants at once and, under run_once, call two of them missed.
    store.publish([every("fast", 0.1)])
    submitter = RecordingSubmitter()
    times = record_submit_times(submitter, clock)
    sched = make(store, clock, submitter, claim_ahead=timedelta(milliseconds=250))
    first = START + timedelta(milliseconds=100)
    clock.set(first - timedelta(milliseconds=240))
    for _ in range(5):
        result = sched.run_once()
        assert (result.claimed, result.missed) == (1, 0)
    assert times == [first + timedelta(milliseconds=100 * i) for i in range(5)]
    assert all(o.scheduled_at == t for o, t in zip(submitter.submitted, times, strict=True))


def test_rows_another_scheduler_claimed_ahead_wait_for_their_instant(store, clock):
    # Scheduler "old" claims ahead, then dies before submitting; "new" takes over at once.
    store.publish([every("a", 10)])
    clock.set(FIRST - timedelta(milliseconds=200))
    old = store.acquire_lease("scheduler", "old", timedelta(seconds=1))
    assert old is not None
    claimed = store.claim_due(old, scheduler_id="old", limit=10, now=FIRST)
    assert [o.scheduled_at for o in claimed.occurrences] == [FIRST]
    assert store.release_lease("scheduler", "old", old.token)

    submitter = RecordingSubmitter()
    times = record_submit_times(submitter, clock)
    # claim_ahead 0 on the new one: the wait comes from the row, not from its own setting.
    new = make(store, clock, submitter, claim_ahead=timedelta(0))
    clock.advance(0.05)
    result = new.run_once()
    assert result.became_leader and result.resubmitted == 1
    assert times == [FIRST]


def test_the_instant_is_the_stores_even_when_the_host_clock_is_hours_off(store, clock):
    class Skewed:
        def now(self) -> datetime:
            return clock.now() + timedelta(hours=5)

        def monotonic(self) -> float:
            return clock.monotonic()

        def sleep(self, seconds: float) -> None:
            clock.sleep(seconds)

    store.publish([every("a", 10)])
    submitter = RecordingSubmitter()
    times = record_submit_times(submitter, clock)  # the store's clock
    sched = make(store, Skewed(), submitter, claim_ahead=timedelta(milliseconds=250))
    clock.set(FIRST - timedelta(milliseconds=100))
    assert sched.run_once().submitted == 1
    assert times == [FIRST]


def test_a_lost_local_deadline_while_waiting_leaves_the_row_claimed(store, clock):
    # The wait is the lease's time too: past the local deadline nothing may be submitted.
    store.publish([every("a", 10)])
    submitter = RecordingSubmitter()
    sched = make(
        store,
        clock,
        submitter,
        lease_ttl=timedelta(seconds=1),
        lease_renew_interval=timedelta(milliseconds=900),
        claim_ahead=timedelta(milliseconds=250),
    )
    clock.set(FIRST - timedelta(milliseconds=200))
    # Renewed just now: local deadline = now + ttl - renew = now + 100 ms, before the instant.
    result = sched.run_once()
    assert (result.claimed, result.submitted) == (1, 0)
    (execution,) = store.executions(limit=10)
    assert execution.status is ExecutionStatus.CLAIMED
    assert submitter.submitted == []


class CountingStore(MemoryStore):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.due_reads = 0

    def next_due_at(self) -> datetime | None:
        self.due_reads += 1
        return super().next_due_at()


def test_an_idle_iteration_reads_the_next_due_instant_once(clock):
    store = CountingStore(clock)
    store.publish([every("a", 10)])
    sched = make(store, clock, RecordingSubmitter(), claim_ahead=timedelta(milliseconds=250))
    result = sched.run_once()
    assert result.claimed == 0
    assert store.due_reads == 1
    assert result.sleep == pytest.approx(9.75)  # computed from that one read


def test_after_a_claim_the_next_due_instant_is_read_again(clock):
    store = CountingStore(clock)
    store.publish([every("a", 10)])
    sched = make(store, clock, RecordingSubmitter(), claim_ahead=timedelta(milliseconds=250))
    clock.set(FIRST - timedelta(milliseconds=100))
    result = sched.run_once()
    assert result.submitted == 1
    assert store.due_reads == 2  # the claim moved the schedule: the sleep needs its new instant
    assert result.sleep == pytest.approx(9.75)
