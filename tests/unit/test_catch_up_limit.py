"""``catch_up_limit`` caps every catch-up, however long the grace (#12).

A per-second schedule with a 10-minute grace, stopped for 3 minutes: every missed instant is
still "on time", and the catch-up used to claim all 180 of them with a limit of 100. The cap
now holds for every policy, across the iterations that follow and across a change of leader.
The scheduler loop runs for real, on a MemoryStore and a FakeClock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.model import MisfirePolicy
from goatbeat.core.scheduler import Scheduler
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every, settings

SECOND = timedelta(seconds=1)
GRACE = timedelta(minutes=10)


def scheduler(
    store: MemoryStore, clock: FakeClock, name: str
) -> tuple[Scheduler, RecordingSubmitter]:
    submitter = RecordingSubmitter()
    loop = Scheduler(store, submitter, settings=settings(scheduler_id=name), clock=clock)
    return loop, submitter


def run_for(loop: Scheduler, clock: FakeClock, seconds: int) -> list[int]:
    """One iteration per second; how many occurrences each claimed."""
    claimed = []
    for _ in range(seconds):
        clock.advance(1)
        claimed.append(loop.run_once().claimed)
    return claimed


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_a_three_minute_stop_catches_up_at_most_catch_up_limit(policy: MisfirePolicy) -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every("tick", 1, misfire=policy, misfire_grace=GRACE, catch_up_limit=100)])
    loop, _ = scheduler(store, clock, "s1")
    assert run_for(loop, clock, 5) == [1] * 5

    clock.advance(180)  # stopped: no iteration for three minutes, all within the grace
    catch_up = loop.run_once()

    assert catch_up.claimed == 100 and catch_up.missed == 80
    assert run_for(loop, clock, 3) == [1, 1, 1]  # nothing of the outage comes back later
    tick = store.get("tick")
    assert (tick.total_run_count, tick.missed_count) == (5 + 100 + 3, 80)
    claimed = sorted(e.scheduled_at for e in store.executions(limit=1000))
    # The most recent 100 of the outage, then one per second again: no gap after it.
    assert claimed[5:] == [START + i * SECOND for i in range(86, 189)]


def test_the_cap_holds_across_a_failover_to_a_new_leader() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish(
        [every("tick", 1, misfire=MisfirePolicy.RUN_ALL, misfire_grace=GRACE, catch_up_limit=20)]
    )
    leader, first = scheduler(store, clock, "leader")
    standby, second = scheduler(store, clock, "standby")
    assert run_for(leader, clock, 3) == [1, 1, 1]
    assert standby.run_once().leader is False

    clock.advance(120)  # the leader dies without releasing; its 30 s lease runs out
    takeover = standby.run_once()

    assert takeover.became_leader and takeover.claimed == 20 and takeover.missed == 100
    assert run_for(standby, clock, 2) == [1, 1]
    assert run_for(leader, clock, 1) == [0]  # back, but a standby now
    assert len(first.keys) == 3 and len(second.keys) == 22
    assert len(set(first.keys) | set(second.keys)) == 25
    tick = store.get("tick")
    assert (tick.total_run_count, tick.missed_count) == (3 + 20 + 2, 100)


def test_two_outages_are_two_catch_ups_each_capped() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every("tick", 1, misfire_grace=GRACE, catch_up_limit=10)])
    loop, _ = scheduler(store, clock, "s1")
    run_for(loop, clock, 1)
    for _ in range(2):
        clock.advance(60)
        assert loop.run_once().claimed == 10
        assert run_for(loop, clock, 2) == [1, 1]
    assert store.get("tick").missed_count == 2 * 50
