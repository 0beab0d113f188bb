"""Run-now executions are first-class runs: the scheduler that submits one records itself and
its fencing token on it, and the schedule's last run and status follow (MemoryStore, FakeClock;
the stores' side is in tests/conformance/test_store_publication.py)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import ExecutionKind, ExecutionStatus, LeaseGrant, Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class FlakySubmitter(AcceptingSubmitter):
    def __init__(self, failures: int = 0) -> None:
        self.failures = failures

    def submit(self, occurrence: Occurrence) -> str | None:
        if self.failures:
            self.failures -= 1
            raise RetryableSubmitError("broker down")
        return f"task-{occurrence.execution_id}"


def _scheduler(store: MemoryStore, clock: FakeClock, name: str, failures: int = 0) -> Scheduler:
    settings = Settings(scheduler_id=name)
    return Scheduler(store, FlakySubmitter(failures), settings=settings, clock=clock)


def test_the_scheduler_that_submits_a_run_now_records_itself_and_its_token() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([Schedule(name="hourly", task="t.hourly", trigger=IntervalTrigger("1h"))])
    requested = store.request_run("hourly")
    sched = _scheduler(store, clock, "leader-a")

    result = sched.run_once()

    assert result.submitted == 1
    [execution] = store.executions(name="hourly")
    assert execution.kind is ExecutionKind.MANUAL
    assert execution.status is ExecutionStatus.SUBMITTED
    assert execution.scheduler_id == "leader-a"
    assert execution.fencing_token == result.fencing_token is not None
    schedule = store.get("hourly")
    assert isinstance(schedule, Schedule)
    assert schedule.last_run_at == requested.scheduled_at
    assert schedule.last_status == "submitted" and schedule.total_run_count == 1


def test_a_run_now_retried_by_the_next_leader_keeps_its_claim() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([Schedule(name="hourly", task="t.hourly", trigger=IntervalTrigger("1h"))])
    store.request_run("hourly")
    first = _scheduler(store, clock, "leader-a", failures=1)
    first_run = first.run_once()
    assert first_run.retrying == 1
    assert first.release()
    clock.advance(2)  # past its backoff, which the row keeps across leaders

    second = _scheduler(store, clock, "leader-b")
    result = second.run_once()

    assert result.submitted == 1 and result.fencing_token != first_run.fencing_token
    [execution] = store.executions(name="hourly")
    assert execution.status is ExecutionStatus.SUBMITTED
    # Claimed once, by the first leader; resubmitted with that claim, as a claimed occurrence.
    assert (execution.scheduler_id, execution.fencing_token) == (
        "leader-a",
        first_run.fencing_token,
    )
    assert store.get("hourly").total_run_count == 1


class RefusingStore(MemoryStore):
    """As if the lease were lost, or another leader had claimed the run, in between."""

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        return []


def test_a_run_now_the_store_refuses_to_claim_is_not_submitted() -> None:
    clock = FakeClock(START)
    store = RefusingStore(clock)
    store.publish([Schedule(name="hourly", task="t.hourly", trigger=IntervalTrigger("1h"))])
    store.request_run("hourly")

    result = _scheduler(store, clock, "leader-a").run_once()

    assert result.leader and result.submitted == 0
    [execution] = store.executions(name="hourly")
    assert execution.status is ExecutionStatus.CLAIMED and execution.fencing_token is None
