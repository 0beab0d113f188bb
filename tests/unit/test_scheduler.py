"""The scheduler loop against the real MemoryStore, a FakeClock and a recording submitter."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.clock import FakeClock, SystemClock
from goatbeat.core.config import Settings
from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError, StoreError
from goatbeat.core.model import (
    ClaimResult,
    ExecutionKind,
    ExecutionStatus,
    LeaseGrant,
    MisfirePolicy,
    Occurrence,
    Schedule,
    SubmitOutcome,
)
from goatbeat.core.scheduler import IterationResult, Scheduler
from goatbeat.core.submission import retry_delay
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class RecordingSubmitter(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.submitted: list[Occurrence] = []
        self.failures: list[BaseException] = []  # raised, in order, before succeeding
        self.on_submit: Callable[[Occurrence], None] | None = None

    @property
    def keys(self) -> list[str]:
        return [o.idempotency_key for o in self.submitted]

    def submit(self, occurrence: Occurrence) -> str | None:
        if self.on_submit is not None:
            self.on_submit(occurrence)
        if self.failures:
            raise self.failures.pop(0)
        self.submitted.append(occurrence)
        return f"task-{occurrence.execution_id}"


class FlakyStore(MemoryStore):
    """A real MemoryStore whose named methods raise StoreError a given number of times."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.fail: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.carried: list[int] = []  # per claim: how many outcomes it was given to write
        self.recorded: list[int] = []  # per record_outcomes call: how many outcomes

    def _maybe_fail(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.fail.get(method, 0) > 0:
            self.fail[method] -= 1
            raise StoreError(f"{method}: connection lost")

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        self._maybe_fail("acquire_lease")
        return super().acquire_lease(name, holder, ttl)

    def claim_due(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None = None,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        self.carried.append(len(record))
        self._maybe_fail("claim_due")
        return super().claim_due(
            lease, scheduler_id=scheduler_id, limit=limit, now=now, record=record
        )

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        self.recorded.append(len(outcomes))
        self._maybe_fail("record_outcomes")
        super().record_outcomes(outcomes)


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"scheduler_id": "s1", "max_submit_retries": 3}
    values.update(overrides)
    return Settings(**values)


def every(name: str, seconds: float, **kw: Any) -> Schedule:
    trigger = IntervalTrigger(seconds, allow_subsecond=seconds < 1)
    return Schedule(name=name, task=f"tasks.{name}", trigger=trigger, **kw)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> FlakyStore:
    return FlakyStore(clock)


@pytest.fixture
def submitter() -> RecordingSubmitter:
    return RecordingSubmitter()


def make(
    store: MemoryStore, submitter: RecordingSubmitter, clock: FakeClock, **kw: Any
) -> Scheduler:
    return Scheduler(store, submitter, settings=settings(**kw), clock=clock)


def statuses(store: MemoryStore) -> dict[str, tuple[ExecutionStatus, int]]:
    return {e.idempotency_key: (e.status, e.attempts) for e in store.executions(limit=1000)}


# -- claiming and submitting -------------------------------------------------------------------


def test_due_occurrences_are_claimed_submitted_and_recorded(store, submitter, clock):
    store.publish([every("a", 10), every("b", 15)])
    sched = make(store, submitter, clock)
    first = sched.run_once()
    assert first.leader and first.became_leader and first.submitted == 0

    clock.advance(15)
    result = sched.run_once()

    assert sorted(submitter.keys) == ["a:2026-03-01T12:00:10Z", "b:2026-03-01T12:00:15Z"]
    assert result.claimed == 2 and result.submitted == 2
    assert {k: s for k, (s, _) in statuses(store).items()} == {
        "a:2026-03-01T12:00:10Z": ExecutionStatus.SUBMITTED,
        "b:2026-03-01T12:00:15Z": ExecutionStatus.SUBMITTED,
    }
    # Nothing due any more: a second iteration at the same instant submits nothing new.
    assert sched.run_once().submitted == 0
    assert len(submitter.submitted) == 2


def test_every_occurrence_is_submitted_once_over_many_iterations(store, submitter, clock):
    store.publish([every("a", 1), every("b", 3)])
    sched = make(store, submitter, clock)
    for _ in range(30):
        sched.run_once()
        clock.advance(1)
    assert len(submitter.keys) == len(set(submitter.keys))
    assert sum(k.startswith("a:") for k in submitter.keys) == 29
    assert sum(k.startswith("b:") for k in submitter.keys) == 9


def test_claims_batch_after_batch_while_batches_come_back_full(store, submitter, clock):
    store.publish([every(f"s{i}", 10) for i in range(7)])
    sched = make(store, submitter, clock, batch_size=2)
    clock.advance(10)
    result = sched.run_once()
    assert result.claimed == 7 and result.submitted == 7
    # 2 + 2 + 2 + 1: the partial batch ends the loop, no extra empty claim.
    assert store.calls["claim_due"] == 4


def test_the_outcomes_of_a_full_batch_are_written_by_the_claim_that_follows(
    store, submitter, clock
):
    store.publish([every(f"s{i}", 10) for i in range(7)])
    sched = make(store, submitter, clock, batch_size=2)
    clock.advance(10)
    result = sched.run_once()
    assert result.claimed == 7 and result.submitted == 7
    # Each claim after the first writes the batch before it; the last batch, with no claim
    # after it, is recorded on its own before the iteration ends.
    assert store.carried == [0, 2, 2, 2]
    assert store.recorded[-1:] == [1]
    assert {s for s, _ in statuses(store).values()} == {ExecutionStatus.SUBMITTED}
    assert {n for _, n in statuses(store).values()} == {1}
    assert {store.get(f"s{i}").last_status for i in range(7)} == {"submitted"}
    assert sched.run_once().resubmitted == 0


def test_outcomes_left_to_a_claim_that_fails_are_recorded_anyway(store, submitter, clock):
    store.publish([every(f"s{i}", 10) for i in range(5)])
    sched = make(store, submitter, clock, batch_size=2)
    sched.run_once()
    clock.advance(10)
    # The second claim of the pass, the one given the first batch's outcomes, fails.
    real_claim = MemoryStore.claim_due
    calls = 0

    def second_fails(self: FlakyStore, *args: Any, **kwargs: Any) -> ClaimResult:
        nonlocal calls
        calls += 1
        if calls == 2:
            assert kwargs.get("record"), "the second claim carries the first batch's outcomes"
            raise StoreError("claim_due: connection lost")
        return real_claim(self, *args, **kwargs)

    store.claim_due = second_fails.__get__(store)  # type: ignore[method-assign]
    failed = sched.run_once()
    assert failed.error and failed.submitted == 2
    # The two sent before the failing claim are recorded all the same: never sent again.
    assert store.recorded == [2]
    sent = list(submitter.keys)
    assert len(sent) == 2
    assert {statuses(store)[k][0] for k in sent} == {ExecutionStatus.SUBMITTED}
    store.claim_due = real_claim.__get__(store)  # type: ignore[method-assign]
    later = sched.run_once()
    assert later.claimed == 3 and later.submitted == 3 and later.resubmitted == 0
    assert len(submitter.keys) == len(set(submitter.keys)) == 5


def test_a_store_without_the_record_parameter_gets_each_batch_recorded_alone(submitter, clock):
    class OlderStore(MemoryStore):
        """A store written before claim_due took ``record``."""

        def __init__(self, clock: FakeClock) -> None:
            super().__init__(clock)
            self.recorded: list[int] = []

        def claim_due(  # type: ignore[override]
            self, lease: LeaseGrant, *, scheduler_id: str, limit: int, now: datetime | None = None
        ) -> ClaimResult:
            return super().claim_due(lease, scheduler_id=scheduler_id, limit=limit, now=now)

        def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
            self.recorded.append(len(outcomes))
            super().record_outcomes(outcomes)

    older = OlderStore(clock)
    older.publish([every(f"s{i}", 10) for i in range(5)])
    sched = make(older, submitter, clock, batch_size=2)
    clock.advance(10)
    result = sched.run_once()
    assert result.error is None and result.submitted == 5
    assert older.recorded == [2, 2, 1]
    assert {s for s, _ in statuses(older).values()} == {ExecutionStatus.SUBMITTED}


def test_a_submitter_with_nothing_awaiting_the_bookkeeping_lets_the_next_claim_write_it(
    store, clock
):
    calls: list[str] = []

    class Idle(RecordingSubmitter):
        awaiting = False

        def awaits_bookkeeping(self) -> bool:
            return self.awaiting

        def after_bookkeeping(self) -> None:
            calls.append("after_bookkeeping")

    submitter = Idle()
    sched = make(store, submitter, clock, batch_size=2)
    store.publish([every(f"s{i}", 10) for i in range(5)])
    clock.advance(10)
    sched.run_once()
    # The claims wrote the first two batches; the last one was recorded on its own.
    assert store.carried == [0, 2, 2] and store.recorded == [2, 2, 1]
    assert calls == ["after_bookkeeping"]
    assert {s for s, _ in statuses(store).values()} == {ExecutionStatus.SUBMITTED}

    submitter.awaiting = True
    store.carried.clear()
    store.recorded.clear()
    clock.advance(10)
    sched.run_once()
    assert store.carried == [0, 0, 0] and store.recorded == [2, 2, 1]
    assert calls == ["after_bookkeeping"] * 4


def test_a_submitter_waiting_for_the_bookkeeping_gets_it_batch_by_batch(store, clock):
    seen: list[set[ExecutionStatus]] = []

    class Waiting(RecordingSubmitter):
        def after_bookkeeping(self) -> None:
            # Called once per batch, once that batch's outcomes are in the store.
            seen.append({s for s, _ in statuses(store).values()})

    sched = make(store, Waiting(), clock, batch_size=2)
    store.publish([every(f"s{i}", 10) for i in range(5)])
    clock.advance(10)
    sched.run_once()
    assert store.carried == [0, 0, 0] and store.recorded == [2, 2, 1]
    assert seen == [
        {ExecutionStatus.SUBMITTED},
        {ExecutionStatus.SUBMITTED},
        {ExecutionStatus.SUBMITTED},
    ]


def test_missed_occurrences_are_counted_and_logged(store, submitter, clock, caplog):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("often", 10, misfire=MisfirePolicy.SKIP)])
    sched = make(store, submitter, clock)
    sched.run_once()
    clock.advance(timedelta(hours=1))
    result = sched.run_once()
    assert result.missed > 0
    record = next(r for r in caplog.records if r.getMessage() == "occurrence.missed")
    assert record.goatbeat["missed"] == result.missed  # type: ignore[attr-defined]
    assert record.goatbeat["scheduler_id"] == "s1"  # type: ignore[attr-defined]


