"""Conformance: schedule control on every store. Pause and resume (with a note, from now or
with catch-up), backfill, deterministic jitter, the overlap policy (skip, buffer_one, expiry
after max_runtime), and what a second store object (another scheduler, a new leader) sees.

Claims pass ``now=`` explicitly. Where a store compares with its own clock (a row waiting
for its jittered instant, a run's age against ``max_runtime``, both judged from instants the
store wrote with its clock), the instants are taken around ``store.now()`` instead of T0.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from goatbeat.core.errors import DamagedRow, InvalidValue, ScheduleNotFound
from goatbeat.core.jitter import jittered
from goatbeat.core.model import (
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    SubmitOutcome,
    idempotency_key,
)
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from tests.conformance.conftest import Backend
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, keys, lease

MINUTE = timedelta(minutes=1)


def _get(store: ScheduleStore, name: str) -> Schedule:
    stored = store.get(name)
    assert isinstance(stored, Schedule)
    return stored


# -- pause and resume ----------------------------------------------------------------------------


def test_a_paused_schedule_is_never_due_and_keeps_who_when_and_why(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("paused"), hourly("running")])
    before = _get(store, "paused")
    paused = store.pause("paused", note="incident 42", by="alice")

    assert isinstance(paused, Schedule)
    assert paused.paused and paused.pause_note == "incident 42" and paused.paused_by == "alice"
    assert paused.paused_at is not None and abs(paused.paused_at - store.now()) < MINUTE
    assert paused.version == before.version + 1
    # Where the pause began is kept, but nothing of it is due, for any scheduler.
    assert paused.next_run_at == T0 + HOUR
    grant = lease(store)
    assert [o.schedule_name for o in claim_all(store, grant, T0 + 5 * HOUR)] == ["running"]
    other = backend.make()
    assert other.next_due_at() == T0 + 6 * HOUR  # "running"'s next; "paused" is left out
    assert store.executions(name="paused") == []

    # Pausing again keeps when it began and takes the new note.
    again = store.pause("paused", note="still down")
    assert isinstance(again, Schedule)
    assert (again.paused_at, again.pause_note, again.paused_by) == (
        paused.paused_at,
        "still down",
        None,
    )


def test_resume_from_now_counts_the_pause_as_skipped_and_keeps_the_phase(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("a")])
    store.pause("a", note="maintenance")

    result = store.resume("a", now=T0 + 5 * HOUR + MINUTE)

    assert result.was_paused and not result.catch_up
    # T0+1h .. T0+5h: five instants skipped, none written as an execution.
    assert (result.skipped, result.skipped_is_lower_bound) == (5, False)
    assert result.first_skipped == T0 + HOUR
    resumed = _get(store, "a")
    assert not resumed.paused and resumed.pause_note == "" and resumed.paused_at is None
    assert resumed.skipped_count == 5 and resumed.missed_count == 0
    assert resumed.next_run_at == T0 + 6 * HOUR
    assert store.executions(name="a") == []
    grant = lease(store)
    assert [o.scheduled_at for o in claim_all(store, grant, T0 + 6 * HOUR)] == [T0 + 6 * HOUR]


def test_resume_with_catch_up_runs_the_pause_by_the_misfire_policy(store: ScheduleStore) -> None:
    store.publish(
        [
            hourly("all", misfire=MisfirePolicy.RUN_ALL, catch_up_limit=3),
            hourly("once"),
            hourly("skip", misfire=MisfirePolicy.SKIP),
        ]
    )
    for name in ("all", "once", "skip"):
        store.pause(name)
        result = store.resume(name, catch_up=True, now=T0 + 5 * HOUR + 2 * MINUTE)
        assert result.was_paused and result.catch_up and result.skipped == 0

    grant = lease(store)
    # Every instant of the pause is late (grace 60 s).
    claimed = claim_all(store, grant, T0 + 5 * HOUR + 2 * MINUTE)
    by_name: dict[str, list[datetime]] = {}
    for o in claimed:
        by_name.setdefault(o.schedule_name, []).append(o.scheduled_at)
    # run_all: the latest catch_up_limit of them; run_once: one, at the latest; skip: none.
    assert by_name == {
        "all": [T0 + 3 * HOUR, T0 + 4 * HOUR, T0 + 5 * HOUR],
        "once": [T0 + 5 * HOUR],
    }
    assert {n: _get(store, n).missed_count for n in ("all", "once", "skip")} == {
        "all": 2,
        "once": 4,
        "skip": 5,
    }
    assert all(_get(store, n).skipped_count == 0 for n in ("all", "once", "skip"))


def test_resume_of_a_schedule_not_paused_writes_nothing(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    before = store.list_schedules()
    result = store.resume("a", now=T0 + 5 * HOUR)
    assert not result.was_paused and result.skipped == 0
    assert store.list_schedules() == before
    with pytest.raises(ScheduleNotFound):
        store.pause("nope")
    with pytest.raises(ScheduleNotFound):
        store.resume("nope")


def test_a_disabled_paused_schedule_is_only_unpaused(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    store.pause("a")
    store.set_enabled("a", False)
    result = store.resume("a", now=T0 + 5 * HOUR)
    assert result.was_paused and result.skipped == 0
    resumed = _get(store, "a")
    assert not resumed.paused and not resumed.enabled and resumed.next_run_at is None


def test_publish_edit_and_toggle_leave_a_pause_alone(store: ScheduleStore) -> None:
    store.publish([hourly("code")])
    store.create(hourly("admin", source="admin"))
    for name in ("code", "admin"):
        store.pause(name, note="hold")
    store.publish([hourly("code", trigger=IntervalTrigger("2h"))])
    store.update(hourly("admin", source="admin", description="edited"))
    store.set_enabled("admin", False)
    store.set_enabled("admin", True)
    for name in ("code", "admin"):
        stored = _get(store, name)
        assert stored.paused and stored.pause_note == "hold", name
    grant = lease(store)
    assert claim_all(store, grant, T0 + 50 * HOUR) == []


def test_pause_checks_its_note(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    with pytest.raises(InvalidValue) as caught:
        store.pause("a", note="x" * 5000)
    assert caught.value.field == "note"
    assert not _get(store, "a").paused


def test_a_damaged_row_can_be_paused_and_resumed(backend: Backend, store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    _damage(backend, store, "a")
    paused = store.pause("a", note="broken")
    assert paused.paused
    result = store.resume("a", now=T0 + 5 * HOUR)
    assert result.was_paused and not result.schedule.paused


def _damage(backend: Backend, store: ScheduleStore, name: str) -> None:
    if backend.kind == "memory":
        store.write_raw(name, args={"not": "a list"})  # type: ignore[attr-defined]
        return
    sql = "UPDATE goatbeat_schedule SET args = '{\"not\": 1}' WHERE name = 'a'"
    if backend.kind == "sqlite":
        import sqlite3
        from contextlib import closing

        assert backend.url is not None
        with closing(sqlite3.connect(backend.url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(sql)
        return
    import psycopg

    assert backend.url is not None
    with psycopg.connect(backend.url) as conn:
        conn.execute(sql)


# -- backfill ------------------------------------------------------------------------------------


def test_backfill_submits_each_instant_once_through_the_leader(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("a", last_run_at=T0 - 24 * HOUR)])
    grant = lease(store)
    # The scheduler already ran T0-23h .. T0-20h.
    ran = claim_all(store, grant, T0 - 20 * HOUR)
    assert [o.scheduled_at for o in ran] == [T0 - 20 * HOUR]  # run_once caught up once
    store.record_outcomes([SubmitOutcome(execution_id=ran[0].execution_id, ok=True)])

    result = store.backfill(
        "a", start=T0 - 22 * HOUR, end=T0 - 18 * HOUR, limit=10, now=T0 - 10 * HOUR
    )

    wanted = [T0 - 22 * HOUR, T0 - 21 * HOUR, T0 - 20 * HOUR, T0 - 19 * HOUR]
    assert result.instants == wanted
    assert result.existing == {T0 - 20 * HOUR: ExecutionStatus.SUBMITTED.value}
    assert result.created == [T0 - 22 * HOUR, T0 - 21 * HOUR, T0 - 19 * HOUR]
    # Like a run-now request: unclaimed until the leader claims it, then pending.
    other = backend.make()
    pending = other.pending(limit=10)
    assert [p.scheduled_at for p in pending] == result.created
    assert {p.kind for p in pending} == {ExecutionKind.BACKFILL}
    assert keys(pending) == [idempotency_key("a", t) for t in result.created]
    assert all(p.fencing_token is None for p in pending)
    # A backfill is due at its request: its retry grace counts from then, not from 2031-22h.
    assert all(p.due_at is not None and abs(p.due_at - store.now()) < MINUTE for p in pending)
    claimed = other.claim_manual_runs(
        grant, scheduler_id="s1", execution_ids=[p.execution_id for p in pending]
    )
    assert claimed == sorted(p.execution_id for p in pending)

    # Again: every instant exists now, nothing is written twice.
    again = store.backfill(
        "a", start=T0 - 22 * HOUR, end=T0 - 18 * HOUR, limit=10, now=T0 - 10 * HOUR
    )
    assert again.created == [] and sorted(again.existing) == wanted
    # And the scheduled run of an instant backfilled ahead of it claims nothing.
    store.backfill("a", start=T0 - 19 * HOUR, end=T0 - 17 * HOUR, limit=10, now=T0 - 17 * HOUR)
    later = claim_all(store, grant, T0 - 17 * HOUR)
    assert idempotency_key("a", T0 - 18 * HOUR) not in keys(later)
    total = store.executions(name="a", limit=100)
    assert len(keys(total)) == len(set(keys(total)))


def test_backfill_dry_run_writes_nothing(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    result = store.backfill(
        "a", start=T0 - 3 * HOUR, end=T0, limit=5, dry_run=True, now=T0 + 5 * HOUR
    )
    assert result.dry_run and result.created == [T0 - 3 * HOUR, T0 - 2 * HOUR, T0 - HOUR]
    assert store.executions(name="a") == [] and store.pending(limit=10) == []


@pytest.mark.parametrize(
    ("start", "end", "limit", "field"),
    [
        (T0 - 3 * HOUR, T0 - 3 * HOUR, 10, "end"),  # empty range
        (T0 - 3 * HOUR, T0 + 9 * HOUR, 100, "end"),  # reaches past now
        (T0 - 30 * HOUR, T0, 10, "limit"),  # 30 instants
        (T0 - 3 * HOUR, T0, 0, "limit"),
    ],
)
def test_backfill_refuses_a_bad_range_and_writes_nothing(
    store: ScheduleStore, start: datetime, end: datetime, limit: int, field: str
) -> None:
    store.publish([hourly("a")])
    with pytest.raises(InvalidValue) as caught:
        store.backfill("a", start=start, end=end, limit=limit, now=T0 + 5 * HOUR)
    assert caught.value.field == field
    assert store.executions(name="a") == []


def test_backfill_respects_start_and_end_and_refuses_a_damaged_row(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("a", start_at=T0 - 2 * HOUR, end_at=T0 - HOUR)])
    result = store.backfill("a", start=T0 - 5 * HOUR, end=T0, limit=10, now=T0)
    assert result.instants == [T0 - 2 * HOUR, T0 - HOUR]
    _damage(backend, store, "a")
    with pytest.raises(DamagedRow):
        store.backfill("a", start=T0 - 5 * HOUR, end=T0, limit=10, now=T0)


# -- jitter --------------------------------------------------------------------------------------


def test_jittered_occurrences_wait_in_the_store_for_their_instant(
    backend: Backend, store: ScheduleStore
) -> None:
    """Claimed at the nominal instant under the nominal key; each is returned by the claim
    only when its jittered instant has come, else it waits in the store (retry_at) and comes
    back through pending(), for whichever scheduler asks, at the same instant."""
    now = store.now().replace(microsecond=0)
    instant = now - 12 * HOUR
    jitter = timedelta(days=1)
    names = [f"j{i:02d}" for i in range(40)]
    store.publish(
        [
            Schedule(
                name=n,
                task="tasks.j",
                trigger=IntervalTrigger("1d", anchor=instant),
                jitter=jitter,
                misfire_grace=timedelta(days=1),
                last_run_at=instant - timedelta(days=1),
            )
            for n in names
        ]
    )
    due = {n: jittered(n, instant, jitter) for n in names}
    grant = lease(store)
    result = store.claim_due(grant, scheduler_id="s1", limit=100, now=now)

    sent_now = {o.schedule_name for o in result.occurrences}
    assert sent_now == {n for n in names if due[n] <= now}
    assert result.deferred == len(names) - len(sent_now)
    assert 0 < len(sent_now) < len(names)  # a day of jitter half past: both kinds occur
    for o in result.occurrences:
        assert o.idempotency_key == idempotency_key(o.schedule_name, instant)
        assert o.due_at == due[o.schedule_name]
    waiting = sorted(due[n] for n in names if n not in sent_now)
    # Another scheduler (a new leader) sees the same waits, and nothing early.
    other = backend.make()
    assert other.next_retry_at() == waiting[0]
    # Pending holds what the claim returned (sent at once), not what waits.
    assert {p.schedule_name for p in other.pending(limit=100)} == sent_now
    assert all(_get(other, n).next_run_at == instant + timedelta(days=1) for n in names)


def test_a_jittered_occurrence_comes_back_through_pending_at_its_instant(
    store: ScheduleStore,
) -> None:
    # An instant just ahead of the store's clock, and a name whose offset (within 10 s) is
    # short: it waits past the claim, then briefly.
    now = store.now() + timedelta(seconds=1)
    jitter = timedelta(seconds=10)
    name = next(
        f"soon-{i}"
        for i in range(1000)
        if timedelta(milliseconds=200)
        < jittered(f"soon-{i}", now, jitter) - now
        < timedelta(seconds=1)
    )
    store.publish(
        [
            Schedule(
                name=name,
                task="tasks.j",
                trigger=IntervalTrigger("1h", anchor=now),
                jitter=jitter,
                last_run_at=now - HOUR,
            )
        ]
    )
    grant = lease(store)
    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=now)
    assert result.occurrences == [] and result.deferred == 1
    due = jittered(name, now, jitter)
    assert store.next_retry_at() == due
    assert store.pending(limit=10) == []
    # Once the store's clock passes it, pending returns it with its due instant.
    _wait_until(store, due)
    (pending,) = store.pending(limit=10)
    assert (pending.scheduled_at, pending.due_at, pending.attempts) == (now, due, 0)


def _wait_until(store: ScheduleStore, instant: datetime) -> None:
    import time

    clock = getattr(store, "clock", None)
    advance = getattr(clock, "advance", None)
    while store.now() < instant:
        if callable(advance):
            advance(instant - store.now())
        else:
            time.sleep(min(0.2, (instant - store.now()).total_seconds() + 0.01))


def test_pause_withdraws_an_occurrence_waiting_for_its_jittered_instant(
    store: ScheduleStore,
) -> None:
    now = store.now().replace(microsecond=0)
    jitter = timedelta(hours=1)
    name = next(f"w-{i}" for i in range(100) if jittered(f"w-{i}", now, jitter) > now + 10 * MINUTE)
    store.publish(
        [
            Schedule(
                name=name,
                task="tasks.j",
                trigger=IntervalTrigger("1d", anchor=now),
                jitter=jitter,
                last_run_at=now - timedelta(days=1),
            )
        ]
    )
    grant = lease(store)
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=now).deferred == 1
    store.pause(name, note="stop it")
    (withdrawn,) = store.executions(name=name)
    assert withdrawn.status is ExecutionStatus.SKIPPED and "paused" in (withdrawn.error or "")
    assert store.next_retry_at() is None and _get(store, name).skipped_count == 1


# -- overlap -------------------------------------------------------------------------------------


def _every_minute(name: str, base: datetime, policy: OverlapPolicy, **kw: object) -> Schedule:
    return Schedule(
        name=name,
        task="tasks.long",
        trigger=IntervalTrigger("1m", anchor=base - HOUR),
        overlap=policy,
        max_runtime=timedelta(hours=1),
        last_run_at=base - 3 * MINUTE,
        **kw,  # type: ignore[arg-type]
    )


def test_overlap_skip_records_occurrences_due_while_the_run_still_runs(
    backend: Backend, store: ScheduleStore
) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish([_every_minute("skip", base, OverlapPolicy.SKIP)])
    grant = lease(store)
    first = store.claim_due(grant, scheduler_id="s1", limit=10, now=base - 2 * MINUTE)
    (run,) = first.occurrences
    store.record_outcomes([SubmitOutcome(execution_id=run.execution_id, ok=True)])

    # Still running (submitted, well within max_runtime): skipped, for any scheduler.
    other = backend.make()
    second = other.claim_due(grant, scheduler_id="s1", limit=10, now=base - MINUTE)
    assert second.occurrences == [] and second.skipped == {"skip": 1}
    skipped = other.executions(name="skip", status=ExecutionStatus.SKIPPED)
    assert [e.scheduled_at for e in skipped] == [base - MINUTE]
    assert skipped[0].idempotency_key == idempotency_key("skip", base - MINUTE)
    stored = _get(other, "skip")
    assert stored.skipped_count == 1 and stored.last_status == "skipped"
    assert stored.total_run_count == 1

    # The backend reports the end: the next occurrence starts.
    assert store.record_finished(run.idempotency_key, succeeded=True)
    third = other.claim_due(grant, scheduler_id="s1", limit=10, now=base)
    assert [o.scheduled_at for o in third.occurrences] == [base]


def test_a_run_older_than_max_runtime_no_longer_counts(store: ScheduleStore) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish([_every_minute("stale", base, OverlapPolicy.SKIP)])
    grant = lease(store)
    (run,) = store.claim_due(grant, scheduler_id="s1", limit=10, now=base - 2 * MINUTE).occurrences
    store.record_outcomes([SubmitOutcome(execution_id=run.execution_id, ok=True)])
    # Its worker died: it never reports. Two hours later (max_runtime 1 h) the next starts:
    # of the two instants still on time (60 s of grace) the older starts, the other would
    # overlap it.
    later = store.claim_due(grant, scheduler_id="s1", limit=10, now=base + 2 * HOUR)
    assert [o.scheduled_at for o in later.occurrences] == [base + 2 * HOUR - MINUTE]
    assert later.skipped == {"stale": 1}


def test_a_claimed_run_not_sent_yet_counts_as_running(store: ScheduleStore) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish([_every_minute("s", base, OverlapPolicy.SKIP)])
    grant = lease(store)
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=base - 2 * MINUTE).occurrences
    # Left claimed (a broker outage, say), even past max_runtime: it will still be sent.
    later = store.claim_due(grant, scheduler_id="s1", limit=10, now=base + 3 * HOUR)
    assert later.occurrences == [] and later.skipped == {"s": 2}


def test_overlap_plans_catch_up_runs_so_that_they_do_not_overlap_each_other(
    store: ScheduleStore,
) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish(
        [
            _every_minute(
                "catch",
                base,
                OverlapPolicy.BUFFER_ONE,
                misfire=MisfirePolicy.RUN_ALL,
                misfire_grace=timedelta(hours=1),
            )
        ]
    )
    grant = lease(store)
    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=base + MINUTE)
    # base-2m, base-1m, base, base+1m due together: one starts, one waits, two are skipped.
    assert [o.scheduled_at for o in result.occurrences] == [base - 2 * MINUTE]
    assert result.buffered == 1 and result.skipped == {"catch": 2}
    statuses = {e.scheduled_at: e.status for e in store.executions(name="catch")}
    assert statuses == {
        base - 2 * MINUTE: ExecutionStatus.CLAIMED,
        base - MINUTE: ExecutionStatus.BUFFERED,
        base: ExecutionStatus.SKIPPED,
        base + MINUTE: ExecutionStatus.SKIPPED,
    }


def test_buffer_one_starts_the_waiting_occurrence_when_the_run_ends_even_on_a_new_leader(
    backend: Backend, store: ScheduleStore
) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish([_every_minute("buf", base, OverlapPolicy.BUFFER_ONE)])
    grant = lease(store)
    (run,) = store.claim_due(grant, scheduler_id="s1", limit=10, now=base - 2 * MINUTE).occurrences
    store.record_outcomes([SubmitOutcome(execution_id=run.execution_id, ok=True)])

    waits = store.claim_due(grant, scheduler_id="s1", limit=10, now=base - MINUTE)
    assert waits.occurrences == [] and waits.buffered == 1 and waits.skipped == {}
    dropped = store.claim_due(grant, scheduler_id="s1", limit=10, now=base)
    assert dropped.occurrences == [] and dropped.buffered == 0 and dropped.skipped == {"buf": 1}
    # While the run runs, the buffered one's wake-up is the run's expiry.
    assert store.next_due_at() == base + MINUTE

    # The first leader goes; a new one takes over. The run ends: the new leader starts it.
    assert store.release_lease("scheduler", "s1", grant.token)
    other = backend.make()
    other.wait(0)
    new = lease(other, holder="s2")
    assert store.record_finished(run.idempotency_key, succeeded=False, error="boom")
    assert other.wait(2.0)  # the completion woke the leader
    assert other.next_due_at() is not None and other.next_due_at() <= base - MINUTE  # type: ignore[operator]
    started = other.claim_due(new, scheduler_id="s2", limit=10, now=base + timedelta(seconds=10))
    (buffered,) = started.occurrences
    assert (buffered.scheduled_at, buffered.fencing_token) == (base - MINUTE, new.token)
    assert buffered.idempotency_key == idempotency_key("buf", base - MINUTE)
    row = other.executions(name="buf", status=ExecutionStatus.CLAIMED)
    assert [(e.scheduled_at, e.scheduler_id) for e in row] == [(base - MINUTE, "s2")]
    stored = _get(other, "buf")
    assert stored.total_run_count == 2 and stored.skipped_count == 1
    # It is now the run the schedule waits for: the next occurrence waits again.
    assert other.claim_due(new, scheduler_id="s2", limit=10, now=base + MINUTE).buffered == 1


def test_pause_withdraws_a_buffered_occurrence_and_delete_abandons_one(
    store: ScheduleStore,
) -> None:
    base = store.now().replace(second=0, microsecond=0)
    store.publish(
        [
            _every_minute("p", base, OverlapPolicy.BUFFER_ONE),
            _every_minute("d", base, OverlapPolicy.BUFFER_ONE),
        ]
    )
    grant = lease(store)
    store.claim_due(grant, scheduler_id="s1", limit=10, now=base - 2 * MINUTE)
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=base - MINUTE).buffered == 2
    store.pause("p", note="hold")
    assert [e.status for e in store.executions(name="p")] == [
        ExecutionStatus.SKIPPED,
        ExecutionStatus.CLAIMED,
    ]
    store.delete("d")
    assert {e.status for e in store.executions(name="d")} == {ExecutionStatus.SUBMIT_FAILED}
    assert store.next_due_at() is None or store.next_due_at() > base  # type: ignore[operator]


def test_control_options_round_trip_and_count_in_the_definition(store: ScheduleStore) -> None:
    declared = hourly(
        "opts",
        jitter=timedelta(seconds=30),
        overlap=OverlapPolicy.BUFFER_ONE,
        max_runtime=timedelta(minutes=20),
        pause_on_failure=3,
    )
    store.publish([declared])
    stored = _get(store, "opts")
    assert (stored.jitter, stored.overlap, stored.max_runtime, stored.pause_on_failure) == (
        timedelta(seconds=30),
        OverlapPolicy.BUFFER_ONE,
        timedelta(minutes=20),
        3,
    )
    assert store.publish([declared]).unchanged == ["opts"]
    changed = store.publish([hourly("opts", jitter=timedelta(seconds=31))])
    assert changed.updated == ["opts"]
    assert [c.field for c in changed.changes["opts"]] == [
        "jitter",
        "overlap",
        "max_runtime",
        "pause_on_failure",
    ]


# -- what the workers report: pause_on_failure, and a paused schedule owes nothing ------------


def test_pause_on_failure_pauses_after_that_many_failures_in_a_row(store: ScheduleStore) -> None:
    from goatbeat.core.health import Outcome

    store.publish([hourly("flaky", pause_on_failure=2), hourly("other")])
    grant = lease(store)
    runs = [
        o
        for h in range(1, 5)
        for o in claim_all(store, grant, T0 + h * HOUR)
        if o.schedule_name == "flaky"
    ]
    assert len(runs) == 4
    store.record_outcomes([SubmitOutcome(execution_id=r.execution_id, ok=True) for r in runs])

    store.record_completion(runs[0].idempotency_key, outcome=Outcome.FAILED, error="boom")
    store.record_completion(runs[1].idempotency_key, outcome=Outcome.SUCCEEDED)  # resets
    store.record_completion(runs[2].idempotency_key, outcome=Outcome.FAILED, error="boom")
    assert not _get(store, "flaky").paused
    # The same failure reported twice counts once: still one in a row.
    store.record_completion(runs[2].idempotency_key, outcome=Outcome.FAILED, error="boom")
    assert not _get(store, "flaky").paused

    store.record_completion(runs[3].idempotency_key, outcome=Outcome.FAILED, error="boom")
    flaky = _get(store, "flaky")
    assert flaky.paused and flaky.paused_by == "goatbeat"
    assert "2 failures in a row" in flaky.pause_note and "pause_on_failure" in flaky.pause_note
    assert not _get(store, "other").paused
    # Paused: never due again until resumed.
    assert [o.schedule_name for o in claim_all(store, grant, T0 + 5 * HOUR)] == ["other"]
    # A schedule without the option never pauses.
    (other,) = claim_all(store, grant, T0 + 6 * HOUR)
    for _ in range(3):
        store.record_completion(other.idempotency_key, outcome=Outcome.RETRIED)
    store.record_completion(other.idempotency_key, outcome=Outcome.FAILED)
    assert not _get(store, "other").paused


def test_a_paused_schedule_is_neither_due_nor_overdue_in_status(store: ScheduleStore) -> None:
    store.publish([hourly("held"), hourly("late")])
    store.pause("held", note="maintenance")
    at = T0 + 5 * HOUR  # both were due at T0 + 1h and nothing claimed them
    snapshot = store.status(now=at)
    assert snapshot.due == 1 and snapshot.oldest_due_name == "late"
    health = {h.name: h for h in store.schedule_health(overdue_after=10 * MINUTE, now=at)}
    assert health["late"].overdue
    assert "held" not in health or not health["held"].overdue
