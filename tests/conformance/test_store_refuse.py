"""Conformance: ``refuse`` ends the claimed executions of a schedule whose task is not
allowed and marks it; one not declared in code also leaves scheduling (every store). Nothing
happens when an edit named another task meanwhile."""

from __future__ import annotations

from goatbeat.core.model import ExecutionStatus, Source
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