def test_the_missed_event_names_only_the_schedules_that_missed(store, submitter, clock, caplog):
    # #27 item 7: it named every schedule the batch claimed, and none that SKIP dropped.
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("often", 10, misfire=MisfirePolicy.SKIP), every("hourly", 3600)])
    sched = make(store, submitter, clock)
    sched.run_once()
    clock.advance(timedelta(hours=1))
    sched.run_once()
    record = next(r for r in caplog.records if r.getMessage() == "occurrence.missed")
    assert record.goatbeat["schedules"] == ["often"]  # type: ignore[attr-defined]


def test_submitted_event_carries_the_structured_fields(store, submitter, clock, caplog):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 10)])
    sched = make(store, submitter, clock)
    sched.run_once()
    clock.advance(12)
    sched.run_once()
    record = next(r for r in caplog.records if r.getMessage() == "occurrence.submitted")
    fields = record.goatbeat  # type: ignore[attr-defined]
    assert fields["schedule"] == "a"
    assert fields["idempotency_key"] == "a:2026-03-01T12:00:10Z"
    assert fields["scheduler_id"] == "s1"
    assert fields["fencing_token"] == sched.lease.grant.token
    assert fields["scheduled_at"] == START + timedelta(seconds=10)
    assert fields["lateness"] == pytest.approx(2.0)


