"""The spacing after a catch-up, as decided for #27 item 5 and written in docs/operations.md.

goatbeat keeps a schedule's phase through every gap (a cutover, a takeover after kill -9, a
stopped scheduler): it never re-anchors on a late run, as celery's interval does, so every run
after a gap falls on the same instants whoever leads and ``goatbeat diff`` can compare them.
What that costs, stated exactly and held here:

- an instant still within its ``misfire_grace`` is on time: it runs when claimed, however
  close to the others (a 37 s stop of an every-10 s schedule: three runs at once);
- instants past their grace follow the misfire policy: ``run_once`` runs the most recent one at
  once, unless an on-time instant is due too, which then stands for them; ``skip`` runs none;
  ``run_all`` runs each (up to ``catch_up_limit``);
- the next slot keeps its phase, so the last catch-up run and the next slot are anywhere from
  0 to one interval apart; no run is ever dropped or delayed to widen that spacing;
- for celery's "never two runs closer than the interval" a schedule takes ``misfire="skip"``
  with a grace shorter than the spacing it needs: after a longer gap its first run is the next
  slot, on phase.

The scheduler loop runs for real on a MemoryStore and a FakeClock, one iteration a second.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.cron import CronTrigger
from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every, settings

EVERY = 10  # seconds between slots of the interval schedules below


def runs_around_a_gap(schedule: Schedule, stop: float = 37.5) -> list[tuple[float, float]]:
    """(seconds since START it was submitted, seconds since START it was scheduled) per run:
    25 s of one iteration a second, ``stop`` seconds with none, then 35 s more."""
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([schedule])
    submitter = RecordingSubmitter()
    loop = Scheduler(store, submitter, settings=settings(), clock=clock)
    runs: list[tuple[float, float]] = []

    def iterate() -> None:
        before = len(submitter.submitted)
        loop.run_once()
        for occurrence in submitter.submitted[before:]:
            runs.append((since(clock.now()), since(occurrence.scheduled_at)))

    iterate()
    for _ in range(25):
        clock.advance(1)
        iterate()
    clock.advance(stop)
    iterate()
    for _ in range(35):
        clock.advance(1)
        iterate()
    return runs


def since(instant: datetime) -> float:
    return (instant - START).total_seconds()


def after_the_gap(runs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [run for run in runs if run[0] > 25]


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_instants_within_their_grace_all_run_at_once_and_the_phase_is_kept(
    policy: MisfirePolicy,
) -> None:
    runs = runs_around_a_gap(
        every("tick", EVERY, misfire=policy, misfire_grace=timedelta(seconds=60))
    )
    # The stop ends at 62.5 s: 30, 40, 50 and 60 s are late but within the grace, so on time
    # whatever the policy; each runs at once, and 70, 80, 90 keep the phase.
    assert after_the_gap(runs) == [
        (62.5, 30.0),
        (62.5, 40.0),
        (62.5, 50.0),
        (62.5, 60.0),
        (70.5, 70.0),
        (80.5, 80.0),
        (90.5, 90.0),
    ]


def test_run_once_runs_the_latest_missed_instant_at_once_and_the_next_slot_on_phase() -> None:
    runs = runs_around_a_gap(
        every("tick", EVERY, misfire=MisfirePolicy.RUN_ONCE, misfire_grace=timedelta(seconds=2)),
        stop=32.5,
    )
    # The stop ends at 57.5 s: 30, 40 and 50 s are past the 2 s grace, nothing on time is due,
    # so one catch-up (the latest, 50 s) runs at once; 60 s keeps the phase: 3 s later, not 10.
    assert after_the_gap(runs) == [
        (57.5, 50.0),
        (60.5, 60.0),
        (70.5, 70.0),
        (80.5, 80.0),
        (90.5, 90.0),
    ]


def test_run_once_lets_an_on_time_run_stand_for_the_missed_ones() -> None:
    runs = runs_around_a_gap(
        every("tick", EVERY, misfire=MisfirePolicy.RUN_ONCE, misfire_grace=timedelta(seconds=5))
    )
    # The stop ends at 62.5 s: 30, 40, 50 s are late, 60 s is on time and stands for them.
    assert after_the_gap(runs) == [(62.5, 60.0), (70.5, 70.0), (80.5, 80.0), (90.5, 90.0)]


def test_skip_with_a_short_grace_never_runs_two_closer_than_the_interval_less_the_grace() -> None:
    grace = 2
    runs = runs_around_a_gap(
        every("tick", EVERY, misfire=MisfirePolicy.SKIP, misfire_grace=timedelta(seconds=grace))
    )
    assert after_the_gap(runs) == [(70.5, 70.0), (80.5, 80.0), (90.5, 90.0)]
    submitted = [at for at, _ in runs]
    assert min(b - a for a, b in zip(submitted, submitted[1:], strict=False)) >= EVERY - grace


def test_run_all_runs_every_missed_instant_at_once_then_the_next_slot_on_phase() -> None:
    runs = runs_around_a_gap(
        every("tick", EVERY, misfire=MisfirePolicy.RUN_ALL, misfire_grace=timedelta(seconds=5))
    )
    assert after_the_gap(runs) == [
        (62.5, 30.0),
        (62.5, 40.0),
        (62.5, 50.0),
        (62.5, 60.0),
        (70.5, 70.0),
        (80.5, 80.0),
        (90.5, 90.0),
    ]


def test_a_cron_schedule_keeps_its_instants_after_a_catch_up_too() -> None:
    # Every 10 s by cron (six fields): the same grid as the interval, the same rule.
    schedule = Schedule(
        name="cron",
        task="tasks.cron",
        trigger=CronTrigger("*/10 * * * * *"),
        misfire=MisfirePolicy.RUN_ONCE,
        misfire_grace=timedelta(seconds=2),
    )
    assert after_the_gap(runs_around_a_gap(schedule, stop=32.5)) == [
        (57.5, 50.0),
        (60.5, 60.0),
        (70.5, 70.0),
        (80.5, 80.0),
        (90.5, 90.0),
    ]


def test_a_takeover_after_the_leader_died_keeps_the_phase_by_the_same_rule() -> None:
    # The leader stops for good at 25 s (kill -9: no release); the standby, iterating every
    # second all along, takes over once the lease lapses and runs what fell due by the same
    # rule: the on-time instants at once, then the slots on phase.
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish(
        [every("tick", EVERY, misfire=MisfirePolicy.RUN_ONCE, misfire_grace=timedelta(seconds=60))]
    )
    leader, standby = RecordingSubmitter(), RecordingSubmitter()
    taken_over: list[tuple[float, float]] = []
    standby.on_submit = lambda o: taken_over.append((since(clock.now()), since(o.scheduled_at)))
    ttl = timedelta(seconds=15)
    loops = [
        Scheduler(store, leader, settings=settings(scheduler_id="s1", lease_ttl=ttl), clock=clock),
        Scheduler(store, standby, settings=settings(scheduler_id="s2", lease_ttl=ttl), clock=clock),
    ]
    for second in range(90):
        for loop in loops if second <= 25 else loops[1:]:
            loop.run_once()
        clock.advance(1)
    assert [since(o.scheduled_at) for o in leader.submitted] == [10.0, 20.0]
    first = taken_over[0][0]
    assert 25 < first <= 25 + ttl.total_seconds() + 1
    late = [scheduled for at, scheduled in taken_over if at == first]
    assert late == [30.0, 40.0]  # owed, within the grace: each at once
    assert [scheduled for _, scheduled in taken_over] == [30.0, 40.0, 50.0, 60.0, 70.0, 80.0]
    on_phase = [(at, scheduled) for at, scheduled in taken_over if at != first]
    assert all(at - scheduled < 1 for at, scheduled in on_phase)
