"""Schedule control through the scheduler loop (MemoryStore, FakeClock): a pause holds on a
new leader too, a backfill goes out through the leader that claims it, oldest first, under
the scheduled keys."""

from __future__ import annotations

from datetime import timedelta

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.model import ExecutionKind, ExecutionStatus, Schedule, idempotency_key
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import START, RecordingSubmitter

MINUTE = timedelta(minutes=1)


def _minutely() -> Schedule:
    return Schedule(name="m", task="tasks.m", trigger=IntervalTrigger("1m"))


def _loop(store: MemoryStore, clock: FakeClock, sid: str) -> tuple[Scheduler, RecordingSubmitter]:
    submitter = RecordingSubmitter()
    return Scheduler(store, submitter, settings=Settings(scheduler_id=sid), clock=clock), submitter


def _run(s: Scheduler, clock: FakeClock, until: timedelta) -> None:
    end = clock.now() + until
    while clock.now() < end:
        clock.advance(max(s.run_once().sleep, 0.001))


def test_a_pause_holds_across_a_leader_change_and_resume_counts_what_it_skipped() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([_minutely()])
    a, sent_a = _loop(store, clock, "a")
    _run(a, clock, 2 * MINUTE + timedelta(seconds=1))
    assert len(sent_a.submitted) == 2

    store.pause("m", note="incident 42", by="ops")
    _run(a, clock, 3 * MINUTE)
    assert a.release()
    b, sent_b = _loop(store, clock, "b")
    _run(b, clock, 3 * MINUTE)
    assert len(sent_a.submitted) == 2 and sent_b.submitted == []  # six minutes paused

    result = store.resume("m")
    assert result.skipped == 6
    _run(b, clock, 2 * MINUTE)
    assert len(sent_b.submitted) == 2
    assert sent_b.submitted[0].scheduled_at > clock.now() - 2 * MINUTE
    stored = store.get("m")
    assert isinstance(stored, Schedule)
    assert stored.skipped_count == 6 and stored.missed_count == 0


def test_a_backfill_is_claimed_by_the_leader_and_sent_oldest_first() -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([_minutely()])
    a, _ = _loop(store, clock, "a")
    _run(a, clock, 5 * MINUTE + timedelta(seconds=1))
    result = store.backfill("m", start=START - 3 * MINUTE, end=START + 3 * MINUTE, limit=10)
    # START itself never ran (the schedule began after it): it is backfilled too.
    assert result.created == [START - 3 * MINUTE, START - 2 * MINUTE, START - MINUTE, START]
    assert sorted(result.existing) == [START + MINUTE, START + 2 * MINUTE]  # already ran

    assert a.release()
    b, sent = _loop(store, clock, "b")
    grant_token = b.run_once().fencing_token
    assert [o.idempotency_key for o in sent.submitted] == [
        idempotency_key("m", t) for t in result.created
    ]
    assert all(o.kind is ExecutionKind.BACKFILL for o in sent.submitted)
    rows = [e for e in store.executions(name="m", limit=50) if e.kind is ExecutionKind.BACKFILL]
    assert {(e.status, e.scheduler_id, e.fencing_token) for e in rows} == {
        (ExecutionStatus.SUBMITTED, "b", grant_token)
    }