def test_lateness_is_judged_by_the_stores_clock_not_a_skewed_host(store, submitter, clock, caplog):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 10)])

    class Skewed:
        def now(self) -> datetime:
            return clock.now() + timedelta(hours=5)

        def monotonic(self) -> float:
            return clock.monotonic()

    sched = Scheduler(store, submitter, settings=settings(), clock=Skewed())
    sched.run_once()
    clock.advance(12)
    sched.run_once()
    record = next(r for r in caplog.records if r.getMessage() == "occurrence.submitted")
    assert record.goatbeat["lateness"] == pytest.approx(2.0)  # type: ignore[attr-defined]


# -- submit failures ---------------------------------------------------------------------------


def test_retryable_failures_back_off_exponentially_then_become_submit_failed_past_the_grace(
    store, submitter, clock, caplog
):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 100, misfire_grace=timedelta(0))])
    sched = make(store, submitter, clock, max_submit_retries=2)
    sched.run_once()
    submitter.failures = [RetryableSubmitError("broker down")] * 3
    clock.advance(100)
    key = "a:2026-03-01T12:01:40Z"

    first = sched.run_once()
    assert first.retrying == 1 and first.failed == 0
    assert statuses(store)[key] == (ExecutionStatus.CLAIMED, 1)
    assert first.sleep == pytest.approx(retry_delay(1))

    clock.advance(0.5)  # inside the 1 s backoff: not retried yet
    assert sched.run_once().retrying == 0
    assert len(submitter.failures) == 2

    clock.advance(0.5)
    second = sched.run_once()
    assert second.retrying == 1
    assert statuses(store)[key] == (ExecutionStatus.CLAIMED, 2)
    assert second.sleep == pytest.approx(retry_delay(2)) == 2.0

    clock.advance(2)
    third = sched.run_once()
    assert third.failed == 1 and third.retrying == 0
    assert statuses(store)[key] == (ExecutionStatus.SUBMIT_FAILED, 3)
    execution = store.executions(name="a")[0]
    assert execution.error is not None and "broker down" in execution.error
    # Its grace (0 s) had run out: it is missed, and counted so.
    failed = [r for r in caplog.records if r.getMessage() == "occurrence.missed"]
    assert [r.goatbeat["idempotency_key"] for r in failed] == [key]  # type: ignore[attr-defined]
    assert store.get("a").missed_count == 1 and third.missed == 1

    clock.advance(60)
    assert sched.run_once().submitted == 0  # given up: never submitted again
    assert submitter.submitted == []


