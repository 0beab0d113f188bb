"""Conformance: claiming, fencing, compare-and-set, bookkeeping (every store)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from goatbeat.core.misfire import Plan, plan
from goatbeat.core.model import (
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    Schedule,
    Source,
    SubmitOutcome,
)
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import iso_z
from goatbeat.core.triggers import IntervalTrigger, OnceTrigger
from tests.conformance.conftest import Backend
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, keys, lease, snapshot

ROOT = Path(__file__).resolve().parents[2]


def test_claim_returns_due_occurrences_and_advances_the_schedule(store: ScheduleStore) -> None:
    store.publish(
        [hourly("a", args=[1], kwargs={"x": 2}), hourly("later", last_run_at=T0 + 5 * HOUR)]
    )
    grant = lease(store)
    before = store.get("a")

    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR)

    assert not result.refused and result.conflicts == 0 and result.missed == 0
    assert result.schedules_seen == 1
    [occ] = result.occurrences
    assert occ.schedule_name == "a" and occ.schedule_id == before.id
    assert occ.task == "tasks.a" and occ.args == (1,) and occ.kwargs == {"x": 2}
    assert occ.scheduled_at == T0 + HOUR
    assert occ.idempotency_key == "a:2031-03-01T13:00:00Z"
    assert occ.kind is ExecutionKind.SCHEDULED
    assert occ.fencing_token == grant.token

    after = store.get("a")
    assert after.next_run_at == T0 + 2 * HOUR
    assert after.last_run_at == T0 + HOUR
    assert after.last_status == "claimed"
    assert after.total_run_count == 1
    assert after.version == before.version + 1

    [execution] = store.executions(name="a")
    assert execution.id == occ.execution_id
    assert execution.status is ExecutionStatus.CLAIMED
    assert execution.fencing_token == grant.token and execution.scheduler_id == "s1"

    again = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR)
    assert again.occurrences == [] and again.schedules_seen == 0


def test_claim_respects_the_batch_limit_in_next_run_order(store: ScheduleStore) -> None:
    store.publish(
        [
            hourly(f"s{i}", trigger=OnceTrigger(T0 + timedelta(minutes=i + 1)))
            for i in (4, 0, 3, 1, 2)
        ]
    )
    grant = lease(store)
    now = T0 + HOUR

    first = store.claim_due(grant, scheduler_id="s1", limit=2, now=now)
    second = store.claim_due(grant, scheduler_id="s1", limit=2, now=now)
    third = store.claim_due(grant, scheduler_id="s1", limit=2, now=now)
    fourth = store.claim_due(grant, scheduler_id="s1", limit=2, now=now)

    assert [o.schedule_name for o in first.occurrences] == ["s0", "s1"]
    assert [o.schedule_name for o in second.occurrences] == ["s2", "s3"]
    assert [o.schedule_name for o in third.occurrences] == ["s4"]
    assert (first.schedules_seen, third.schedules_seen, fourth.schedules_seen) == (2, 1, 0)


def test_disabled_and_future_schedules_are_not_claimed(store: ScheduleStore) -> None:
    store.publish([hourly("on"), hourly("off"), hourly("future", last_run_at=T0 + 9 * HOUR)])
    store.set_enabled("off", False)
    grant = lease(store)
    assert keys(claim_all(store, grant, T0 + HOUR)) == ["on:2031-03-01T13:00:00Z"]


def test_stale_fencing_token_claims_nothing(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    old = store.acquire_lease("scheduler", "paused-leader", timedelta(milliseconds=300))
    assert old is not None
    time.sleep(0.5)
    new = store.acquire_lease("scheduler", "standby", timedelta(minutes=5))
    assert new is not None and new.token == old.token + 1
    before = snapshot(store)

    refused = store.claim_due(old, scheduler_id="paused-leader", limit=10, now=T0 + HOUR)

    assert refused.refused and refused.occurrences == []
    assert snapshot(store) == before
    # The new holder claims normally, and its token goes on the execution.
    claimed = store.claim_due(new, scheduler_id="standby", limit=10, now=T0 + HOUR)
    assert [o.fencing_token for o in claimed.occurrences] == [new.token]


def test_lease_of_another_holder_with_a_guessed_token_is_refused(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    real = lease(store, holder="leader")
    forged = type(real)(
        name=real.name, holder="intruder", token=real.token, expires_at=real.expires_at
    )
    result = store.claim_due(forged, scheduler_id="intruder", limit=10, now=T0 + HOUR)
    assert result.refused and store.executions() == []


def test_concurrent_edit_between_plan_and_write_wins(backend: Backend) -> None:
    claimer = backend.make()
    claimer.migrate()
    editor = backend.make()
    claimer.publish([hourly("edited"), hourly("untouched")])
    grant = lease(claimer)
    edits: list[str] = []

    def plan_then_edit(schedule: Schedule, now: datetime) -> Plan:
        result = plan(schedule, now)
        if schedule.name == "edited" and not edits:
            # An operator saves a change after the claim read the row, before it writes.
            editor.update(hourly("edited", task="tasks.new", trigger=IntervalTrigger("2h")))
            edits.append(schedule.name)
        return result

    claimer.planner = plan_then_edit  # type: ignore[attr-defined]
    result = claimer.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR)

    assert edits == ["edited"]
    assert result.conflicts == 1
    assert [o.schedule_name for o in result.occurrences] == ["untouched"]
    edited = editor.get("edited")
    assert edited.task == "tasks.new" and edited.trigger == IntervalTrigger("2h")
    assert edited.last_status is None and edited.total_run_count == 0  # the claim did not land
    assert editor.executions(name="edited") == []


def test_claim_after_an_edit_uses_the_new_definition(store: ScheduleStore) -> None:
    store.publish([hourly("a", args=[1])])
    grant = lease(store)
    assert [o.args for o in claim_all(store, grant, T0 + HOUR)] == [(1,)]
    store.update(hourly("a", task="tasks.renamed", args=[2]))
    changed = store.get("a")
    at = changed.next_run_at
    assert at is not None

    [occ] = claim_all(store, grant, at)

    assert (occ.task, occ.args) == ("tasks.renamed", (2,))
    [again] = claim_all(store, grant, at + HOUR)
    assert (again.task, again.args) == ("tasks.renamed", (2,))


def test_claim_never_inserts_a_key_twice_even_for_a_recreated_schedule(
    store: ScheduleStore,
) -> None:
    # The last line of defence: same name, same instant, same key -> nothing inserted.
    store.publish([hourly("again")])
    grant = lease(store)
    assert len(claim_all(store, grant, T0 + HOUR)) == 1
    store.delete("again")
    store.publish([hourly("again")])  # next_run_at is T0 + 1h once more

    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR)

    assert result.occurrences == []
    assert len(store.executions(name="again")) == 1
    assert store.get("again").next_run_at == T0 + 2 * HOUR


@pytest.mark.parametrize(
    ("policy", "expected_runs", "expected_missed"),
    [
        (MisfirePolicy.RUN_ONCE, [5], 4),
        (MisfirePolicy.SKIP, [], 5),
        (MisfirePolicy.RUN_ALL, [1, 2, 3, 4, 5], 0),
    ],
)
def test_misfire_policy_after_an_outage(
    store: ScheduleStore, policy: MisfirePolicy, expected_runs: list[int], expected_missed: int
) -> None:
    store.publish([hourly("late", misfire=policy)])
    grant = lease(store)
    # Down from T0 until five hours and ten minutes later: T0+1h..T0+5h are all late.
    now = T0 + 5 * HOUR + timedelta(minutes=10)

    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=now)

    assert [o.scheduled_at for o in result.occurrences] == [T0 + k * HOUR for k in expected_runs]
    assert result.missed == expected_missed
    after = store.get("late")
    assert after.next_run_at == T0 + 6 * HOUR
    assert after.missed_count == expected_missed
    assert after.total_run_count == len(expected_runs)
    assert after.last_run_at == (T0 + expected_runs[-1] * HOUR if expected_runs else T0)
    assert sorted(keys(store.executions(name="late"))) == [
        f"late:{iso_z(T0 + k * HOUR)}" for k in expected_runs
    ]
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=now).schedules_seen == 0


def test_run_all_is_capped_by_catch_up_limit(store: ScheduleStore) -> None:
    store.publish([hourly("capped", misfire=MisfirePolicy.RUN_ALL, catch_up_limit=3)])
    grant = lease(store)
    result = store.claim_due(
        grant, scheduler_id="s1", limit=10, now=T0 + 10 * HOUR + timedelta(minutes=18)
    )
    assert [o.scheduled_at for o in result.occurrences] == [T0 + k * HOUR for k in (8, 9, 10)]
    assert result.missed == 7


def test_one_off_schedule_is_disabled_after_its_claim(store: ScheduleStore) -> None:
    store.publish([hourly("once-ish", one_off=True)])
    grant = lease(store)
    assert len(claim_all(store, grant, T0 + 3 * HOUR)) == 1
    after = store.get("once-ish")
    assert after.enabled is False and after.next_run_at is None
    assert claim_all(store, grant, T0 + 9 * HOUR) == []


def test_once_trigger_fires_once_then_never(store: ScheduleStore) -> None:
    store.publish(
        [Schedule(name="once", task="t.once", trigger=OnceTrigger(T0 + HOUR), last_run_at=T0)]
    )
    grant = lease(store)
    assert keys(claim_all(store, grant, T0 + 2 * HOUR)) == ["once:2031-03-01T13:00:00Z"]
    assert store.get("once").next_run_at is None
    assert store.next_due_at() is None


def test_claimed_rows_are_resubmitted_through_pending(store: ScheduleStore) -> None:
    store.publish([hourly("a", args=["x"]), hourly("b", last_run_at=T0 + HOUR)])
    grant = lease(store)
    claimed = claim_all(store, grant, T0 + HOUR) + claim_all(store, grant, T0 + 2 * HOUR)
    # ... and the scheduler crashed before recording any outcome.

    pending = store.pending(limit=10)

    assert [p.idempotency_key for p in pending] == [o.idempotency_key for o in claimed]
    assert pending == claimed  # same ids, task, args, routing, token: resubmitted as claimed
    assert [p.idempotency_key for p in store.pending(limit=2)] == keys(claimed)[:2]
    # Rows the caller backs off from are left out, so the page reaches the rows after them.
    skipped = [claimed[0].execution_id, claimed[1].execution_id]
    rest = store.pending(limit=2, exclude=skipped)
    assert [p.idempotency_key for p in rest] == keys(claimed)[2:4]
    assert store.pending(limit=10, exclude=[o.execution_id for o in claimed]) == []


def test_record_outcomes_sets_statuses(store: ScheduleStore) -> None:
    store.publish([hourly("ok"), hourly("retry"), hourly("fail")])
    grant = lease(store)
    occ = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}

    store.record_outcomes(
        [
            SubmitOutcome(execution_id=occ["ok"].execution_id, ok=True, backend_task_id="bt-1"),
            SubmitOutcome(execution_id=occ["retry"].execution_id, ok=False, error="broker down"),
            SubmitOutcome(
                execution_id=occ["fail"].execution_id, ok=False, error="no such task", final=True
            ),
        ]
    )

    by_name = {e.schedule_name: e for e in store.executions()}
    ok, retry, fail = by_name["ok"], by_name["retry"], by_name["fail"]
    assert ok.status is ExecutionStatus.SUBMITTED and ok.backend_task_id == "bt-1"
    assert ok.submitted_at is not None and ok.attempts == 1 and ok.error is None
    assert retry.status is ExecutionStatus.CLAIMED and retry.attempts == 1
    assert retry.error == "broker down" and retry.submitted_at is None
    assert fail.status is ExecutionStatus.SUBMIT_FAILED and fail.error == "no such task"
    assert [p.schedule_name for p in store.pending(limit=10)] == ["retry"]
    assert store.get("ok").last_status == "submitted"
    assert store.get("fail").last_status == "submit_failed"

    # Only rows still claimed change: a late duplicate report does nothing.
    store.record_outcomes(
        [SubmitOutcome(execution_id=occ["fail"].execution_id, ok=True, backend_task_id="x")]
    )
    assert store.executions(name="fail")[0] == fail
    store.record_outcomes(
        [SubmitOutcome(execution_id=occ["retry"].execution_id, ok=True, backend_task_id="bt-2")]
    )
    retried = store.executions(name="retry")[0]
    assert retried.status is ExecutionStatus.SUBMITTED and retried.attempts == 2
    assert retried.error is None
    store.record_outcomes([])


@pytest.mark.parametrize("path", ["record_outcomes", "claim_due(record=...)"])
@pytest.mark.parametrize("all_ok", [True, False], ids=["successes", "with-a-failure"])
def test_an_outcome_lands_only_on_the_execution_with_its_key(
    store: ScheduleStore, path: str, all_ok: bool
) -> None:
    """Execution ids can repeat after a promotion (the new primary's sequence resumes near the
    last value it received), and a scheduler can hold a batch's outcomes across the switch: an
    outcome carrying its occurrence's key changes only the execution with that id AND that key,
    never another occurrence that now holds the id. Without a key (older callers), the id."""
    store.publish([hourly("a"), hourly("b"), hourly("later", start_at=T0)])
    grant = lease(store)
    first = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}
    a, b = first["a"], first["b"]
    stray = "a:held-across-a-promotion"  # the key of an occurrence the new database lost
    outcomes = [
        SubmitOutcome(  # a's id, another occurrence's key: must not touch a's row
            execution_id=a.execution_id, ok=True, backend_task_id="stray", idempotency_key=stray
        ),
        SubmitOutcome(
            execution_id=b.execution_id,
            ok=True,
            backend_task_id="bt-b",
            idempotency_key=b.idempotency_key,
        ),
    ]
    if not all_ok:
        outcomes.append(
            SubmitOutcome(
                execution_id=first["later"].execution_id,
                ok=False,
                error="no such task",
                final=True,
                idempotency_key=stray,
            )
        )
    if path == "record_outcomes":
        store.record_outcomes(outcomes)
    else:
        store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + 2 * HOUR, record=outcomes)

    by_key = {e.idempotency_key: e for e in store.executions()}
    untouched = by_key[a.idempotency_key]
    assert untouched.status is ExecutionStatus.CLAIMED
    assert untouched.backend_task_id is None and untouched.attempts == 0
    assert by_key[first["later"].idempotency_key].status is ExecutionStatus.CLAIMED
    assert by_key[b.idempotency_key].status is ExecutionStatus.SUBMITTED
    assert by_key[b.idempotency_key].backend_task_id == "bt-b"


def test_a_claim_writes_the_outcomes_it_is_given_before_claiming(store: ScheduleStore) -> None:
    """claim_due(record=...): the earlier batch's outcomes land as record_outcomes writes
    them (successes and failures alike), and the claim itself is unchanged."""
    store.publish([hourly("ok"), hourly("retry"), hourly("fail"), hourly("next", start_at=T0)])
    grant = lease(store)
    first = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}
    assert set(first) == {"ok", "retry", "fail", "next"}
    outcomes = [
        SubmitOutcome(execution_id=first["ok"].execution_id, ok=True, backend_task_id="bt-1"),
        SubmitOutcome(execution_id=first["retry"].execution_id, ok=False, error="broker down"),
        SubmitOutcome(
            execution_id=first["fail"].execution_id, ok=False, error="no such task", final=True
        ),
        SubmitOutcome(execution_id=first["next"].execution_id, ok=True, backend_task_id="bt-4"),
    ]

    second = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + 2 * HOUR, record=outcomes)

    assert not second.refused
    assert sorted(o.schedule_name for o in second.occurrences) == ["fail", "next", "ok", "retry"]
    assert {o.scheduled_at for o in second.occurrences} == {T0 + 2 * HOUR}
    by_key = {e.idempotency_key: e for e in store.executions()}
    ok = by_key[first["ok"].idempotency_key]
    assert ok.status is ExecutionStatus.SUBMITTED and ok.backend_task_id == "bt-1"
    assert ok.attempts == 1 and ok.submitted_at is not None
    retry = by_key[first["retry"].idempotency_key]
    assert retry.status is ExecutionStatus.CLAIMED and retry.error == "broker down"
    assert by_key[first["fail"].idempotency_key].status is ExecutionStatus.SUBMIT_FAILED
    assert by_key[first["next"].idempotency_key].status is ExecutionStatus.SUBMITTED
    for occ in second.occurrences:
        assert by_key[occ.idempotency_key].status is ExecutionStatus.CLAIMED
    # The second claim's CAS came after the bookkeeping: each schedule says 'claimed' again.
    assert {store.get(n).last_status for n in first} == {"claimed"}
    assert {store.get(n).total_run_count for n in first} == {2}


def test_a_refused_claim_still_writes_the_outcomes_it_is_given(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b")])
    old = store.acquire_lease("scheduler", "old-leader", timedelta(milliseconds=300))
    assert old is not None
    [occ_a, occ_b] = sorted(claim_all(store, old, T0 + HOUR), key=lambda o: o.schedule_name)
    time.sleep(0.5)
    new = store.acquire_lease("scheduler", "standby", timedelta(minutes=5))
    assert new is not None

    refused = store.claim_due(
        old,
        scheduler_id="old-leader",
        limit=10,
        now=T0 + 2 * HOUR,
        record=[SubmitOutcome(execution_id=occ_a.execution_id, ok=True, backend_task_id="bt")],
    )

    assert refused.refused and refused.occurrences == []
    [a] = store.executions(name="a")
    assert a.status is ExecutionStatus.SUBMITTED and a.backend_task_id == "bt"
    assert store.get("a").last_status == "submitted"
    # Nothing else was written: b stays claimed, no schedule advanced past its first run.
    [b] = store.executions(name="b")
    assert b.status is ExecutionStatus.CLAIMED and b.id == occ_b.execution_id
    assert store.get("a").next_run_at == store.get("b").next_run_at == T0 + 2 * HOUR


def test_record_finished_marks_the_execution_and_the_schedule(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b")])
    grant = lease(store)
    occ = {o.schedule_name: o for o in claim_all(store, grant, T0 + HOUR)}

    assert store.record_finished(occ["a"].idempotency_key, succeeded=True)
    assert store.record_finished(occ["b"].idempotency_key, succeeded=False, error="boom")
    assert not store.record_finished("nobody:2031-01-01T00:00:00Z", succeeded=True)

    a, b = store.executions(name="a")[0], store.executions(name="b")[0]
    assert a.status is ExecutionStatus.SUCCEEDED and a.finished_at is not None
    assert b.status is ExecutionStatus.FAILED and b.error == "boom"
    assert store.get("a").last_status == "succeeded"
    assert store.get("b").last_status == "failed"


def test_run_now_request_is_pending_as_a_manual_execution(store: ScheduleStore) -> None:
    store.publish([hourly("adhoc", args=[7])])
    at = T0 + timedelta(minutes=17)

    execution = store.request_run("adhoc", now=at)

    assert execution.kind is ExecutionKind.MANUAL
    assert execution.status is ExecutionStatus.CLAIMED
    assert execution.idempotency_key == "adhoc:manual:2031-03-01T12:17:00Z"
    assert execution.scheduled_at == at and execution.fencing_token is None
    [pending] = store.pending(limit=10)
    assert pending.execution_id == execution.id
    assert pending.kind is ExecutionKind.MANUAL and pending.args == (7,)
    # The same request at the same instant is the same run.
    assert store.request_run("adhoc", now=at).id == execution.id
    assert len(store.executions(name="adhoc")) == 1
    # It does not move the schedule.
    assert store.get("adhoc").next_run_at == T0 + HOUR
    with pytest.raises(LookupError):
        store.request_run("missing")


def test_executions_listing_filters_and_orders(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b")])
    grant = lease(store)
    claimed = claim_all(store, grant, T0 + 3 * HOUR)  # run_once: one each
    claimed += claim_all(store, grant, T0 + 4 * HOUR)
    by_key = {o.idempotency_key: o for o in claimed}
    store.record_outcomes(
        [SubmitOutcome(execution_id=by_key["a:2031-03-01T16:00:00Z"].execution_id, ok=True)]
    )

    everything = store.executions()
    assert [e.scheduled_at for e in everything] == sorted(
        (e.scheduled_at for e in everything), reverse=True
    )
    assert len(everything) == 4
    assert keys(store.executions(name="a")) == ["a:2031-03-01T16:00:00Z", "a:2031-03-01T15:00:00Z"]
    assert keys(store.executions(status=ExecutionStatus.SUBMITTED)) == ["a:2031-03-01T16:00:00Z"]
    assert keys(store.executions(name="b", status=ExecutionStatus.CLAIMED)) == [
        "b:2031-03-01T16:00:00Z",
        "b:2031-03-01T15:00:00Z",
    ]
    assert len(store.executions(limit=3)) == 3
    assert store.executions(name="nobody") == []


def _race_schedules(count: int) -> list[Schedule]:
    return [
        Schedule(
            name=f"race-{i}",
            task="tasks.race",
            trigger=IntervalTrigger("1s"),
            last_run_at=T0,
            misfire=MisfirePolicy.RUN_ALL,
            misfire_grace=timedelta(hours=1),
            catch_up_limit=1000,
        )
        for i in range(count)
    ]


def _expected_keys(count: int, seconds: int) -> set[str]:
    return {
        f"race-{i}:{iso_z(T0 + timedelta(seconds=k))}"
        for i in range(count)
        for k in range(1, seconds + 1)
    }


RACE_SCHEDULES = 50
RACE_ROUNDS = 20
RACE_STEP = 10  # seconds of schedule time per round: 50 x 200 = 10,000 occurrences


def test_two_threads_racing_claim_each_occurrence_exactly_once(backend: Backend) -> None:
    setup = backend.make()
    setup.migrate()
    setup.publish(_race_schedules(RACE_SCHEDULES))
    barrier = threading.Barrier(2)
    results: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claimer(name: str) -> None:
        try:
            store = backend.make()
            grant = lease(store, holder=name, name=name)  # each racer holds its own lease
            barrier.wait()
            got: list[str] = []
            for r in range(1, RACE_ROUNDS + 1):
                now = T0 + timedelta(seconds=r * RACE_STEP)
                got.extend(keys(claim_all(store, grant, now, limit=7)))
            results[name] = got
        except BaseException as exc:  # surfaced below, with the thread's traceback
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    all_keys = results["left"] + results["right"]
    duplicates = [k for k, n in Counter(all_keys).items() if n > 1]
    assert duplicates == []
    expected = _expected_keys(RACE_SCHEDULES, RACE_ROUNDS * RACE_STEP)
    assert set(all_keys) == expected
    assert len(setup.executions(limit=len(expected) + 10)) == len(expected)
    print(f"\n{backend.kind}: left {len(results['left'])}, right {len(results['right'])}")


def test_two_processes_racing_claim_each_occurrence_exactly_once(backend: Backend) -> None:
    if backend.url is None:
        pytest.skip("the memory store lives in one process")
    setup = backend.make()
    setup.migrate()
    setup.publish(_race_schedules(RACE_SCHEDULES))
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.conformance._race_worker",
                backend.url,
                lease_name,
                repr(start),
                str(RACE_ROUNDS),
                str(RACE_STEP),
                "7",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lease_name in ("proc-a", "proc-b")
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))

    all_keys = outputs[0] + outputs[1]
    assert [k for k, n in Counter(all_keys).items() if n > 1] == []
    expected = _expected_keys(RACE_SCHEDULES, RACE_ROUNDS * RACE_STEP)
    assert set(all_keys) == expected
    assert len(setup.executions(limit=len(expected) + 10)) == len(expected)
    print(f"\n{backend.kind}: a {len(outputs[0])}, b {len(outputs[1])}")


def test_claims_of_other_sources_are_the_same(store: ScheduleStore) -> None:
    store.create(hourly("admin-made", source=Source.ADMIN))
    grant = lease(store)
    assert keys(claim_all(store, grant, T0 + HOUR)) == ["admin-made:2031-03-01T13:00:00Z"]
