"""What a publication reports (every store): each changed field old -> new, the orphaned code
schedules, a dry run that writes nothing; and run-now executions as first-class runs."""

from __future__ import annotations

from datetime import timedelta

from goatbeat.core.model import ExecutionStatus, Schedule, Source, SubmitOutcome
from goatbeat.core.store import FieldChange, ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from tests.conformance.conftest import Backend
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease, snapshot, write_raw


def daily(name: str = "report", cron: str = "0 9 * * *", **kw: object) -> Schedule:
    return Schedule(name=name, task="reports.generate", trigger=CronTrigger(cron), **kw)  # type: ignore[arg-type]


def test_publish_reports_each_changed_field_old_and_new(store: ScheduleStore) -> None:
    created = store.publish([daily(), hourly("ping")])
    assert created.created == ["report", "ping"] and created.changes == {}

    result = store.publish([daily(cron="30 8 * * *", description="at half past"), hourly("ping")])

    assert result.updated == ["report"] and result.unchanged == ["ping"]
    assert result.changes == {
        "report": [
            FieldChange(
                field="trigger",
                old={"kind": "cron", "expression": "0 9 * * *", "timezone": "UTC"},
                new={"kind": "cron", "expression": "30 8 * * *", "timezone": "UTC"},
            ),
            FieldChange(field="description", old="", new="at half past"),
        ]
    }
    assert [c.describe() for c in result.changes["report"]] == [
        "trigger: cron 0 9 * * * (UTC) -> cron 30 8 * * * (UTC)",
        'description: "" -> "at half past"',
    ]
    assert store.get("report").trigger == CronTrigger("30 8 * * *")


def test_a_changed_window_and_routing_are_reported_as_stored(store: ScheduleStore) -> None:
    store.publish([hourly("ping", args=[1])])
    start = T0 + timedelta(days=1)

    result = store.publish([hourly("ping", args=[2], start_at=start)])

    assert {c.field: (c.old, c.new) for c in result.changes["ping"]} == {
        "args": ([1], [2]),
        "start_at": (None, start.isoformat()),
    }


def test_publish_reports_enabled_code_schedules_it_does_not_declare_as_orphaned(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("kept"), hourly("removed"), hourly("off"), hourly("also-removed")])
    store.set_enabled("off", False)
    store.create(hourly("by-hand", source=Source.ADMIN))
    store.publish([hourly("imported")], source=Source.CELERY)

    result = store.publish([hourly("kept")])

    assert result.orphaned == ["also-removed", "removed"]  # not the disabled one, nor others
    assert result.unchanged == ["kept"]
    # Reported, never touched: they keep running until pruned.
    assert store.get("removed").enabled is True
    assert store.get("removed").next_run_at == T0 + HOUR
    # Orphans are a code notion: an import of another source reports none.
    assert store.publish([], source=Source.CELERY).orphaned == []
    assert store.prune({"kept"}) == ["also-removed", "removed"]
    assert store.publish([hourly("kept")]).orphaned == []


def test_a_dry_run_reports_the_same_and_writes_nothing(store: ScheduleStore) -> None:
    store.publish([daily(), hourly("gone")])
    before = snapshot(store)
    declared = [daily(cron="30 8 * * *"), hourly("new")]

    preview = store.publish(declared, dry_run=True)

    assert snapshot(store) == before
    assert preview.dry_run is True
    assert (preview.created, preview.updated, preview.orphaned) == (["new"], ["report"], ["gone"])
    done = store.publish(declared)
    assert done.dry_run is False
    assert (done.created, done.updated, done.changes, done.orphaned) == (
        preview.created,
        preview.updated,
        preview.changes,
        preview.orphaned,
    )


def test_a_dry_run_on_an_empty_store_creates_nothing(store: ScheduleStore) -> None:
    assert store.publish([hourly("a")], dry_run=True).created == ["a"]
    assert store.list_schedules() == []