def test_an_unexpected_exception_is_retried_like_a_retryable_error(store, submitter, clock):
    store.publish([every("a", 100, misfire_grace=timedelta(0))])
    sched = make(store, submitter, clock)
    sched.run_once()
    submitter.failures = [ConnectionResetError("reset by peer")]
    clock.advance(100)
    assert sched.run_once().retrying == 1
    clock.advance(retry_delay(1))
    result = sched.run_once()
    assert result.submitted == 1 and result.resubmitted == 1
    assert statuses(store) == {"a:2026-03-01T12:01:40Z": (ExecutionStatus.SUBMITTED, 2)}


def test_permanent_error_is_final_at_once(store, submitter, clock):
    store.publish([every("a", 100, misfire_grace=timedelta(0))])
    sched = make(store, submitter, clock, max_submit_retries=5)
    sched.run_once()
    submitter.failures = [PermanentSubmitError("unknown task")]
    clock.advance(100)
    result = sched.run_once()
    assert result.failed == 1 and result.retrying == 0
    assert statuses(store) == {"a:2026-03-01T12:01:40Z": (ExecutionStatus.SUBMIT_FAILED, 1)}


def test_zero_retries_and_no_grace_make_the_first_failure_final(store, submitter, clock):
    store.publish([every("a", 100, misfire_grace=timedelta(0))])
    sched = make(store, submitter, clock, max_submit_retries=0)
    sched.run_once()
    submitter.failures = [RetryableSubmitError("timeout")]
    clock.advance(100)
    assert sched.run_once().failed == 1


def test_retry_delay_doubles_and_is_capped():
    assert [retry_delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert retry_delay(30) == 60.0


# -- leadership --------------------------------------------------------------------------------


def test_claimed_rows_left_by_a_dead_leader_are_resubmitted_with_the_same_key(
    store, submitter, clock, caplog
):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 10)])
    dead = store.acquire_lease("scheduler", "dead", timedelta(seconds=30))
    assert dead is not None
    clock.advance(10)
    claimed = store.claim_due(dead, scheduler_id="dead", limit=10)  # ...then it crashed
    assert [o.idempotency_key for o in claimed.occurrences] == ["a:2026-03-01T12:00:10Z"]

    sched = make(store, submitter, clock)
    assert not sched.run_once().leader  # the dead leader's lease has not expired yet
    assert submitter.submitted == []

    clock.advance(31)
    result = sched.run_once()
    assert result.became_leader and result.resubmitted == 1
    assert submitter.keys[0] == "a:2026-03-01T12:00:10Z"
    assert statuses(store)["a:2026-03-01T12:00:10Z"] == (ExecutionStatus.SUBMITTED, 1)
    resubmitted = [r for r in caplog.records if r.getMessage() == "occurrence.resubmitted"]
    assert [r.goatbeat["idempotency_key"] for r in resubmitted] == [  # type: ignore[attr-defined]
        "a:2026-03-01T12:00:10Z"
    ]


