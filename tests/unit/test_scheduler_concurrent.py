"""A submitter that declares ``concurrent_submits`` gets its batch from several threads; the
loop's guarantees stay those of the serial path (deadline, one bookkeeping call per batch,
failures retried or final, outcomes in claim order)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import PermanentSubmitError
from goatbeat.core.model import ExecutionStatus, Occurrence, SubmitOutcome
from goatbeat.core.scheduler import IterationResult, Scheduler
from goatbeat.core.submit import submit_concurrency
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every, settings, statuses


class ConcurrentSubmitter(RecordingSubmitter):
    concurrent_submits = 3

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.threads: set[str] = set()
        # The first two submissions wait for each other: they only get past it if they run
        # at the same time (a serial scheduler would break the barrier after its timeout).
        self.barrier = threading.Barrier(2, timeout=10)
        self.calls = 0
        self.permanent: set[str] = set()

    def submit(self, occurrence: Occurrence) -> str | None:
        with self.lock:
            self.calls += 1
            first_two = self.calls <= 2
            self.threads.add(threading.current_thread().name)
        if first_two:
            self.barrier.wait()
        if occurrence.schedule_name in self.permanent:
            raise PermanentSubmitError(f"no task for {occurrence.schedule_name}")
        with self.lock:
            if self.on_submit is not None:
                self.on_submit(occurrence)
            self.submitted.append(occurrence)
        return f"task-{occurrence.execution_id}"


class CountingStore(MemoryStore):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.recorded: list[list[SubmitOutcome]] = []
        self.carried: list[int] = []  # per claim: the outcomes it was given to write

    def claim_due(self, *args: Any, **kwargs: Any) -> Any:
        self.carried.append(len(kwargs.get("record", ())))
        return super().claim_due(*args, **kwargs)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        self.recorded.append(list(outcomes))
        super().record_outcomes(outcomes)


def make(**kw: Any) -> tuple[Scheduler, CountingStore, ConcurrentSubmitter, FakeClock]:
    clock = FakeClock(START)
    store = CountingStore(clock)
    submitter = ConcurrentSubmitter()
    return (
        Scheduler(store, submitter, settings=settings(**kw), clock=clock),
        store,
        submitter,
        clock,
    )


def test_submit_concurrency_reads_the_optional_capability() -> None:
    assert submit_concurrency(ConcurrentSubmitter()) == 3
    assert submit_concurrency(RecordingSubmitter()) == 0
    for bad in (-2, True, "4", 2.5):
        holder = RecordingSubmitter()
        holder.concurrent_submits = bad  # type: ignore[attr-defined]
        assert submit_concurrency(holder) == 0


def test_a_batch_is_sent_from_several_threads_and_recorded_once_in_claim_order() -> None:
    sched, store, submitter, clock = make(batch_size=50)
    store.publish([every(f"s{i:03d}", 60) for i in range(120)])
    sched.run_once()
    clock.advance(60)
    result = sched.run_once()
    sched.close()
    assert result.claimed == 120 and result.submitted == 120
    assert len(submitter.threads) > 1
    assert sorted(submitter.keys) == sorted(set(submitter.keys)) and len(submitter.keys) == 120
    # One bookkeeping call per claim batch, outcomes in the order the batch was claimed.
    assert [len(batch) for batch in store.recorded] == [50, 50, 20]
    recorded_ids = [o.execution_id for batch in store.recorded for o in batch]
    assert recorded_ids == sorted(recorded_ids)
    assert all(s is ExecutionStatus.SUBMITTED for s, _ in statuses(store).values())
    # The first batch, sent while the second was claimed, is written by the third claim.
    assert store.carried[-3:] == [0, 0, 50]


def test_permanent_failures_are_final_and_the_rest_of_the_batch_goes_out() -> None:
    sched, store, submitter, clock = make()
    store.publish([every(f"s{i}", 60) for i in range(10)])
    submitter.permanent = {"s3", "s7"}
    sched.run_once()
    clock.advance(60)
    result = sched.run_once()
    sched.close()
    assert result.submitted == 8 and result.failed == 2
    failed = {k for k, (s, _) in statuses(store).items() if s is ExecutionStatus.SUBMIT_FAILED}
    assert {k.split(":")[0] for k in failed} == {"s3", "s7"}


def test_no_submission_starts_past_the_local_deadline() -> None:
    # ttl 30 s, renew every 10 s: the lease is trusted for 20 s after it was requested.
    sched, store, submitter, clock = make()
    store.publish([every(f"s{i:02d}", 100) for i in range(40)])
    sched.run_once()
    clock.advance(100)
    submitter.on_submit = lambda occ: clock.advance(1)  # each submission takes 1 s
    result = sched.run_once()
    # Every submission checks the deadline first: at most the ones already in flight when it
    # passed (one per thread) complete after it.
    assert 20 <= result.submitted <= 20 + submitter.concurrent_submits
    left = [k for k, (s, _) in statuses(store).items() if s is ExecutionStatus.CLAIMED]
    assert len(left) == 40 - result.submitted
    submitter.on_submit = None
    again = sched.run_once()
    sched.close()
    assert again.leader and again.resubmitted == len(left)
    assert sorted(submitter.keys[result.submitted :]) == sorted(left)


def _burst_held_until_claim(
    claim: int, count: int
) -> tuple[IterationResult, CountingStore, RecordingSubmitter]:
    """A burst of ``count`` due schedules, batches of 10, one submission thread, whose first
    submission waits until the store has seen its ``claim``-th claim (the first iteration
    claims once): a scheduler that waits for a batch's sending before claiming that far
    would never let it go (PermanentSubmitError after 10 s)."""
    clock = FakeClock(START)
    claims = 0
    reached = threading.Event()

    class WatchedStore(CountingStore):
        def claim_due(self, *args: Any, **kwargs: Any) -> Any:
            nonlocal claims
            claims += 1
            if claims == claim:
                reached.set()
            return super().claim_due(*args, **kwargs)

    class HeldSubmitter(RecordingSubmitter):
        concurrent_submits = 1
        held = False

        def submit(self, occurrence: Occurrence) -> str | None:
            if not self.held:
                self.held = True  # the first submission of the burst waits, once
                if not reached.wait(timeout=10):
                    raise PermanentSubmitError(f"claim {claim} did not come meanwhile")
            return super().submit(occurrence)

    store = WatchedStore(clock)
    submitter = HeldSubmitter()
    sched = Scheduler(store, submitter, settings=settings(batch_size=10), clock=clock)
    store.publish([every(f"s{i:02d}", 60) for i in range(count)])
    sched.run_once()
    clock.advance(60)
    result = sched.run_once()
    sched.close()
    return result, store, submitter


def test_the_next_batch_is_claimed_while_the_current_one_is_sent() -> None:
    # The first occurrence of the burst goes out only once the next claim started, which a
    # scheduler that claims after sending would never do.
    result, store, submitter = _burst_held_until_claim(3, 25)
    assert result.submitted == 25 and result.failed == 0
    assert [len(batch) for batch in store.recorded] == [10, 10, 5]
    assert submitter.keys == sorted(submitter.keys, key=lambda k: (k.split(":", 1)[1], k))


def test_a_batch_is_recorded_while_the_next_one_is_sent() -> None:
    clock = FakeClock(START)
    second_sending = threading.Event()
    waited: list[bool] = []

    class WatchedStore(CountingStore):
        def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
            if not self.recorded:
                # The first batch is recorded only once the second one is going out, which a
                # scheduler that records before it sends the next batch would never see.
                waited.append(second_sending.wait(timeout=10))
            super().record_outcomes(outcomes)

    class WatchedSubmitter(RecordingSubmitter):
        concurrent_submits = 1

        def submit(self, occurrence: Occurrence) -> str | None:
            if len(self.submitted) == 10:
                second_sending.set()
            return super().submit(occurrence)

    store = WatchedStore(clock)
    submitter = WatchedSubmitter()
    sched = Scheduler(store, submitter, settings=settings(batch_size=10), clock=clock)
    store.publish([every(f"s{i:02d}", 60) for i in range(25)])
    sched.run_once()
    clock.advance(60)
    result = sched.run_once()
    sched.close()
    assert waited == [True]
    assert result.submitted == 25 and result.failed == 0
    assert [len(batch) for batch in store.recorded] == [10, 10, 5]
    recorded_ids = [o.execution_id for batch in store.recorded for o in batch]
    assert recorded_ids == sorted(recorded_ids)


def test_with_one_submission_thread_a_third_batch_is_claimed_while_the_first_is_sent() -> None:
    """The thread's queue holds the next batch, so it goes from one batch to the next while
    the loop claims another: the loop takes a batch back only two batches later."""
    result, store, submitter = _burst_held_until_claim(4, 35)
    assert result.submitted == 35 and result.failed == 0
    assert len(submitter.keys) == len(set(submitter.keys)) == 35
    # Recorded once each, in claim order; the first batch by the fourth claim of the burst.
    assert [len(batch) for batch in store.recorded] == [10, 10, 10, 5]
    recorded_ids = [o.execution_id for batch in store.recorded for o in batch]
    assert recorded_ids == sorted(recorded_ids)
    assert store.carried[-4:] == [0, 0, 0, 10]
    assert all(s is ExecutionStatus.SUBMITTED for s, _ in statuses(store).values())
