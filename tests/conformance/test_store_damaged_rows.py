"""Conformance: one damaged row never stops the others (every store).

Rows are damaged behind the store's back, as a hand-written ``UPDATE`` or a bad restore would
(``helpers.write_raw``: SQL on SQLite and PostgreSQL, the test hook on the memory store, whose
rows are plain dicts and can hold the same values). A claim quarantines each damaged due row
once (``last_status='invalid'``, ``next_run_at`` cleared), names the column, and claims the
good schedules beside it; reading returns a DamagedSchedule instead of failing; saving a
valid definition over it, or enabling it once repaired, schedules it again.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from goatbeat.core.errors import DamagedRow
from goatbeat.core.misfire import Plan, plan
from goatbeat.core.model import (
    SCHEDULE_INVALID,
    DamagedSchedule,
    ExecutionStatus,
    Schedule,
    Source,
)
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from tests.conformance.conftest import Backend
from tests.conformance.helpers import (
    DAMAGE,
    HOUR,
    T0,
    claim_all,
    hourly,
    keys,
    lease,
    write_raw,
)


def damage_all(backend: Backend, store: ScheduleStore) -> dict[str, str]:
    """Publish "good" and one schedule per applicable damage; damage them; name -> column."""
    cases = {name: d for name, d in DAMAGE.items() if backend.kind in d[2]}
    store.publish([hourly("good"), *(hourly(name) for name in cases)])
    for name, (column, value, _) in cases.items():
        write_raw(backend, store, name, **{column: value})
    return {name: column for name, (column, _, _) in cases.items()}


def test_damaged_rows_are_quarantined_once_and_the_good_one_runs_every_hour(
    backend: Backend, store: ScheduleStore
) -> None:
    damaged = damage_all(backend, store)
    grant = lease(store)

    first = store.claim_due(grant, scheduler_id="s1", limit=100, now=T0 + HOUR)
    assert keys(first.occurrences) == ["good:2031-03-01T13:00:00Z"]
    assert {d.name: d.column for d in first.quarantined} == damaged
    assert first.schedules_seen == len(damaged) + 1
    for d in first.quarantined:
        assert d.name in str(d.error) and d.column in str(d.error)

    # Quarantined rows are no longer due: reported once, and the good one keeps its hours.
    later = [
        store.claim_due(grant, scheduler_id="s1", limit=100, now=T0 + k * HOUR) for k in (2, 3)
    ]
    assert [keys(r.occurrences) for r in later] == [
        ["good:2031-03-01T14:00:00Z"],
        ["good:2031-03-01T15:00:00Z"],
    ]
    assert all(r.quarantined == [] for r in later)
    assert [e.schedule_name for e in store.executions()] == ["good"] * 3

    rows = store.list_schedules()
    assert [s.name for s in rows] == sorted([*damaged, "good"])
    for row in rows:
        if row.name == "good":
            assert isinstance(row, Schedule) and row.total_run_count == 3
            continue
        assert isinstance(row, DamagedSchedule)
        assert row.column == damaged[row.name]
        assert (row.last_status, row.next_run_at, row.enabled) == (SCHEDULE_INVALID, None, True)
        assert row.quarantined
    assert store.next_due_at() == T0 + 4 * HOUR


def test_get_and_list_describe_a_damaged_row_without_claiming(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("good"), hourly("bad", args=[1])])
    write_raw(backend, store, "bad", args={"a": 1})

    bad = store.get("bad")
    assert isinstance(bad, DamagedSchedule)
    assert (bad.name, bad.column, bad.value) == ("bad", "args", {"a": 1})
    assert "not a JSON array" in bad.detail
    assert "args column holds {'a': 1}" in bad.describe()
    assert bad.last_status is None and bad.next_run_at == T0 + HOUR  # not yet quarantined
    assert bad.source == "code" and bad.task == "tasks.bad" and bad.enabled
    assert bad.columns["args"] == {"a": 1} and bad.columns["trigger"]["kind"] == "interval"
    assert bad.to_dict()["damaged"] == {
        "column": "args",
        "value": {"a": 1},
        "detail": bad.detail,
    }
    assert [type(s) for s in store.list_schedules(source=Source.CODE)] == [
        DamagedSchedule,
        Schedule,
    ]


def test_update_repairs_a_quarantined_row_and_schedules_it_again(
    backend: Backend, store: ScheduleStore
) -> None:
    store.create(hourly("bad", source=Source.ADMIN))
    write_raw(backend, store, "bad", kwargs=[1])
    grant = lease(store)
    assert claim_all(store, grant, T0 + HOUR) == []
    assert store.get("bad").last_status == SCHEDULE_INVALID

    store.update(hourly("bad", source=Source.ADMIN, kwargs={"fixed": True}))

    fixed = store.get("bad")
    assert isinstance(fixed, Schedule)
    assert fixed.last_status is None and fixed.kwargs == {"fixed": True}
    assert fixed.next_run_at is not None and fixed.next_run_at > store.now() - HOUR
    [occ] = claim_all(store, grant, fixed.next_run_at)
    assert occ.kwargs == {"fixed": True}


def test_enabling_a_row_repaired_by_hand_schedules_it_again(
    backend: Backend, store: ScheduleStore
) -> None:
    store.create(hourly("bad", source=Source.ADMIN))
    write_raw(backend, store, "bad", catch_up_limit=0)
    grant = lease(store)
    [quarantined] = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR).quarantined
    assert quarantined.column == "catch_up_limit"

    with pytest.raises(DamagedRow) as still:
        store.set_enabled("bad", True)
    assert still.value.field == "catch_up_limit" and "'bad'" in str(still.value)

    write_raw(backend, store, "bad", catch_up_limit=5)  # the operator fixes the column
    enabled = store.set_enabled("bad", True)

    assert isinstance(enabled, Schedule)
    assert enabled.last_status is None and enabled.catch_up_limit == 5
    assert enabled.next_run_at is not None
    assert len(claim_all(store, grant, enabled.next_run_at)) == 1


def test_a_damaged_row_can_be_disabled_and_deleted_but_not_run(
    backend: Backend, store: ScheduleStore
) -> None:
    store.create(hourly("bad", source=Source.ADMIN))
    write_raw(backend, store, "bad", headers="x")

    with pytest.raises(DamagedRow, match="headers"):
        store.request_run("bad")
    disabled = store.set_enabled("bad", False)
    assert isinstance(disabled, DamagedSchedule)
    assert not disabled.enabled and disabled.next_run_at is None
    assert store.set_enabled("bad", False).version == disabled.version  # nothing to change
    store.delete("bad")
    assert store.list_schedules() == []


def test_publish_repairs_a_quarantined_code_schedule(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("code")])
    write_raw(backend, store, "code", trigger={"kind": "nope"})
    grant = lease(store)
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR).quarantined

    result = store.publish([hourly("code")])

    assert result.updated == ["code"]
    repaired = store.get("code")
    assert isinstance(repaired, Schedule)
    assert repaired.last_status is None and repaired.next_run_at is not None
    # Repaired by hand to exactly the declaration: the quarantine alone makes publish rewrite it.
    write_raw(backend, store, "code", trigger={"kind": "nope"})
    store.set_enabled("code", False)
    write_raw(backend, store, "code", trigger=IntervalTrigger("1h").to_spec())
    assert store.publish([hourly("code")]).unchanged == ["code"]  # disabled, not quarantined


def test_runs_waiting_for_a_damaged_schedule_end_as_submit_failed(
    backend: Backend, store: ScheduleStore
) -> None:
    store.create(hourly("good", source=Source.ADMIN))
    store.create(hourly("bad", source=Source.ADMIN))
    run = store.request_run("bad", now=T0)
    store.request_run("good", now=T0)
    write_raw(backend, store, "bad", args={"a": 1})

    pending = store.pending(limit=10)

    assert [o.schedule_name for o in pending] == ["good"]
    [failed] = store.executions(name="bad")
    assert failed.id == run.id and failed.status is ExecutionStatus.SUBMIT_FAILED
    assert failed.error is not None and "args" in failed.error and "'bad'" in failed.error
    assert [o.schedule_name for o in store.pending(limit=10)] == ["good"]


def test_a_repair_landing_during_the_claim_wins_over_the_quarantine(backend: Backend) -> None:
    claimer = backend.make()
    claimer.migrate()
    editor = backend.make()
    claimer.publish([hourly("good")])
    claimer.create(hourly("bad", source=Source.ADMIN))
    write_raw(backend, claimer, "bad", args={"a": 1})
    grant = lease(claimer)

    def plan_then_repair(schedule: Schedule, now: datetime) -> Plan:
        # An operator saves a fixed definition after the claim read the rows.
        editor.update(hourly("bad", source=Source.ADMIN, args=[2]))
        return plan(schedule, now)

    claimer.planner = plan_then_repair  # type: ignore[attr-defined]
    result = claimer.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR)

    assert keys(result.occurrences) == ["good:2031-03-01T13:00:00Z"]
    assert result.quarantined == []
    repaired = editor.get("bad")
    assert isinstance(repaired, Schedule) and repaired.args == (2,)
    assert repaired.last_status is None and repaired.next_run_at is not None


def test_enabling_schedules_a_quarantined_row_whose_mark_was_overwritten(
    backend: Backend, store: ScheduleStore
) -> None:
    store.create(hourly("bad", source=Source.ADMIN))
    write_raw(backend, store, "bad", args={"a": 1})
    grant = lease(store)
    assert store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + HOUR).quarantined
    # An occurrence in flight when it was quarantined reports its outcome afterwards.
    write_raw(backend, store, "bad", last_status="submitted", args=[1])

    enabled = store.set_enabled("bad", True)

    assert isinstance(enabled, Schedule) and enabled.next_run_at is not None
    assert len(claim_all(store, grant, enabled.next_run_at)) == 1


def test_a_row_edited_by_hand_after_claims_is_read_afresh_without_a_version_bump(
    backend: Backend, store: ScheduleStore
) -> None:
    # A running scheduler has claimed both schedules (their definitions are cached); then an
    # UPDATE in psql, version untouched, damages one and re-times the other. The next claim
    # must see both edits: quarantine the damaged row, and run the other on its new trigger.
    store.publish([hourly("damaged"), hourly("retimed")])
    grant = lease(store)
    first = store.claim_due(grant, scheduler_id="s1", limit=100, now=T0 + HOUR)
    assert keys(first.occurrences) == [
        "damaged:2031-03-01T13:00:00Z",
        "retimed:2031-03-01T13:00:00Z",
    ]
    column, value, _ = DAMAGE["unknown-zone-column"]
    write_raw(backend, store, "damaged", **{column: value})
    write_raw(
        backend, store, "retimed", trigger={"kind": "interval", "every": 1800.0, "anchor": None}
    )

    second = store.claim_due(grant, scheduler_id="s1", limit=100, now=T0 + 2 * HOUR)

    assert [d.name for d in second.quarantined] == ["damaged"]
    assert keys(second.occurrences) == ["retimed:2031-03-01T14:00:00Z"]
    retimed = store.get("retimed")
    assert isinstance(retimed, Schedule) and retimed.trigger == IntervalTrigger("30m")
    # Advanced by the new trigger, not the cached one.
    assert retimed.next_run_at == T0 + 2 * HOUR + HOUR / 2