def test_a_full_page_backing_off_does_not_hold_back_the_rows_after_it(store, submitter, clock):
    # batch_size 3: the three oldest claimed rows fill a page and wait for their retry; a
    # manual run requested after them must still go out at once.
    store.publish([every(f"s{i}", 100) for i in range(3)] + [every("m", 3600)])

    def broker_refuses_the_s_tasks(occ: Occurrence) -> None:
        if occ.schedule_name.startswith("s"):
            raise RetryableSubmitError(f"queue of {occ.schedule_name} is down")

    submitter.on_submit = broker_refuses_the_s_tasks
    sched = make(store, submitter, clock, batch_size=3)
    clock.advance(100)
    assert sched.run_once().retrying == 3
    manual = store.request_run("m")
    clock.advance(0.5)  # the three are inside their 1 s backoff
    result = sched.run_once()
    assert (result.submitted, result.retrying) == (1, 0)
    assert submitter.keys == [manual.idempotency_key]
    assert statuses(store)[manual.idempotency_key][0] is ExecutionStatus.SUBMITTED


def test_a_new_reign_resubmits_a_row_whose_retry_is_due(store, submitter, clock):
    store.publish([every("a", 100)])
    sched = make(store, submitter, clock)
    sched.run_once()
    submitter.failures = [RetryableSubmitError("down")]
    clock.advance(100)
    assert sched.run_once().retrying == 1
    # The lease is taken away and given back: a new reign starts with a new token.
    grant = sched.lease.grant
    assert grant is not None
    store.release_lease("scheduler", sched.instance, grant.token)
    assert store.acquire_lease("scheduler", "other", timedelta(seconds=1)) is not None
    clock.advance(0.1)
    assert sched.run_once().refused
    clock.advance(1)
    result = sched.run_once()
    assert result.became_leader and result.resubmitted == 1


def test_standby_dispatches_nothing_and_sleeps_until_the_lease_could_expire(
    store, submitter, clock
):
    store.publish([every("a", 5)])
    leader = make(store, submitter, clock, scheduler_id="leader")
    other = RecordingSubmitter()
    standby = make(store, other, clock, scheduler_id="standby")
    assert leader.run_once().leader
    clock.advance(5)
    result = standby.run_once()
    assert result == IterationResult(leader=False, sleep=result.sleep)
    assert result.sleep == pytest.approx(25.0, abs=0.1)  # 30 s ttl granted 5 s ago
    assert other.submitted == []
    assert leader.run_once().submitted == 1
    assert other.submitted == []


def test_standby_takes_over_when_the_leader_stops_renewing(store, submitter, clock):
    store.publish([every("a", 5)])
    leader = make(store, RecordingSubmitter(), clock, scheduler_id="leader")
    standby = make(store, submitter, clock, scheduler_id="standby")
    leader.run_once()
    standby.run_once()
    clock.advance(31)  # the leader froze: no renewal
    result = standby.run_once()
    assert result.leader and result.became_leader
    # Everything the frozen leader did not claim is still within the 60 s grace: all run.
    assert submitter.keys == [f"a:2026-03-01T12:00:{s:02d}Z" for s in range(5, 31, 5)]


def test_released_lease_is_taken_over_at_once(store, submitter, clock):
    leader = make(store, RecordingSubmitter(), clock, scheduler_id="leader")
    standby = make(store, submitter, clock, scheduler_id="standby")
    leader.run_once()
    assert not standby.run_once().leader
    assert leader.release()
    assert standby.run_once().leader


def test_no_dispatch_past_the_local_deadline(store, submitter, clock):
    # ttl 30 s, renew every 10 s: the lease is trusted for 20 s after it was requested.
    store.publish([every(f"s{i}", 100) for i in range(5)])
    sched = make(store, submitter, clock)
    sched.run_once()
    clock.advance(100)
    submitter.on_submit = lambda occ: clock.advance(8)  # each submission takes 8 s
    result = sched.run_once()
    # Submissions start at +0, +8, +16 s; at +24 s the deadline (20 s) has passed.
    assert result.claimed == 5 and result.submitted == 3
    assert len(submitter.submitted) == 3
    left = [k for k, (s, _) in statuses(store).items() if s is ExecutionStatus.CLAIMED]
    assert len(left) == 2
    # Next iteration renews first, then the left-over claims go out (same keys).
    submitter.on_submit = None
    again = sched.run_once()
    assert again.leader and again.resubmitted == 2
    assert sorted(submitter.keys[3:]) == sorted(left)