def test_republishing_a_quarantined_row_names_the_repair(
    backend: Backend, store: ScheduleStore
) -> None:
    store.publish([hourly("code")])
    write_raw(backend, store, "code", trigger={"kind": "nope"})
    assert store.claim_due(lease(store), scheduler_id="s1", limit=10, now=T0 + HOUR).quarantined

    result = store.publish([hourly("code")])

    changes = {c.field: (c.old, c.new) for c in result.changes["code"]}
    assert changes["trigger"] == ({"kind": "nope"}, IntervalTrigger("1h").to_spec())
    assert changes["last_status"] == ("invalid", None)
    assert "trigger: " in result.changes["code"][0].describe()


# -- run-now executions -----------------------------------------------------------------------


def test_the_leader_claims_a_run_now_with_its_id_and_token_and_it_counts_as_a_run(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("adhoc")])
    grant = lease(store, holder="leader-1")
    at = T0 + timedelta(minutes=17)
    execution = store.request_run("adhoc", now=at)
    assert execution.scheduler_id is None and execution.fencing_token is None
    [pending] = store.pending(limit=10)
    assert pending.fencing_token is None

    before = store.now()
    assert store.claim_manual_runs(
        grant, scheduler_id="leader-1", execution_ids=[pending.execution_id]
    ) == [pending.execution_id]
    after = store.now()

    [claimed] = store.executions(name="adhoc")
    assert claimed.status is ExecutionStatus.CLAIMED
    assert (claimed.scheduler_id, claimed.fencing_token) == ("leader-1", grant.token)
    # claimed_at is when the leader claimed it (fencing tokens follow claim order); the
    # request's instant stays in scheduled_at and the key.
    assert before <= claimed.claimed_at <= after
    assert claimed.scheduled_at == at
    schedule = store.get("adhoc")
    assert isinstance(schedule, Schedule)
    assert schedule.last_run_at == at and schedule.last_status == "claimed"
    assert schedule.total_run_count == 1
    assert schedule.next_run_at == T0 + HOUR  # the schedule's own phase is untouched
    # A resubmission carries the claim's token, as for a claimed occurrence.
    [again] = store.pending(limit=10)
    assert again.fencing_token == grant.token
    store.record_outcomes([SubmitOutcome(execution_id=execution.id, ok=True)])
    [done] = store.executions(name="adhoc")
    assert done.status is ExecutionStatus.SUBMITTED and done.scheduler_id == "leader-1"
    assert store.get("adhoc").last_status == "submitted"


def test_a_run_now_is_claimed_once_and_never_with_a_stale_lease(store: ScheduleStore) -> None:
    store.publish([hourly("adhoc")])
    old = lease(store, holder="leader-1")
    execution = store.request_run("adhoc", now=T0 + timedelta(minutes=5))
    before = snapshot(store)
    store.release_lease("scheduler", "leader-1", old.token)
    new = lease(store, holder="leader-2")

    assert store.claim_manual_runs(old, scheduler_id="leader-1", execution_ids=[execution.id]) == []
    assert snapshot(store) == before
    assert store.claim_manual_runs(new, scheduler_id="leader-2", execution_ids=[execution.id]) == [
        execution.id
    ]
    assert store.claim_manual_runs(new, scheduler_id="leader-2", execution_ids=[execution.id]) == []
    [claimed] = store.executions(name="adhoc")
    assert (claimed.scheduler_id, claimed.fencing_token) == ("leader-2", new.token)
    assert store.get("adhoc").total_run_count == 1


def test_only_unclaimed_run_nows_are_claimed_and_last_run_at_never_moves_back(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("both")])
    grant = lease(store, holder="claimer")
    [occ] = claim_all(store, grant, T0 + HOUR)
    early = store.request_run("both", now=T0 + timedelta(minutes=1))

    claimed = store.claim_manual_runs(
        grant, scheduler_id="claimer", execution_ids=[occ.execution_id, early.id, 10_000]
    )

    assert claimed == [early.id]  # a scheduled occurrence and an unknown id are not run-nows
    schedule = store.get("both")
    assert schedule.last_run_at == T0 + HOUR  # the claim's instant, later than the manual one
    assert schedule.total_run_count == 2
    assert store.claim_manual_runs(grant, scheduler_id="claimer", execution_ids=[]) == []
