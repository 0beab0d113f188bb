"""Submit retries under a broker outage (#13 item 2): an occurrence is retried until its own
misfire grace runs out, then it is missed (``submit_failed``, counted in ``missed_count``,
logged); the backoff lives in the execution row, so store errors and failovers keep it.

The loop runs against the real MemoryStore and a FakeClock; the broker is a submitter that
refuses everything until told otherwise."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import parse_settings
from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError, StoreError
from goatbeat.core.model import ExecutionStatus, LeaseGrant, MisfirePolicy, Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Broker(AcceptingSubmitter):
    """Down until ``up_at`` (wall clock of the FakeClock); remembers when each try came."""

    name: ClassVar[str] = "broker"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.up_at: datetime | None = None  # None: down for good
        self.permanent = False
        self.tries: list[tuple[str, datetime]] = []
        self.accepted: list[str] = []

    def submit(self, occurrence: Occurrence) -> str | None:
        now = self.clock.now()
        self.tries.append((occurrence.idempotency_key, now))
        if self.permanent:
            raise PermanentSubmitError("no such task")
        if self.up_at is None or now < self.up_at:
            raise RetryableSubmitError("Connection refused")
        self.accepted.append(occurrence.idempotency_key)
        return "task-id"

    def tries_of(self, key: str) -> list[datetime]:
        return [at for k, at in self.tries if k == key]


class FlakyStore(MemoryStore):
    """A real MemoryStore whose lease and pending reads fail while ``down`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.down = False

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        if self.down:
            raise StoreError("acquire_lease: connection lost")
        return super().acquire_lease(name, holder, ttl)

    def pending(self, *, limit: int, exclude: Any = ()) -> list[Occurrence]:
        if self.down:
            raise StoreError("pending: connection lost")
        return super().pending(limit=limit, exclude=exclude)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> FlakyStore:
    return FlakyStore(clock)


@pytest.fixture
def broker(clock: FakeClock) -> Broker:
    return Broker(clock)


def scheduler(store: MemoryStore, broker: Broker, clock: FakeClock, **kw: Any) -> Scheduler:
    values: dict[str, Any] = {"scheduler_id": "s1", "max_submit_retries": 5, "max_sleep": "60s"}
    values.update(kw)
    return Scheduler(store, broker, settings=parse_settings(values), clock=clock)


def hourly(name: str, **kw: Any) -> Schedule:
    return Schedule(name=name, task=f"tasks.{name}", trigger=IntervalTrigger("1h"), **kw)


def run_until(sched: Scheduler, clock: FakeClock, until: datetime) -> None:
    """Iterate as :meth:`Scheduler.run` would, sleeping what each iteration asks, until
    ``until`` (bounded: the loop must not spin)."""
    for _ in range(10_000):
        if clock.now() >= until:
            return
        result = sched.run_once()
        clock.advance(max(result.sleep, 0.001))
    raise AssertionError("the loop spun")


def execution(store: MemoryStore, key: str) -> Any:
    return next(e for e in store.executions(limit=1000) if e.idempotency_key == key)


FIRST = "a:2026-03-01T13:00:00Z"


def test_an_outage_longer_than_the_retry_budget_loses_nothing_within_the_grace(
    store, broker, clock
):
    # run_all with 600 s of grace: the occurrence is owed for ten minutes. The broker is down
    # for five; the old fixed budget (6 tries in ~31 s) made it submit_failed for good.
    store.publish([hourly("a", misfire=MisfirePolicy.RUN_ALL, misfire_grace=timedelta(minutes=10))])
    sched = scheduler(store, broker, clock)
    sched.run_once()
    broker.up_at = START + timedelta(hours=1, minutes=5)
    run_until(sched, clock, START + timedelta(hours=1, minutes=12))

    row = execution(store, FIRST)
    assert row.status is ExecutionStatus.SUBMITTED
    assert broker.accepted == [FIRST]
    assert row.attempts > 6
    assert store.get("a").missed_count == 0
    tries = broker.tries_of(FIRST)
    gaps = [(b - a).total_seconds() for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps == sorted(gaps)  # the backoff only grows...
    assert max(gaps) <= 60  # ...up to its cap


def test_an_occurrence_whose_grace_runs_out_is_missed_counted_and_logged(
    store, broker, clock, caplog
):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([hourly("a", misfire_grace=timedelta(minutes=2))])
    sched = scheduler(store, broker, clock)
    sched.run_once()
    run_until(sched, clock, START + timedelta(hours=1, minutes=10))

    row = execution(store, FIRST)
    assert row.status is ExecutionStatus.SUBMIT_FAILED
    assert row.error is not None and "grace" in row.error and "Connection refused" in row.error
    schedule = store.get("a")
    assert schedule.missed_count == 1
    assert schedule.last_status == "missed"
    tries = broker.tries_of(FIRST)
    due = START + timedelta(hours=1)
    # Retried until the grace ran out, the last try at its very end, never after.
    assert tries[-1] == due + timedelta(minutes=2)
    assert len(tries) > 6
    missed = [r for r in caplog.records if r.getMessage() == "occurrence.missed"]
    assert [r.goatbeat["idempotency_key"] for r in missed] == [FIRST]  # type: ignore[attr-defined]
    assert missed[0].levelno == logging.ERROR  # a run was lost, not planned away


def test_max_submit_retries_still_applies_where_the_grace_is_shorter(store, broker, clock):
    store.publish([hourly("a", misfire_grace=timedelta(0))])
    sched = scheduler(store, broker, clock, max_submit_retries=2)
    sched.run_once()
    run_until(sched, clock, START + timedelta(hours=1, minutes=1))
    row = execution(store, FIRST)
    assert (row.status, row.attempts) == (ExecutionStatus.SUBMIT_FAILED, 3)
    assert store.get("a").missed_count == 1


def test_a_permanent_error_still_fails_at_once_and_is_not_missed(store, broker, clock):
    store.publish([hourly("a", misfire_grace=timedelta(minutes=10))])
    broker.permanent = True
    sched = scheduler(store, broker, clock)
    sched.run_once()
    run_until(sched, clock, START + timedelta(hours=1, minutes=1))
    row = execution(store, FIRST)
    assert (row.status, row.attempts) == (ExecutionStatus.SUBMIT_FAILED, 1)
    assert store.get("a").missed_count == 0
    assert store.get("a").last_status == "submit_failed"


def test_store_errors_do_not_reset_the_backoff(store, broker, clock):
    store.publish([hourly("a", misfire_grace=timedelta(minutes=10))])
    sched = scheduler(store, broker, clock, lease_ttl="30s", lease_renew_interval="10s")
    sched.run_once()
    clock.set(START + timedelta(hours=1))
    run_until(sched, clock, START + timedelta(hours=1, seconds=20))
    tried = len(broker.tries_of(FIRST))
    assert tried >= 4
    # The database goes away for a few iterations, then comes back: the scheduler drops and
    # re-takes its lease. The retry that was due 2**(n-1) s after the last try stays due then.
    for _ in range(3):
        store.down = True
        result = sched.run_once()
        assert result.error is not None
        store.down = False
        result = sched.run_once()
        clock.advance(0.5)
    tries = broker.tries_of(FIRST)
    gaps = [(b - a).total_seconds() for a, b in zip(tries, tries[1:], strict=False)]
    assert gaps == sorted(gaps), gaps


def test_a_new_leader_keeps_the_backoff_of_the_old_one(store, broker, clock):
    store.publish([hourly("a", misfire_grace=timedelta(minutes=10))])
    old = scheduler(store, broker, clock)
    old.run_once()
    clock.set(START + timedelta(hours=1))
    run_until(old, clock, START + timedelta(hours=1, seconds=20))
    # Tried at +0, +1, +3, +7 and +15 s; the row says: next try at +31 s.
    assert execution(store, FIRST).attempts == 5
    assert old.release()  # a graceful handover: the standby leads at once
    new = scheduler(
        store, broker, clock, scheduler_id="s2", lease_ttl="60s", lease_renew_interval="20s"
    )
    result = new.run_once()
    assert result.became_leader
    assert len(broker.tries_of(FIRST)) == 5  # not retried early by the new leader
    assert result.sleep == pytest.approx(11.0)  # it wakes for the retry the old one set
    run_until(new, clock, START + timedelta(hours=1, seconds=40))
    assert broker.tries_of(FIRST)[5] == START + timedelta(hours=1, seconds=31)


def test_a_manual_run_gets_the_schedules_grace_from_its_request(store, broker, clock):
    store.publish([hourly("a", misfire_grace=timedelta(minutes=3))])
    sched = scheduler(store, broker, clock)
    sched.run_once()
    clock.advance(600)
    run = store.request_run("a")
    run_until(sched, clock, START + timedelta(minutes=20))
    row = execution(store, run.idempotency_key)
    assert row.status is ExecutionStatus.SUBMIT_FAILED
    tries = broker.tries_of(run.idempotency_key)
    assert tries[-1] == run.scheduled_at + timedelta(minutes=3)
    assert store.get("a").missed_count == 1