def test_a_refused_claim_drops_the_lease(store, submitter, clock, caplog):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 10)])
    sched = make(store, submitter, clock)
    sched.run_once()
    grant = sched.lease.grant
    assert grant is not None
    # Somebody else got the lease behind our back (we still trust our local deadline).
    store.release_lease("scheduler", sched.instance, grant.token)
    assert store.acquire_lease("scheduler", "thief", timedelta(seconds=30)) is not None
    clock.advance(5)  # renewal not due yet: the claim itself finds out
    result = sched.run_once()
    assert result.refused and not result.leader and result.sleep < 0.1
    assert submitter.submitted == []
    assert sched.lease.grant is None
    assert any(r.getMessage() == "claim.refused" for r in caplog.records)
    assert not sched.run_once().leader  # the thief's lease is valid: standby


# -- store failures ----------------------------------------------------------------------------


def test_a_store_error_is_logged_and_backed_off_never_raised(store, submitter, clock, caplog):
    caplog.set_level(logging.INFO, logger="goatbeat")
    store.publish([every("a", 10)])
    sched = make(store, submitter, clock)
    store.fail["acquire_lease"] = 2
    first = sched.run_once()
    second = sched.run_once()
    assert first.error and not first.leader
    assert 0 < first.sleep < second.sleep  # growing backoff
    errors = [r for r in caplog.records if r.getMessage() == "scheduler.error"]
    assert len(errors) == 2 and errors[0].goatbeat["stage"] == "lease"  # type: ignore[attr-defined]
    clock.advance(10)
    third = sched.run_once()
    assert third.leader and third.submitted == 1 and third.error is None


def test_a_store_error_while_claiming_drops_the_lease_locally(store, submitter, clock):
    store.publish([every("a", 10)])
    sched = make(store, submitter, clock)
    sched.run_once()
    store.fail["claim_due"] = 1
    clock.advance(10)
    result = sched.run_once()
    assert result.error and sched.lease.grant is None
    after = sched.run_once()
    assert after.leader and after.submitted == 1


# -- manual runs and sleeping ------------------------------------------------------------------


def test_a_manual_run_request_is_submitted_on_the_next_iteration(store, submitter, clock):
    store.publish([every("a", 3600)])
    sched = make(store, submitter, clock)
    sched.run_once()
    execution = store.request_run("a")
    result = sched.run_once()
    assert result.submitted == 1
    assert submitter.submitted[0].kind is ExecutionKind.MANUAL
    assert submitter.keys == [execution.idempotency_key]
    assert statuses(store)[execution.idempotency_key][0] is ExecutionStatus.SUBMITTED


def test_leader_sleeps_until_the_next_due_instant(store, submitter, clock):
    store.publish([every("a", 5)])
    sched = make(store, submitter, clock, claim_ahead=timedelta(0))
    assert sched.run_once().sleep == pytest.approx(5.0)
    clock.advance(2)
    assert sched.run_once().sleep == pytest.approx(3.0)


def test_leader_wakes_claim_ahead_before_the_next_due_instant(store, submitter, clock):
    store.publish([every("a", 5)])
    sched = make(store, submitter, clock)  # claim_ahead 250 ms by default
    assert sched.run_once().sleep == pytest.approx(4.75)
    clock.advance(2)
    assert sched.run_once().sleep == pytest.approx(2.75)


def test_leader_sleep_is_bounded_by_renewal_and_max_sleep(store, submitter, clock):
    store.publish([every("rare", 3600)])
    sched = make(store, submitter, clock)
    assert sched.run_once().sleep == pytest.approx(10.0)  # lease renewal
    short = make(MemoryStore(clock), submitter, clock, max_sleep=timedelta(seconds=3))
    assert short.run_once().sleep == pytest.approx(3.0)  # nothing at all: max_sleep


# -- the loop ----------------------------------------------------------------------------------


def test_run_stops_on_request_and_releases_the_lease():
    store = MemoryStore(SystemClock())
    store.publish([every("a", 0.05)])
    submitter = RecordingSubmitter()
    stop = threading.Event()
    sched = Scheduler(store, submitter, settings=settings())
    submitter.on_submit = lambda occ: stop.set() if len(submitter.submitted) >= 2 else None
    thread = threading.Thread(target=sched.run, kwargs={"stop": stop})
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(submitter.submitted) >= 2
    lease = store.read_lease("scheduler")
    assert lease is not None and lease[3]  # released: expired by the store's clock
    assert sched.lease.grant is None


