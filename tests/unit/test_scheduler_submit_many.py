"""A submitter with ``submit_many`` gets its occurrences in chunks of ``SUBMIT_MANY_CHUNK``; the
loop's guarantees stay those of one-by-one submission: order, per-occurrence outcomes, the local
deadline checked before each chunk, one bookkeeping call per batch."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError
from goatbeat.core.model import ExecutionStatus, Occurrence
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.submit import SUBMIT_MANY_CHUNK, many_submitter
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter, every, settings, statuses


class ManySubmitter(RecordingSubmitter):
    name: ClassVar[str] = "many"

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.chunks: list[list[str]] = []
        self.permanent: set[str] = set()
        self.retryable: set[str] = set()
        self.raise_on_call: Exception | None = None
        self.short_answer = False
        self.chunk_cost = 0.0  # seconds each call takes on the fake clock

    def submit(self, occurrence: Occurrence) -> str | None:
        raise AssertionError("the scheduler must use submit_many")

    def submit_many(self, occurrences: Sequence[Occurrence]) -> list[str | None | Exception]:
        self.chunks.append([o.schedule_name for o in occurrences])
        self.clock.advance(self.chunk_cost)
        if self.raise_on_call is not None:
            raise self.raise_on_call
        answers: list[str | None | Exception] = []
        for occ in occurrences:
            if occ.schedule_name in self.permanent:
                answers.append(PermanentSubmitError(f"no task {occ.schedule_name}"))
            elif occ.schedule_name in self.retryable:
                answers.append(RetryableSubmitError(f"broker busy for {occ.schedule_name}"))
            else:
                self.submitted.append(occ)
                answers.append(f"task-{occ.execution_id}")
        return answers[:-1] if self.short_answer else answers


def setup(n: int, **kw: Any) -> tuple[Scheduler, MemoryStore, ManySubmitter, FakeClock]:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every(f"s{i:03d}", 60) for i in range(n)])
    submitter = ManySubmitter(clock)
    sched = Scheduler(store, submitter, settings=settings(**kw), clock=clock)
    clock.advance(60)  # everything due at once
    return sched, store, submitter, clock


def test_many_submitter_is_found_only_when_callable() -> None:
    assert many_submitter(ManySubmitter(FakeClock(START))) is not None
    assert many_submitter(RecordingSubmitter()) is None

    class NotCallable(RecordingSubmitter):
        submit_many = 3

    assert many_submitter(NotCallable()) is None


def test_a_batch_goes_out_in_chunks_in_claim_order():
    sched, store, submitter, _ = setup(120, batch_size=500)
    result = sched.run_once()
    assert (result.claimed, result.submitted) == (120, 120)
    assert [len(c) for c in submitter.chunks] == [SUBMIT_MANY_CHUNK, SUBMIT_MANY_CHUNK, 20]
    names = [name for chunk in submitter.chunks for name in chunk]
    assert names == [f"s{i:03d}" for i in range(120)]
    assert {s for s, _ in statuses(store).values()} == {ExecutionStatus.SUBMITTED}


def test_each_answer_is_the_outcome_of_its_own_occurrence():
    sched, store, submitter, _ = setup(10)
    submitter.permanent = {"s003"}
    submitter.retryable = {"s007"}
    result = sched.run_once()
    assert (result.submitted, result.failed, result.retrying) == (8, 1, 1)
    by_name = {k.split(":")[0]: v for k, v in statuses(store).items()}
    assert by_name["s003"] == (ExecutionStatus.SUBMIT_FAILED, 1)
    assert by_name["s007"] == (ExecutionStatus.CLAIMED, 1)
    assert by_name["s000"][0] is ExecutionStatus.SUBMITTED


@pytest.mark.parametrize("fault", ["raises", "short"])
def test_a_broken_call_fails_its_whole_chunk_as_retryable(fault: str):
    sched, store, submitter, _ = setup(5)
    if fault == "raises":
        submitter.raise_on_call = ConnectionError("reset")
    else:
        submitter.short_answer = True
    result = sched.run_once()
    assert (result.submitted, result.retrying, result.failed) == (0, 5, 0)
    assert {v for v in statuses(store).values()} == {(ExecutionStatus.CLAIMED, 1)}


def test_the_local_deadline_is_checked_before_each_chunk():
    # ttl 3 s, renewal 2 s: the local deadline is 1 s after the renewal; each chunk takes 0.6 s.
    sched, store, submitter, _ = setup(
        150,
        lease_ttl=timedelta(seconds=3),
        lease_renew_interval=timedelta(seconds=2),
    )
    submitter.chunk_cost = 0.6
    result = sched.run_once()
    assert [len(c) for c in submitter.chunks] == [SUBMIT_MANY_CHUNK, SUBMIT_MANY_CHUNK]
    assert result.submitted == 2 * SUBMIT_MANY_CHUNK
    left = [k for k, (s, _) in statuses(store).items() if s is ExecutionStatus.CLAIMED]
    assert len(left) == 150 - 2 * SUBMIT_MANY_CHUNK  # left claimed for the next leader


def test_with_several_threads_each_shares_chunks_and_outcomes_stay_matched():
    class Threaded(ManySubmitter):
        concurrent_submits = 2

    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([every(f"s{i:03d}", 60) for i in range(130)])
    submitter = Threaded(clock)
    submitter.permanent = {"s001", "s064"}
    sched = Scheduler(store, submitter, settings=settings(), clock=clock)
    clock.advance(60)
    try:
        result = sched.run_once()
    finally:
        sched.close()
    assert (result.submitted, result.failed) == (128, 2)
    # Thread 0 takes every even occurrence, thread 1 every odd one, each in chunks.
    assert sorted(len(c) for c in submitter.chunks) == [
        15,
        15,
        SUBMIT_MANY_CHUNK,
        SUBMIT_MANY_CHUNK,
    ]
    by_name = {k.split(":")[0]: v[0] for k, v in statuses(store).items()}
    failed = {n for n, s in by_name.items() if s is ExecutionStatus.SUBMIT_FAILED}
    assert failed == {"s001", "s064"}
    assert sorted(o.schedule_name for o in submitter.submitted) == sorted(set(by_name) - failed)
