"""Exactly when goatbeat dispatches an occurrence twice (README, "Guarantees").

Each case the README lists, played deterministically on the real MemoryStore and a FakeClock:
the scheduler loop's own behaviour, not a backend's. A crash between submission and
bookkeeping is played by real processes in tests/integration/test_multi_scheduler.py; a
database that vanishes between the two, in tests/integration/test_db_outage.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import RetryableSubmitError, StoreError
from goatbeat.core.model import ExecutionStatus, Occurrence, SubmitOutcome
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every, make


class FailingBookkeeping(MemoryStore):
    """record_outcomes fails once, after the submissions it would record were made."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.failures = 1

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreError("record_outcomes: connection lost")
        super().record_outcomes(outcomes)


def test_a_database_error_between_submission_and_bookkeeping_resubmits_the_same_key() -> None:
    clock = FakeClock(START)
    store = FailingBookkeeping(clock)
    store.publish([every("a", 60)])
    submitter = RecordingSubmitter()
    sched = make(store, submitter, clock)
    clock.advance(60)
    failed = sched.run_once()
    assert failed.error is not None and submitter.keys == ["a:2026-03-01T12:01:00Z"]
    again = sched.run_once()  # the same scheduler, a moment later
    assert again.resubmitted == 1
    assert submitter.keys == ["a:2026-03-01T12:01:00Z"] * 2  # dispatched twice, one key
    (execution,) = store.executions()
    assert execution.status is ExecutionStatus.SUBMITTED


def test_a_leader_blocked_in_the_broker_past_its_deadline_duplicates_the_standbys_resubmission():
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every("a", 60)])
    sent: list[tuple[str, str]] = []
    leader_submitter, standby_submitter = RecordingSubmitter(), RecordingSubmitter()
    leader = make(store, leader_submitter, clock, scheduler_id="leader")
    standby = make(store, standby_submitter, clock, scheduler_id="standby")
    leader.run_once()
    standby.run_once()
    clock.advance(60)

    def broker_hangs(occ: Occurrence) -> None:
        # The leader passed its deadline check and is inside the broker call; it hangs past
        # the lease, the standby takes over and resubmits the row still 'claimed'.
        leader_submitter.on_submit = None
        clock.advance(31)
        taken = standby.run_once()
        assert taken.became_leader and taken.resubmitted == 1
        sent.append(("leader", occ.idempotency_key))  # ...then the broker accepts it anyway

    leader_submitter.on_submit = broker_hangs
    leader.run_once()
    sent.extend(("standby", key) for key in standby_submitter.keys)
    counts = Counter(key for _, key in sent)
    assert counts == {"a:2026-03-01T12:01:00Z": 2}
    assert sorted(who for who, _ in sent) == ["leader", "standby"]


def test_a_submission_that_failed_after_the_broker_accepted_it_is_retried_with_the_same_key():
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every("a", 60)])
    broker: list[str] = []  # what reached the broker
    submitter = RecordingSubmitter()

    def accepted_then_lost(occ: Occurrence) -> None:
        broker.append(occ.idempotency_key)
        if len(broker) == 1:  # the broker took it, but its answer was lost
            raise RetryableSubmitError("timed out waiting for the broker's answer")

    submitter.on_submit = accepted_then_lost
    sched = make(store, submitter, clock)
    clock.advance(60)
    assert sched.run_once().retrying == 1
    clock.advance(1)  # the first retry comes 1 s later
    assert sched.run_once().resubmitted == 1
    assert broker == ["a:2026-03-01T12:01:00Z"] * 2