def test_a_large_burst_is_summarised_in_one_info_record(store, submitter, clock, caplog):
    from goatbeat.core.submission import LOG_EACH_LIMIT

    caplog.set_level(logging.INFO, logger="goatbeat")
    count = LOG_EACH_LIMIT + 20
    store.publish([every(f"s{i:03d}", 60) for i in range(count)])
    sched = make(store, submitter, clock, batch_size=1000)
    sched.run_once()
    clock.advance(60)
    assert sched.run_once().submitted == count
    submitted = [r for r in caplog.records if r.getMessage() == "occurrence.submitted"]
    assert len(submitted) == 1 and submitted[0].levelno == logging.INFO
    summary = submitted[0].goatbeat  # type: ignore[attr-defined]
    assert summary["count"] == count and summary["schedules"] == count
    assert summary["first_key"] == submitter.keys[0]
    assert summary["last_key"] == submitter.keys[-1]
    assert summary["scheduler_id"] == "s1"

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="goatbeat")
    clock.advance(60)
    sched.run_once()
    each = [
        r
        for r in caplog.records
        if r.getMessage() == "occurrence.submitted" and r.levelno == logging.DEBUG
    ]
    assert len(each) == count  # every occurrence stays observable at DEBUG


def test_more_pending_rows_than_a_batch_are_all_resubmitted_in_one_iteration(
    store, submitter, clock
):
    store.publish([every(f"s{i}", 10) for i in range(5)])
    dead = store.acquire_lease("scheduler", "dead", timedelta(seconds=30))
    assert dead is not None
    clock.advance(10)
    assert len(store.claim_due(dead, scheduler_id="dead", limit=10).occurrences) == 5
    clock.advance(31)
    sched = make(store, submitter, clock, batch_size=2)
    result = sched.run_once()
    assert result.resubmitted == 5
    # The left-over claims go out first, before anything newly due.
    assert sorted(submitter.keys[:5]) == [f"s{i}:2026-03-01T12:00:10Z" for i in range(5)]


def test_an_unexpected_error_in_the_loop_is_logged_and_the_loop_goes_on(clock, caplog):
    class BrokenOnce(MemoryStore):
        broken = True

        def next_due_at(self) -> datetime | None:
            if self.broken:
                self.broken = False
                raise RuntimeError("bug in a store")
            return super().next_due_at()

    store = BrokenOnce(SystemClock())
    store.publish([every("a", 0.05)])
    submitter = RecordingSubmitter()
    stop = threading.Event()
    sched = Scheduler(store, submitter, settings=settings(max_sleep=timedelta(milliseconds=50)))
    submitter.on_submit = lambda occ: stop.set()
    caplog.set_level(logging.INFO, logger="goatbeat")
    thread = threading.Thread(target=sched.run, kwargs={"stop": stop})
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    errors = [r for r in caplog.records if r.getMessage() == "scheduler.error"]
    assert errors and errors[0].exc_info is not None
    assert submitter.submitted  # it kept going after the error


def test_a_standby_logs_a_heartbeat_at_debug_each_iteration(store, submitter, clock, caplog):
    caplog.set_level(logging.DEBUG, logger="goatbeat")
    leader = Scheduler(store, submitter, settings=settings(scheduler_id="leader"), clock=clock)
    standby = Scheduler(store, submitter, settings=settings(scheduler_id="standby"), clock=clock)
    assert leader.run_once().leader
    for _ in range(3):
        assert not standby.run_once().leader
        clock.advance(1)
    standing = [
        r
        for r in caplog.records
        if r.getMessage() == "lease.standby" and r.scheduler_id == "standby"  # type: ignore[attr-defined]
    ]
    # Once at INFO when it becomes a standby (with the holder), then a DEBUG heartbeat each
    # iteration, so an operator at DEBUG sees the standby is alive.
    assert [r.levelname for r in standing] == ["INFO", "DEBUG", "DEBUG"]
    assert standing[0].holder == "leader"  # type: ignore[attr-defined]
    assert [r.iterations for r in standing[1:]] == [2, 3]  # type: ignore[attr-defined]
