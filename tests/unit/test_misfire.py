"""Misfire planning: what a schedule claims after an outage, for every policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from goatbeat.core.misfire import COUNT_CAP, ON_TIME_CAP, Plan, plan
from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger, Trigger

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def make(trigger: Trigger, next_run_at: datetime | None, **kw: Any) -> Schedule:
    return Schedule(
        name="job", task="app.tasks.job", trigger=trigger, next_run_at=next_run_at, **kw
    )


def every_minute() -> IntervalTrigger:
    return IntervalTrigger(every=MINUTE)


# --- nothing due ----------------------------------------------------------------------------


def test_nothing_due_keeps_next_run_at() -> None:
    schedule = make(every_minute(), T0 + MINUTE)
    result = plan(schedule, T0)
    assert result == Plan(next_run_at=T0 + MINUTE)
    assert not result.due


def test_disabled_schedule_plans_nothing_even_when_overdue() -> None:
    schedule = make(every_minute(), T0 - timedelta(hours=3), enabled=False)
    result = plan(schedule, T0)
    assert result.run_at == [] and result.missed == 0
    assert result.next_run_at == T0 - timedelta(hours=3)


def test_schedule_without_next_run_plans_nothing() -> None:
    assert plan(make(every_minute(), None), T0) == Plan(next_run_at=None)


def test_occurrence_exactly_due_now_runs_and_advances() -> None:
    result = plan(make(every_minute(), T0), T0)
    assert result.run_at == [T0]
    assert result.missed == 0
    assert result.next_run_at == T0 + MINUTE


# --- the grace boundary -----------------------------------------------------------------------


def test_occurrence_exactly_grace_old_is_on_time() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, misfire_grace=30 * SECOND)
    result = plan(schedule, T0 + 30 * SECOND)
    assert result.run_at == [T0]
    assert result.missed == 0


def test_occurrence_one_microsecond_past_grace_is_late() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, misfire_grace=30 * SECOND)
    result = plan(schedule, T0 + 30 * SECOND + timedelta(microseconds=1))
    assert result.run_at == []
    assert (result.missed, result.missed_first, result.missed_last) == (1, T0, T0)
    assert result.next_run_at == T0 + MINUTE


def test_zero_grace_still_runs_what_is_due_right_now() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, misfire_grace=timedelta(0))
    assert plan(schedule, T0).run_at == [T0]


def test_grace_is_per_schedule() -> None:
    # Same outage (10 min), two graces: 15 min keeps everything on time, 2 min does not.
    now = T0 + 10 * MINUTE
    lenient = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, misfire_grace=15 * MINUTE)
    strict = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, misfire_grace=2 * MINUTE)
    assert plan(lenient, now).run_at == [T0 + i * MINUTE for i in range(11)]
    strict_plan = plan(strict, now)
    assert strict_plan.run_at == [T0 + i * MINUTE for i in range(8, 11)]
    assert strict_plan.missed == 8


# --- run_once (the default) -------------------------------------------------------------------


def test_run_once_is_the_default_policy() -> None:
    assert make(every_minute(), T0).misfire is MisfirePolicy.RUN_ONCE


def test_run_once_runs_the_latest_late_instant_when_nothing_is_on_time() -> None:
    hourly = IntervalTrigger(every=timedelta(hours=1))
    # Down from 12:00 to 15:30: 12:00, 13:00, 14:00, 15:00 are all late (grace 60 s).
    result = plan(make(hourly, T0), T0 + timedelta(hours=3, minutes=30))
    assert result.run_at == [T0 + timedelta(hours=3)]
    assert result.missed == 3
    assert result.missed_first == T0
    assert result.missed_last == T0 + timedelta(hours=2)
    assert not result.missed_is_lower_bound
    assert result.next_run_at == T0 + timedelta(hours=4)


def test_run_once_runs_no_late_instant_when_an_on_time_one_is_due() -> None:
    # Down 3 h, every minute, back exactly on a minute: the on-time run stands for the rest.
    now = T0 + timedelta(hours=3)
    result = plan(make(every_minute(), T0), now)
    on_time = [now - MINUTE, now]  # 60 s old is still within the 60 s grace
    assert result.run_at == on_time
    assert result.missed == 180 - 1
    assert result.missed_first == T0
    assert result.missed_last == now - 2 * MINUTE
    assert result.next_run_at == now + MINUTE


def test_run_once_with_a_single_late_instant_runs_it_and_drops_nothing() -> None:
    hourly = IntervalTrigger(every=timedelta(hours=1))
    result = plan(make(hourly, T0), T0 + 90 * SECOND)
    assert result.run_at == [T0]
    assert result.missed == 0
    assert result.missed_first is None and result.missed_last is None
    assert result.next_run_at == T0 + timedelta(hours=1)


# --- skip -------------------------------------------------------------------------------------


def test_skip_drops_every_late_instant_and_resumes_in_the_future() -> None:
    hourly = IntervalTrigger(every=timedelta(hours=1))
    schedule = make(hourly, T0, misfire=MisfirePolicy.SKIP)
    result = plan(schedule, T0 + timedelta(hours=3, minutes=30))
    assert result.run_at == []
    assert result.missed == 4
    assert (result.missed_first, result.missed_last) == (T0, T0 + timedelta(hours=3))
    assert result.next_run_at == T0 + timedelta(hours=4)
    assert result.due  # dropping is something the store must record


def test_skip_still_runs_on_time_instants() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.SKIP)
    now = T0 + 10 * MINUTE + 30 * SECOND
    result = plan(schedule, now)
    assert result.run_at == [T0 + 10 * MINUTE]
    assert result.missed == 10


# --- run_all ----------------------------------------------------------------------------------


def test_run_all_runs_every_late_instant_in_order_within_the_limit() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.RUN_ALL, catch_up_limit=100)
    now = T0 + 5 * MINUTE + 30 * SECOND
    result = plan(schedule, now)
    assert result.run_at == [T0 + i * MINUTE for i in range(6)]
    assert result.missed == 0
    assert result.next_run_at == T0 + 6 * MINUTE


def test_run_all_keeps_the_most_recent_late_instants_up_to_catch_up_limit() -> None:
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.RUN_ALL, catch_up_limit=3)
    now = T0 + 10 * MINUTE + 30 * SECOND  # late: 12:00..12:09 (10); on time: 12:10
    result = plan(schedule, now)
    # The on-time run counts against the limit too: the latest 3 of the catch-up.
    assert result.run_at == [T0 + i * MINUTE for i in (8, 9, 10)]
    assert result.missed == 8
    assert (result.missed_first, result.missed_last) == (T0, T0 + 7 * MINUTE)


# --- start_at / end_at ------------------------------------------------------------------------


def test_end_at_bounds_what_is_planned_and_ends_the_schedule() -> None:
    end = T0 + 3 * MINUTE
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.RUN_ALL, end_at=end)
    result = plan(schedule, T0 + timedelta(hours=1))
    assert result.run_at == [T0 + i * MINUTE for i in range(4)]
    assert result.missed == 0
    assert result.next_run_at is None


def test_end_at_counts_only_instants_up_to_it_as_missed() -> None:
    end = T0 + 3 * MINUTE
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.SKIP, end_at=end)
    result = plan(schedule, T0 + timedelta(hours=1))
    assert result.run_at == []
    assert (result.missed, result.missed_last) == (4, end)
    assert result.next_run_at is None


def test_next_run_at_past_end_at_ends_the_schedule_without_running() -> None:
    # end_at edited to before the stored next_run_at.
    schedule = make(every_minute(), T0, end_at=T0 - MINUTE)
    result = plan(schedule, T0 + 30 * SECOND)
    assert result == Plan(next_run_at=None)


def test_nothing_before_start_at_is_run_or_counted() -> None:
    # start_at moved to 12:30 after next_run_at (12:00) was computed.
    start = T0 + 30 * MINUTE
    schedule = make(every_minute(), T0, misfire=MisfirePolicy.RUN_ALL, start_at=start)
    result = plan(schedule, T0 + 35 * MINUTE)
    assert result.run_at == [start + i * MINUTE for i in range(6)]
    assert result.missed == 0


def test_start_at_in_the_future_only_moves_next_run_at() -> None:
    start = T0 + timedelta(days=1)
    schedule = make(every_minute(), T0, start_at=start)
    result = plan(schedule, T0 + MINUTE)
    assert result.run_at == [] and result.missed == 0
    assert result.next_run_at == start


# --- other triggers and edge cases -----------------------------------------------------------


def test_late_once_trigger_runs_once_under_run_once_and_is_dropped_under_skip() -> None:
    once = OnceTrigger(at=T0)
    now = T0 + timedelta(days=2)
    assert plan(make(once, T0), now) == Plan(run_at=[T0], next_run_at=None)
    skipped = plan(make(once, T0, misfire=MisfirePolicy.SKIP), now)
    assert (skipped.run_at, skipped.missed, skipped.next_run_at) == ([], 1, None)


def test_next_run_at_off_the_trigger_grid_counts_as_one_instant() -> None:
    # The interval was edited from 7 min to 10 min; next_run_at still says 12:07.
    ten = IntervalTrigger(every=timedelta(minutes=10), anchor=T0)
    schedule = make(ten, T0 + 7 * MINUTE, misfire=MisfirePolicy.SKIP)
    result = plan(schedule, T0 + timedelta(hours=1, minutes=5))
    # late: 12:07, 12:10, 12:20, 12:30, 12:40, 12:50, 13:00
    assert result.missed == 7
    assert (result.missed_first, result.missed_last) == (T0 + 7 * MINUTE, T0 + 60 * MINUTE)
    assert result.next_run_at == T0 + 70 * MINUTE


def test_enormous_grace_does_not_overflow() -> None:
    schedule = make(every_minute(), T0, misfire_grace=timedelta(days=999_999))
    result = plan(schedule, T0 + 2 * MINUTE)
    assert result.run_at == [T0, T0 + MINUTE, T0 + 2 * MINUTE]


@pytest.mark.timeout(20)
def test_on_time_flood_is_capped_and_the_overflow_counted_as_missed() -> None:
    # 1 ms interval, one hour of grace, down an hour: 3.6 million on-time instants.
    ms = IntervalTrigger(every=timedelta(milliseconds=1), anchor=T0, allow_subsecond=True)
    schedule = make(ms, T0, misfire_grace=timedelta(hours=1), catch_up_limit=100_000)
    now = T0 + timedelta(hours=1)
    result = plan(schedule, now)
    assert len(result.run_at) == ON_TIME_CAP
    assert result.run_at[-1] == now
    assert result.missed == 3_600_001 - ON_TIME_CAP
    assert not result.missed_is_lower_bound
    assert result.missed_first == T0
    assert result.missed_last == result.run_at[0] - timedelta(milliseconds=1)


# --- the year-long outage ---------------------------------------------------------------------

YEAR = timedelta(days=365)
PER_SECOND_LATE = int(YEAR / SECOND) - 60  # every second of the year minus the last 60 (+ now)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_per_second_interval_down_for_a_year_plans_in_bounded_time(policy: MisfirePolicy) -> None:
    schedule = make(IntervalTrigger(every="1s"), T0, misfire=policy)
    now = T0 + YEAR
    result = plan(schedule, now)
    on_time = [now - i * SECOND for i in range(60, -1, -1)]
    if policy is MisfirePolicy.RUN_ALL:
        late = [now - i * SECOND for i in range(99, 60, -1)]  # 61 on time + 39 late = 100
        assert result.run_at == late + on_time
        assert result.missed == PER_SECOND_LATE - 39
    else:
        assert result.run_at == on_time
        assert result.missed == PER_SECOND_LATE
    assert not result.missed_is_lower_bound
    assert result.missed_first == T0
    assert result.next_run_at == now + SECOND


@pytest.mark.timeout(20)
@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_per_second_cron_down_for_a_year_plans_in_bounded_time(policy: MisfirePolicy) -> None:
    schedule = make(CronTrigger("* * * * * *"), T0, misfire=policy)
    now = T0 + YEAR + 500 * timedelta(milliseconds=1)
    result = plan(schedule, now)
    last = now.replace(microsecond=0)
    on_time = [last - i * SECOND for i in range(59, -1, -1)]  # 60 instants within 60.5 s
    expected_late = PER_SECOND_LATE + 1
    if policy is MisfirePolicy.RUN_ALL:
        assert result.run_at == [last - i * SECOND for i in range(99, 59, -1)] + on_time
    else:
        assert result.run_at == on_time
    # Too many to walk: the count is a lower bound, flagged as such.
    assert result.missed_is_lower_bound
    assert COUNT_CAP - 100 <= result.missed <= expected_late
    assert result.missed_first == T0
    assert result.next_run_at == last + SECOND


@pytest.mark.timeout(20)
def test_sparse_cron_with_long_outage_counts_exactly() -> None:
    daily = CronTrigger("0 9 * * *", timezone="Europe/Paris")
    first = datetime(2025, 3, 1, 8, tzinfo=UTC)  # 09:00 CET
    assert daily.next_after(first - SECOND) == first
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    result = plan(make(daily, first, misfire=MisfirePolicy.RUN_ALL, catch_up_limit=2), now)
    assert result.run_at == [
        datetime(2026, 2, 28, 8, tzinfo=UTC),
        datetime(2026, 3, 1, 8, tzinfo=UTC),
    ]
    assert result.missed == 366 - 2  # 2025-03-01 .. 2026-03-01 inclusive, minus the two kept
    assert result.missed_last == datetime(2026, 2, 27, 8, tzinfo=UTC)
    assert not result.missed_is_lower_bound


# --- invariants against a brute-force reference ------------------------------------------------


@dataclass(frozen=True)
class Reference:
    run_at: list[datetime]
    missed: int
    missed_first: datetime | None
    missed_last: datetime | None
    next_run_at: datetime | None
    late: list[datetime]
    on_time: list[datetime]


def reference(schedule: Schedule, now: datetime) -> Reference:
    """Walk every instant from next_run_at: the obviously-correct, unbounded version."""
    assert schedule.next_run_at is not None
    end = schedule.end_at
    instants: list[datetime] = []
    t: datetime | None = schedule.next_run_at
    while t is not None and t <= now and (end is None or t <= end):
        instants.append(t)
        t = schedule.trigger.next_after(t)
    nxt = t if t is not None and (end is None or t <= end) else None
    cutoff = now - schedule.misfire_grace
    late = [i for i in instants if i < cutoff]
    on_time = [i for i in instants if i >= cutoff]
    if schedule.misfire is MisfirePolicy.RUN_ALL:
        kept = late
    elif schedule.misfire is MisfirePolicy.RUN_ONCE and not on_time:
        kept = late[-1:]
    else:
        kept = []
    # catch_up_limit caps the whole catch-up, on-time instants included.
    run_at = (kept + on_time)[-schedule.catch_up_limit :]
    dropped = [i for i in instants if i not in run_at]
    return Reference(
        run_at=run_at,
        missed=len(dropped),
        missed_first=dropped[0] if dropped else None,
        missed_last=dropped[-1] if dropped else None,
        next_run_at=nxt,
        late=late,
        on_time=on_time,
    )


TRIGGERS: list[tuple[Trigger, timedelta]] = [
    (IntervalTrigger(every=SECOND), SECOND),
    (IntervalTrigger(every=timedelta(seconds=7), anchor=T0 + timedelta(milliseconds=3)), SECOND),
    (IntervalTrigger(every=timedelta(minutes=5)), MINUTE),
    (IntervalTrigger(every=timedelta(hours=1, minutes=1)), MINUTE),
    (CronTrigger("* * * * * *"), SECOND),
    (CronTrigger("*/13 * * * * *"), SECOND),
    (CronTrigger("*/7 * * * *"), MINUTE),
    (CronTrigger("0,30 * * * *", timezone="Europe/Paris"), MINUTE),
    # Spring-forward gap and the repeated hour, for wall-clock triggers.
    (CronTrigger("30 2 * * *", timezone="Europe/Paris"), timedelta(hours=1)),
    (CronTrigger("15 * * * *", timezone="America/New_York"), MINUTE),
    (OnceTrigger(at=T0 + timedelta(minutes=17)), MINUTE),
]

BASES = [T0, datetime(2026, 3, 29, 0, 30, tzinfo=UTC), datetime(2026, 11, 1, 4, 0, tzinfo=UTC)]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Schedule, datetime]:
    trigger, unit = draw(st.sampled_from(TRIGGERS))
    base = draw(st.sampled_from(BASES)) + draw(st.integers(0, 3000)) * unit
    on_grid = draw(st.booleans())
    first = trigger.next_after(base) if on_grid else base
    assume(first is not None)
    assert first is not None
    outage = draw(st.integers(0, 400)) * unit + timedelta(microseconds=draw(st.integers(0, 10**6)))
    grace = draw(
        st.one_of(
            st.just(timedelta(seconds=60)),
            st.integers(0, 200).map(lambda n: n * unit),
            st.integers(0, 10**7).map(lambda n: timedelta(microseconds=n)),
        )
    )
    end_at = draw(st.none() | st.integers(-5, 300).map(lambda n: first + n * unit))
    assume(end_at is None or end_at >= first)
    schedule = make(
        trigger,
        first,
        misfire=draw(st.sampled_from(list(MisfirePolicy))),
        misfire_grace=grace,
        catch_up_limit=draw(st.integers(1, 6)),
        end_at=end_at,
    )
    return schedule, first + outage


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plan_matches_brute_force_reference(scenario: tuple[Schedule, datetime]) -> None:
    schedule, now = scenario
    old_next = schedule.next_run_at
    assert old_next is not None
    result = plan(schedule, now)
    ref = reference(schedule, now)

    assert result.run_at == sorted(set(result.run_at)), "sorted and unique"
    assert all(old_next <= t <= now for t in result.run_at)
    assert result.next_run_at is None or result.next_run_at > now
    assert result.missed_is_lower_bound is False
    late_kept = [t for t in result.run_at if now - t > schedule.misfire_grace]
    assert len(result.run_at) <= schedule.catch_up_limit
    assert result.missed + len(result.run_at) == len(ref.late) + len(ref.on_time)
    if schedule.misfire is MisfirePolicy.SKIP:
        assert late_kept == []
    if schedule.misfire is MisfirePolicy.RUN_ONCE:
        assert len(late_kept) <= 1
        if len(late_kept) == 1:
            assert late_kept == ref.late[-1:] and late_kept == result.run_at
    if schedule.misfire is MisfirePolicy.RUN_ALL:
        room = max(0, schedule.catch_up_limit - len(ref.on_time))
        assert late_kept == (ref.late[-room:] if room else [])

    assert result.run_at == ref.run_at
    assert result.missed == ref.missed
    assert (result.missed_first, result.missed_last) == (ref.missed_first, ref.missed_last)
    assert result.next_run_at == ref.next_run_at


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.integers(1, 10**9))
def test_plan_is_pure_and_nothing_is_due_before_next_run_at(
    scenario: tuple[Schedule, datetime], micros_before: int
) -> None:
    schedule, now = scenario
    assert plan(schedule, now) == plan(schedule, now)
    assert schedule.next_run_at is not None
    early = schedule.next_run_at - timedelta(microseconds=micros_before)
    assert plan(schedule, early) == Plan(next_run_at=schedule.next_run_at)
