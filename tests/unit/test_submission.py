"""Submission on its own: a batch goes out (one by one, in chunks, from threads) while the local
deadline holds, and every outcome comes back to the store in one call, with failures either
final or held back for a retry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError
from goatbeat.core.model import ExecutionKind, LeaseGrant, Occurrence, Routing, SubmitOutcome
from goatbeat.core.submission import Submission, retry_delay
from goatbeat.core.submit import SUBMIT_MANY_CHUNK
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRANT = LeaseGrant(name="scheduler", holder="s1", token=7, expires_at=START + timedelta(30))


class Lease:
    """The lease a batch goes out under: held while ``checks()`` says so."""

    def __init__(self, checks: Any = None) -> None:
        self.checks = checks or (lambda: True)

    def is_held(self) -> bool:
        return bool(self.checks())

    def remaining(self) -> float:
        return 30.0


HELD = Lease()


def occurrence(
    i: int, *, attempts: int = 0, kind: ExecutionKind = ExecutionKind.SCHEDULED
) -> Occurrence:
    return Occurrence(
        execution_id=i,
        schedule_id=i,
        schedule_name=f"s{i:03d}",
        task="app.tasks.job",
        args=(),
        kwargs={},
        routing=Routing(),
        scheduled_at=START,
        idempotency_key=f"s{i:03d}:2026-03-01T12:00:00Z",
        kind=kind,
        attempts=attempts,
    )


class RecordingStore:
    """The two store methods submission uses: the clock, and the one bookkeeping call."""

    def __init__(self, clock: FakeClock, events: list[str]) -> None:
        self.clock = clock
        self.events = events
        self.calls: list[list[SubmitOutcome]] = []

    def now(self) -> datetime:
        return self.clock.now()

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        self.calls.append(list(outcomes))
        self.events.append("record_outcomes")


class ScriptedSubmitter(AcceptingSubmitter):
    """Fails the execution ids it is told to; remembers who submitted what, from which thread."""

    name: ClassVar[str] = "scripted"

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.permanent: set[int] = set()
        self.retryable: set[int] = set()
        self.sent: list[int] = []
        self.threads: dict[int, str] = {}
        self.lock = threading.Lock()

    def submit(self, occurrence: Occurrence) -> str | None:
        i = occurrence.execution_id
        with self.lock:
            self.threads[i] = threading.current_thread().name
        if i in self.permanent:
            raise PermanentSubmitError(f"no task for {i}")
        if i in self.retryable:
            raise RetryableSubmitError(f"broker busy for {i}")
        with self.lock:
            self.sent.append(i)
        return f"task-{i}"

    def after_bookkeeping(self) -> None:
        self.events.append("after_bookkeeping")


class ChunkedSubmitter(ScriptedSubmitter):
    def __init__(self, events: list[str]) -> None:
        super().__init__(events)
        self.chunks: list[list[int]] = []

    def submit_many(self, occurrences: Sequence[Occurrence]) -> list[str | None | Exception]:
        self.chunks.append([o.execution_id for o in occurrences])
        answers: list[str | None | Exception] = []
        for occ in occurrences:
            try:
                answers.append(self.submit(occ))
            except Exception as exc:
                answers.append(exc)
        return answers


class ThreadedSubmitter(ScriptedSubmitter):
    concurrent_submits = 3


def make(
    submitter: ScriptedSubmitter,
    *,
    max_submit_retries: int = 5,
    wait: Any = None,
) -> tuple[Submission, RecordingStore, FakeClock]:
    clock = FakeClock(START)
    store = RecordingStore(clock, submitter.events)
    submission = Submission(
        store,  # type: ignore[arg-type]
        submitter,
        clock=clock,
        scheduler_id="s1",
        max_submit_retries=max_submit_retries,
        wait_for_instant=wait or (lambda occ: None),
    )
    return submission, store, clock


def test_a_failure_is_final_when_permanent_or_out_of_attempts_and_held_back_otherwise() -> None:
    submitter = ScriptedSubmitter([])
    submitter.permanent = {1}
    submitter.retryable = {2, 3}
    submission, store, clock = make(submitter, max_submit_retries=2)
    batch = [occurrence(1), occurrence(2), occurrence(3, attempts=2), occurrence(4)]

    counts = submission.submit(batch, GRANT, HELD, pending=False)

    (outcomes,) = store.calls  # one bookkeeping call for the whole batch, in batch order
    assert [(o.execution_id, o.ok, o.final) for o in outcomes] == [
        (1, False, True),  # permanent: no retry
        (2, False, False),  # first failure of three allowed attempts: retried
        (3, False, True),  # its third failed attempt: given up
        (4, True, False),
    ]
    assert outcomes[0].error == "PermanentSubmitError: no task for 1"
    assert outcomes[3].backend_task_id == "task-4"
    assert (counts.submitted, counts.retrying, counts.failed) == (1, 1, 2)
    # Only the retried row waits, for retry_delay(1): the store keeps it out of pending()
    # until then (without a misfire grace, the count alone decides).
    assert [o.retry_in for o in outcomes] == [None, retry_delay(1), None, None]


def test_a_retry_that_goes_through_is_not_called_a_resubmission(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    submitter = ScriptedSubmitter([])
    submission, _store, _clock = make(submitter)

    counts = submission.submit(
        [occurrence(5, attempts=1), occurrence(6)], GRANT, HELD, pending=True
    )

    assert (counts.submitted, counts.resubmitted) == (2, 2)
    # Row 6 was left claimed by a crash or another leader: that one is worth a record.
    resubmitted = [r for r in caplog.records if r.getMessage() == "occurrence.resubmitted"]
    assert [r.goatbeat["schedule"] for r in resubmitted] == ["s006"]  # type: ignore[attr-defined]


def test_the_local_deadline_leaves_the_rest_claimed_and_unrecorded() -> None:
    submitter = ScriptedSubmitter([])
    checks = iter([True, True, False, False])
    submission, store, _clock = make(submitter)

    counts = submission.submit(
        [occurrence(i) for i in range(1, 5)], GRANT, Lease(lambda: next(checks)), pending=False
    )

    assert submitter.sent == [1, 2]
    assert [o.execution_id for o in store.calls[0]] == [1, 2]
    assert counts.submitted == 2


def test_each_occurrence_waits_for_its_instant_before_it_is_sent() -> None:
    order: list[str] = []
    submitter = ScriptedSubmitter(order)
    submitter.submit = lambda occ: order.append(f"submit {occ.execution_id}") or "id"  # type: ignore[method-assign]
    submission, _store, _clock = make(
        submitter, wait=lambda occ: order.append(f"wait {occ.execution_id}")
    )
    submission.submit([occurrence(1), occurrence(2)], GRANT, HELD, pending=False)
    assert order == [
        "wait 1",
        "submit 1",
        "wait 2",
        "submit 2",
        "record_outcomes",
        "after_bookkeeping",
    ]


def test_nothing_sent_means_no_bookkeeping_call() -> None:
    submitter = ScriptedSubmitter([])
    submission, store, _clock = make(submitter)
    submission.submit([occurrence(1)], GRANT, Lease(lambda: False), pending=False)
    assert store.calls == [] and submitter.events == []


def test_a_submit_many_submitter_gets_chunks_and_each_answer_stays_with_its_occurrence() -> None:
    submitter = ChunkedSubmitter([])
    submitter.retryable = {SUBMIT_MANY_CHUNK + 3}
    submission, store, _clock = make(submitter)
    batch = [occurrence(i) for i in range(1, 2 * SUBMIT_MANY_CHUNK + 21)]

    counts = submission.submit(batch, GRANT, HELD, pending=False)

    assert [len(c) for c in submitter.chunks] == [SUBMIT_MANY_CHUNK, SUBMIT_MANY_CHUNK, 20]
    (outcomes,) = store.calls
    assert [o.execution_id for o in outcomes] == [o.execution_id for o in batch]
    failed = [o.execution_id for o in outcomes if not o.ok]
    assert failed == [SUBMIT_MANY_CHUNK + 3] and counts.retrying == 1
    assert all(o.backend_task_id == f"task-{o.execution_id}" for o in outcomes if o.ok)


def test_the_deadline_is_checked_before_each_chunk() -> None:
    submitter = ChunkedSubmitter([])
    checks = iter([True, False])
    submission, store, _clock = make(submitter)
    submission.submit(
        [occurrence(i) for i in range(1, 2 * SUBMIT_MANY_CHUNK + 1)],
        GRANT,
        Lease(lambda: next(checks)),
        pending=False,
    )
    assert len(submitter.chunks) == 1
    assert len(store.calls[0]) == SUBMIT_MANY_CHUNK


def test_threads_share_a_batch_and_the_outcomes_keep_the_batch_order() -> None:
    submitter = ThreadedSubmitter([])
    submitter.permanent = {4}
    submission, store, _clock = make(submitter)
    batch = [occurrence(i) for i in range(1, 10)]
    try:
        counts = submission.submit(batch, GRANT, HELD, pending=False)
    finally:
        submission.close()

    (outcomes,) = store.calls
    assert [o.execution_id for o in outcomes] == list(range(1, 10))
    assert (counts.submitted, counts.failed) == (8, 1)
    # Three shares, each every third occurrence (the oldest of each go first), each from one
    # thread; the calling thread takes the first share, the pool's workers the others.
    for share in ((1, 4, 7), (2, 5, 8), (3, 6, 9)):
        assert len({submitter.threads[i] for i in share}) == 1
    assert submitter.threads[1] == threading.current_thread().name
    assert submitter.threads[2].startswith("goatbeat-submit")


def test_a_batch_sent_in_the_background_is_recorded_by_the_next_submit_call() -> None:
    submitter = ThreadedSubmitter([])
    submission, store, _clock = make(submitter)
    assert submission.threaded
    batch = [occurrence(i) for i in range(1, 4)]
    try:
        sent = submission.send_in_background(batch, HELD).result()
        assert sorted(submitter.sent) == [1, 2, 3] and store.calls == []  # sent, not recorded
        counts = submission.submit(batch, GRANT, HELD, pending=False, sent=sent)
    finally:
        submission.close()
    assert sorted(submitter.sent) == [1, 2, 3]  # not sent twice
    assert [o.execution_id for o in store.calls[0]] == [1, 2, 3] and counts.submitted == 3


def test_a_submitter_without_concurrent_submits_is_never_threaded() -> None:
    submission, _store, _clock = make(ScriptedSubmitter([]))
    assert not submission.threaded
