"""No run stays ``running`` or ``submitted`` forever (#30 items 1 and 3), on the store and the
loop (MemoryStore, FakeClock): a run with no final report within its bound ends ``lost`` with
the reason, a failure for the schedule's health, alerts and pause_on_failure; a submitted run
whose ``expires`` window passed with no start report ends ``expired``. The real workers killed
mid-task are in tests/e2e/test_lost_runs.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.alerts import AlertKind
from goatbeat.core.health import Outcome, judge_open_run
from goatbeat.core.model import ExecutionStatus, OverlapPolicy, Routing, Schedule
from goatbeat.core.scheduler import LOST_CHECK_INTERVAL
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_operations import Recorder, delivered, make

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def every_minute(name: str = "job", **kw: Any) -> Schedule:
    kw.setdefault("last_run_at", START - timedelta(minutes=1))  # due at START
    return Schedule(name=name, task=f"tasks.{name}", trigger=IntervalTrigger("1m"), **kw)


def _latest(store: MemoryStore, name: str = "job") -> Any:
    return store.executions(name=name, limit=1)[0]


def test_a_started_run_with_no_final_report_ends_lost_and_counts_as_a_failure() -> None:
    recorder = Recorder()
    sched, store, clock = make(
        every_minute(pause_on_failure=1), recorder=recorder, lost_after="10m"
    )
    sched.run_once()
    run = _latest(store)
    assert store.record_started(run.idempotency_key, worker="w1")
    clock.advance(9 * 60)
    assert store.end_lost_runs(lost_after=timedelta(minutes=10)) == []  # within the bound
    clock.advance(2 * 60)
    sched.run_once()
    delivered(sched)

    ended = store.executions(name="job", limit=100)
    lost = [e for e in ended if e.idempotency_key == run.idempotency_key][0]
    assert lost.status is ExecutionStatus.LOST
    assert lost.error is not None and "lost_after 600s" in lost.error
    schedule = store.get("job")
    assert isinstance(schedule, Schedule)
    assert schedule.paused  # pause_on_failure=1: a lost run is a failure
    [health] = store.schedule_health(overdue_after=timedelta(minutes=5))
    assert health.consecutive_failures == 1 and health.last_failure_at is not None
    [alert] = [a for a in recorder.alerts if a.kind is AlertKind.LOST]
    assert alert.schedule == "job" and run.idempotency_key in alert.text
    # A later report still wins, and a failure is counted once.
    assert store.record_completion(run.idempotency_key, outcome=Outcome.FAILED)
    [health] = store.schedule_health(overdue_after=timedelta(minutes=5))
    assert health.consecutive_failures == 1


def test_max_runtime_bounds_the_run_and_the_overlap_policy_starts_the_next() -> None:
    sched, store, clock = make(
        every_minute(overlap=OverlapPolicy.SKIP, max_runtime=timedelta(seconds=90)),
        lost_after="1h",
    )
    sched.run_once()
    first = _latest(store)
    assert store.record_started(first.idempotency_key, worker="w1")
    clock.advance(LOST_CHECK_INTERVAL + 100)
    sched.run_once()
    statuses = {e.idempotency_key: e.status for e in store.executions(name="job", limit=100)}
    assert statuses[first.idempotency_key] is ExecutionStatus.LOST
    # The next instant (START + 1m, claimed when the first was already past max_runtime,
    # or START + 2m) went out: nothing waits behind a lost run.
    later = [k for k in statuses if k != first.idempotency_key]
    assert later and statuses[later[-1]] in (ExecutionStatus.SUBMITTED, ExecutionStatus.SKIPPED)
    assert ExecutionStatus.SUBMITTED in {statuses[k] for k in later}
    lost = [e for e in store.executions(name="job", limit=100) if e.id == first.id][0]
    assert lost.error is not None and "max_runtime 90s" in lost.error


def test_a_submitted_run_is_judged_only_where_workers_report() -> None:
    sched, store, clock = make(every_minute("quiet"), every_minute("reports"), lost_after="5m")
    sched.run_once()
    reported = _latest(store, "reports")
    assert store.record_started(reported.idempotency_key)
    assert store.record_completion(reported.idempotency_key, outcome=Outcome.SUCCEEDED)
    clock.advance(60)
    sched.run_once()  # the second instant of each: submitted, no word from any worker
    clock.advance(6 * 60)
    ended = store.end_lost_runs(lost_after=timedelta(minutes=5))
    assert {r.schedule_name for r in ended} == {"reports"}
    assert all(r.status == "lost" for r in ended)
    quiet = {e.status for e in store.executions(name="quiet", limit=100)}
    assert quiet == {ExecutionStatus.SUBMITTED}  # goatbeat never reports more than it knows


def test_a_submitted_run_past_its_expires_window_with_no_start_ends_expired() -> None:
    sched, store, clock = make(
        every_minute(routing=Routing(expires=30.0), pause_on_failure=1), lost_after="1h"
    )
    sched.run_once()
    first = _latest(store)
    assert store.record_started(first.idempotency_key)
    assert store.record_completion(first.idempotency_key, outcome=Outcome.SUCCEEDED)
    clock.advance(60)
    sched.run_once()
    second = _latest(store)
    clock.advance(31)
    [ended] = [r for r in store.end_lost_runs(lost_after=timedelta(hours=1))]
    assert (ended.idempotency_key, ended.status) == (second.idempotency_key, "expired")
    assert "expires window (30s" in ended.reason
    schedule = store.get("job")
    assert isinstance(schedule, Schedule)
    # Dropped unrun is neither a success nor a failure: no pause, no streak.
    assert not schedule.paused and schedule.last_status == "expired"
    [health] = store.schedule_health(overdue_after=timedelta(minutes=5))
    assert health.consecutive_failures == 0


def test_a_report_that_came_meanwhile_is_never_overwritten() -> None:
    store = MemoryStore()
    assert (
        judge_open_run(
            status="succeeded",
            submitted_at=START,
            started_at=START,
            finished_at=None,
            max_runtime=None,
            expires=None,
            now=START + timedelta(days=1),
            lost_after=timedelta(minutes=1),
        )
        is None
    )
    store.close()
