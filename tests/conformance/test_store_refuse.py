"""Conformance: ``refuse`` ends the claimed executions of a schedule whose task is not
allowed and marks it; one not declared in code also leaves scheduling (every store). Nothing
happens when an edit named another task meanwhile. ``refusals`` lists the schedules that stay
refused (``is_refused``) with the reason of the latest refusal and since when."""

from __future__ import annotations

from goatbeat.core.model import ExecutionStatus, Source, SubmitOutcome
from goatbeat.core.store import ScheduleStore
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease


def test_refuse_quarantines_the_schedule_and_ends_its_claimed_rows(store: ScheduleStore) -> None:
    store.publish([hourly("evil", task="os.system"), hourly("other")], source=Source.ADMIN)
    grant = lease(store)
    claimed = claim_all(store, grant, T0 + HOUR)
    store.request_run("evil")
    evil = store.get("evil")
    assert evil.id is not None

    assert store.refuse(evil.id, "os.system", reason="refused: 'os.system' is not a known task")

    after = store.get("evil")
    assert (after.last_status, after.next_run_at, after.enabled) == ("refused", None, True)
    assert after.version == evil.version + 1
    rows = store.executions(name="evil")
    assert len(rows) == 2
    assert {e.status for e in rows} == {ExecutionStatus.SUBMIT_FAILED}
    assert {e.error for e in rows} == {"refused: 'os.system' is not a known task"}
    assert [p.schedule_name for p in store.pending(limit=10)] == ["other"]
    assert len(claimed) == 2
    # Nothing is due any more; the other schedule is untouched.
    assert store.next_due_at() == store.get("other").next_run_at
    assert claim_all(store, grant, T0 + 5 * HOUR) and all(
        o.schedule_name == "other" for o in claim_all(store, grant, T0 + 6 * HOUR)
    )


def test_a_code_schedule_is_refused_occurrence_by_occurrence_and_keeps_its_next_run(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("code", task="os.system")])
    grant = lease(store)
    claim_all(store, grant, T0 + HOUR)
    before = store.get("code")
    assert before.id is not None

    assert store.refuse(before.id, "os.system", reason="refused: not here")

    after = store.get("code")
    assert (after.last_status, after.next_run_at) == ("refused", before.next_run_at)
    assert after.version == before.version
    (run,) = store.executions(name="code")
    assert (run.status, run.error) == (ExecutionStatus.SUBMIT_FAILED, "refused: not here")


def test_refuse_does_nothing_to_a_row_that_names_another_task(store: ScheduleStore) -> None:
    store.publish([hourly("a", task="os.system")])
    sid = store.get("a").id
    assert sid is not None
    store.publish([hourly("a", task="reports.daily")])  # fixed meanwhile
    assert not store.refuse(sid, "os.system", reason="refused")
    assert store.get("a").last_status is None
    assert not store.refuse(sid + 1000, "os.system", reason="refused")


def test_refusing_again_ends_new_rows_and_changes_nothing_else(store: ScheduleStore) -> None:
    store.publish([hourly("evil", task="os.system")], source=Source.ADMIN)
    sid = store.get("evil").id
    assert sid is not None
    assert store.refuse(sid, "os.system", reason="refused")
    version = store.get("evil").version
    store.request_run("evil")
    assert store.refuse(sid, "os.system", reason="refused again")
    (run,) = store.executions(name="evil")
    assert (run.status, run.error) == (ExecutionStatus.SUBMIT_FAILED, "refused again")
    assert store.get("evil").version == version


def test_refusals_list_what_stays_refused_with_the_reason_and_since_when(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("evil", task="os.system"), hourly("fine")], source=Source.ADMIN)
    assert store.refusals().total == 0
    grant = lease(store)
    claim_all(store, grant, T0 + HOUR)
    evil = store.get("evil")
    assert evil.id is not None
    assert store.refuse(evil.id, "os.system", reason="refused: 'os.system' is not a known task")
    (run,) = store.executions(name="evil")

    found = store.refusals()
    assert found.total == 1
    (refusal,) = found.schedules
    assert (refusal.name, refusal.task, refusal.source) == ("evil", "os.system", "admin")
    assert refusal.reason == "refused: 'os.system' is not a known task"
    assert refusal.since == run.claimed_at
    assert store.refusals(name="evil") == found
    assert store.refusals(name="fine").total == 0

    # Stopped on purpose: not refused; enabled again, it is scheduled (no longer refused).
    store.pause("evil")
    assert store.refusals().total == 0
    store.resume("evil")
    assert store.refusals().total == 1
    store.set_enabled("evil", False)
    assert store.refusals().total == 0
    store.set_enabled("evil", True)
    assert store.get("evil").next_run_at is not None
    assert store.refusals().total == 0


def test_a_code_schedule_is_refused_since_its_first_refusal_after_a_run(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("code", task="os.system")])
    grant = lease(store)
    sid = store.get("code").id
    assert sid is not None
    first = claim_all(store, grant, T0 + HOUR)
    store.record_outcomes([SubmitOutcome(execution_id=first[0].execution_id, ok=True)])
    assert store.refusals().total == 0  # it ran
    claim_all(store, grant, T0 + 2 * HOUR)
    assert store.refuse(sid, "os.system", reason="refused: first")
    claim_all(store, grant, T0 + 3 * HOUR)
    assert store.refuse(sid, "os.system", reason="refused: second")
    runs = sorted(store.executions(name="code"), key=lambda e: e.scheduled_at)
    assert [e.status for e in runs] == [
        ExecutionStatus.SUBMITTED,
        ExecutionStatus.SUBMIT_FAILED,
        ExecutionStatus.SUBMIT_FAILED,
    ]

    (refusal,) = store.refusals().schedules
    assert (refusal.source, refusal.reason) == ("code", "refused: second")  # the latest
    assert refusal.since == runs[1].claimed_at  # the first refusal since it ran
    # A scheduler that knows the task claims and submits it: no longer refused.
    (again,) = claim_all(store, grant, T0 + 4 * HOUR)
    store.record_outcomes([SubmitOutcome(execution_id=again.execution_id, ok=True)])
    assert store.refusals().total == 0


def test_refusals_count_every_refused_schedule_and_list_the_first_by_name(
    store: ScheduleStore,
) -> None:
    names = ["c", "a", "b"]
    store.publish([hourly(n, task="os.system") for n in names], source=Source.ADMIN)
    for name in names:
        sid = store.get(name).id
        assert sid is not None and store.refuse(sid, "os.system", reason="refused")
    found = store.refusals(limit=2)
    assert found.total == 3 and [r.name for r in found.schedules] == ["a", "b"]
    # No refused run recorded (refused before any claim): since the row was parked.
    assert all(r.reason is None and r.since is not None for r in found.schedules)
