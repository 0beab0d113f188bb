"""Conformance: completion reports, heartbeats, misses, status and schedule health (every store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import InvalidValue
from goatbeat.core.health import (
    STALE_RETENTION,
    Outcome,
    Role,
    SchedulerBeat,
    is_overdue,
)
from goatbeat.core.model import ExecutionStatus, MisfirePolicy, Miss, Schedule, SubmitOutcome
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import MemoryStore, SQLiteStore
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease, snapshot

MINUTE = timedelta(minutes=1)


def _claim_one(store: ScheduleStore, name: str, at: datetime) -> str:
    """Claim ``name`` at ``at`` and record its submission; its idempotency key."""
    grant = lease(store)
    [occ] = [o for o in claim_all(store, grant, at) if o.schedule_name == name]
    store.record_outcomes([SubmitOutcome(execution_id=occ.execution_id, ok=True)])
    return occ.idempotency_key


def _health(store: ScheduleStore, name: str) -> dict[str, object]:
    [h] = [h.to_dict() for h in store.schedule_health(overdue_after=HOUR) if h.name == name]
    return h


def test_worker_reports_move_the_execution_and_the_schedule(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    key = _claim_one(store, "a", T0 + HOUR)

    assert store.record_started(key, worker="host-1:42")
    running = store.executions(name="a")[0]
    assert running.status is ExecutionStatus.RUNNING and running.started_at is not None
    assert running.worker == "host-1:42"
    assert store.get("a").last_status == "running"

    assert store.record_completion(key, outcome=Outcome.RETRIED, error="boom", runtime=1.5)
    retried = store.executions(name="a")[0]
    assert (retried.status, retried.error, retried.runtime, retried.retries) == (
        ExecutionStatus.RETRIED,
        "boom",
        1.5,
        1,
    )
    assert retried.finished_at is not None
    assert store.get("a").last_status == "retried"

    assert store.record_started(key)
    assert store.record_completion(key, outcome="succeeded", error="ignored")
    done = store.executions(name="a")[0]
    assert done.status is ExecutionStatus.SUCCEEDED and done.error is None
    assert done.worker == "host-1:42" and done.retries == 1
    assert done.runtime is not None and 0 <= done.runtime < 3600  # started_at to now
    assert store.get("a").last_status == "succeeded"
    health = _health(store, "a")
    assert health["last_success_at"] is not None and health["last_failure_at"] is None
    assert health["consecutive_failures"] == 0


def test_failures_in_a_row_count_once_each_and_a_success_resets_them(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("f")])
    keys = [_claim_one(store, "f", T0 + n * HOUR) for n in (1, 2, 3)]
    for key in keys:
        assert store.record_completion(key, outcome=Outcome.FAILED, error="bad")
    # A second report of one failure (a redelivered message) is not a new failure.
    assert store.record_completion(keys[-1], outcome=Outcome.FAILED, error="bad again")
    health = _health(store, "f")
    assert health["consecutive_failures"] == 3 and health["last_failure_at"] is not None
    assert store.get("f").last_status == "failed"
    assert store.executions(name="f")[0].error == "bad again"

    key = _claim_one(store, "f", T0 + 4 * HOUR)
    store.record_completion(key, outcome=Outcome.SUCCEEDED)
    assert _health(store, "f")["consecutive_failures"] == 0


def test_an_older_run_finishing_late_keeps_the_latest_status(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    older = _claim_one(store, "a", T0 + HOUR)
    newer = _claim_one(store, "a", T0 + 2 * HOUR)
    store.record_completion(newer, outcome=Outcome.SUCCEEDED)
    store.record_completion(older, outcome=Outcome.FAILED, error="late")
    assert store.get("a").last_status == "succeeded"
    assert _health(store, "a")["consecutive_failures"] == 1


def test_reports_for_unknown_keys_match_nothing(store: ScheduleStore) -> None:
    assert not store.record_started("nobody:2031-01-01T00:00:00Z")
    assert not store.record_completion("nobody:2031-01-01T00:00:00Z", outcome=Outcome.FAILED)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"outcome": "exploded"}, "outcome"),
        ({"outcome": "failed", "runtime": -1.0}, "runtime"),
        ({"outcome": "failed", "runtime": float("nan")}, "runtime"),
        ({"outcome": "failed", "error": 42}, "error"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field(
    store: ScheduleStore, kwargs: dict[str, object], field: str
) -> None:
    store.publish([hourly("a")])
    key = _claim_one(store, "a", T0 + HOUR)
    before = snapshot(store)
    with pytest.raises(InvalidValue) as info:
        store.record_completion(key, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert snapshot(store) == before


def test_a_long_error_is_kept_to_its_end(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    key = _claim_one(store, "a", T0 + HOUR)
    store.record_completion(key, outcome=Outcome.FAILED, error="x" * 10_000 + "ValueError: end")
    error = store.executions(name="a")[0].error
    assert error is not None and len(error) == 4000 and error.endswith("ValueError: end")


def test_a_submission_recorded_after_a_fast_worker_keeps_the_worker_status(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("fast"), hourly("late")])
    occ = {o.schedule_name: o for o in claim_all(store, lease(store), T0 + HOUR)}
    store.record_completion(occ["fast"].idempotency_key, outcome=Outcome.SUCCEEDED)
    store.record_started(occ["late"].idempotency_key)

    store.record_outcomes(
        [
            SubmitOutcome(execution_id=occ["fast"].execution_id, ok=True, backend_task_id="bt-1"),
            SubmitOutcome(execution_id=occ["late"].execution_id, ok=False, error="timeout"),
        ]
    )

    fast = store.executions(name="fast")[0]
    assert fast.status is ExecutionStatus.SUCCEEDED and fast.submitted_at is not None
    assert (fast.backend_task_id, fast.attempts) == ("bt-1", 1)
    late = store.executions(name="late")[0]
    assert late.status is ExecutionStatus.RUNNING and late.error is None and late.attempts == 0
    assert store.pending(limit=10) == []


def _record_successes(store: ScheduleStore, prefix: str, *, with_a_failure: bool) -> Any:
    """Successes of a batch that mixes worker reports, a schedule with two occurrences and a
    row recorded already, recorded alone or beside one failure; what they leave behind."""
    names = [f"{prefix}-{n}" for n in ("plain", "fast", "started", "twice", "again", "fails")]
    store.publish(
        [hourly(n) for n in names if not n.endswith("twice")]
        + [hourly(f"{prefix}-twice", misfire=MisfirePolicy.RUN_ALL)]
    )
    occs = claim_all(store, lease(store), T0 + 2 * HOUR)
    by_name: dict[str, list[Any]] = {}
    for occ in occs:
        by_name.setdefault(occ.schedule_name.removeprefix(prefix + "-"), []).append(occ)
    assert len(by_name["twice"]) == 2
    store.record_completion(by_name["fast"][0].idempotency_key, outcome=Outcome.SUCCEEDED)
    store.record_started(by_name["started"][0].idempotency_key)
    again = by_name["again"][0]
    store.record_outcomes([SubmitOutcome(execution_id=again.execution_id, ok=True)])
    outcomes = [
        SubmitOutcome(execution_id=o.execution_id, ok=True, backend_task_id=f"bt-{i}")
        for i, o in enumerate(o for n, os in sorted(by_name.items()) if n != "fails" for o in os)
    ]
    failure = SubmitOutcome(execution_id=by_name["fails"][0].execution_id, ok=False, error="x")
    store.record_outcomes(outcomes + [failure] if with_a_failure else outcomes)
    schedules = {
        s.name.removeprefix(prefix + "-"): (s.last_status, s.missed_count, s.total_run_count)
        for s in store.list_schedules()
        if s.name.startswith(prefix + "-") and not s.name.endswith("fails")
    }
    executions = sorted(
        (
            e.schedule_name.removeprefix(prefix + "-"),
            e.scheduled_at,
            e.status,
            e.submitted_at is not None,
            e.backend_task_id,
            e.error,
            e.attempts,
        )
        for e in store.executions(limit=100)
        if e.schedule_name.startswith(prefix + "-") and not e.schedule_name.endswith("fails")
    )
    return schedules, executions


def test_a_batch_of_successes_is_recorded_as_the_same_successes_beside_a_failure(
    store: ScheduleStore,
) -> None:
    # Stores may record an all-success batch (nearly every batch) a faster way: same result.
    alone = _record_successes(store, "a", with_a_failure=False)
    mixed = _record_successes(store, "b", with_a_failure=True)
    assert alone == mixed
    schedules, executions = alone
    assert schedules["plain"][0] == "submitted" and schedules["twice"][0] == "submitted"
    assert schedules["fast"][0] == "succeeded" and schedules["started"][0] == "running"
    assert schedules["again"][0] == "submitted"
    assert {e[2] for e in executions if e[0] == "again"} == {ExecutionStatus.SUBMITTED}


def test_claims_report_their_misses_schedule_by_schedule(store: ScheduleStore) -> None:
    store.publish(
        [
            hourly("skipper", misfire=MisfirePolicy.SKIP),
            hourly("once"),
            hourly("fine", last_run_at=T0 + 4 * HOUR),
        ]
    )
    result = store.claim_due(lease(store), scheduler_id="s1", limit=10, now=T0 + 5 * HOUR)
    misses = {m.schedule_name: m for m in result.misses}
    assert set(misses) == {"skipper", "once"}
    # T0+5h is on time and claimed; the four late instants before it are dropped.
    assert misses["skipper"].count == 4 and misses["once"].count == 4
    assert misses["skipper"].first_at == T0 + HOUR and misses["skipper"].last_at == T0 + 4 * HOUR
    assert result.missed == sum(m.count for m in result.misses)


def test_heartbeats_list_every_scheduler_leader_first(store: ScheduleStore) -> None:
    store.heartbeat(SchedulerBeat(scheduler_id="b-standby", role=Role.STANDBY, pid=2))
    store.heartbeat(
        SchedulerBeat(
            scheduler_id="z-leader",
            role=Role.LEADER,
            fencing_token=7,
            hostname="web-1",
            pid=1,
            version="1.2.3",
        )
    )
    first = store.status().schedulers
    assert [(p.scheduler_id, p.role) for p in first] == [
        ("z-leader", Role.LEADER),
        ("b-standby", Role.STANDBY),
    ]
    leader = first[0]
    assert (leader.fencing_token, leader.hostname, leader.pid, leader.version) == (
        7,
        "web-1",
        1,
        "1.2.3",
    )
    assert not leader.stale and leader.expires_at > leader.heartbeat_at

    # A later beat keeps the start, moves the heartbeat, may change the role.
    store.heartbeat(SchedulerBeat(scheduler_id="b-standby", role=Role.LEADER, fencing_token=8))
    again = {p.scheduler_id: p for p in store.status().schedulers}
    assert again["b-standby"].role is Role.LEADER
    assert again["b-standby"].started_at == first[1].started_at
    assert again["b-standby"].heartbeat_at >= first[1].heartbeat_at

    store.remove_scheduler("z-leader")
    store.remove_scheduler("never-there")
    assert [p.scheduler_id for p in store.status().schedulers] == ["b-standby"]


def test_a_heartbeat_past_its_ttl_is_stale(store: ScheduleStore) -> None:
    store.heartbeat(
        SchedulerBeat(scheduler_id="gone", role=Role.STANDBY, ttl=timedelta(microseconds=1))
    )
    [gone] = store.status().schedulers
    assert gone.stale


def test_a_bad_heartbeat_is_refused_naming_the_field(store: ScheduleStore) -> None:
    with pytest.raises(InvalidValue) as info:
        store.heartbeat(SchedulerBeat(scheduler_id="", role=Role.LEADER))
    assert info.value.field == "scheduler_id"
    with pytest.raises(InvalidValue) as info:
        store.heartbeat(SchedulerBeat(scheduler_id="s", role="boss"))  # type: ignore[arg-type]
    assert info.value.field == "role"
    assert store.status().schedulers == []


def test_status_reports_the_lease_and_the_backlog(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b", last_run_at=T0 + HOUR), hourly("c", enabled=False)])
    empty = store.status(now=T0 + 90 * MINUTE)
    assert empty.lease is None
    assert (empty.due, empty.pending, empty.oldest_due_name) == (1, 0, "a")
    assert empty.oldest_due_at == T0 + HOUR and empty.lag == 30 * 60

    grant = lease(store)
    held = store.status(now=T0 + 90 * MINUTE)
    assert held.lease is not None and held.lease.valid
    assert (held.lease.holder, held.lease.token) == (grant.holder, grant.token)

    [occ] = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + 90 * MINUTE).occurrences
    claimed = store.status(now=T0 + 90 * MINUTE)
    assert (claimed.due, claimed.pending) == (0, 1)
    assert claimed.oldest_due_at == T0 + HOUR and claimed.oldest_due_name == "a"

    store.record_outcomes([SubmitOutcome(execution_id=occ.execution_id, ok=True)])
    done = store.status(now=T0 + 90 * MINUTE)
    assert (done.due, done.pending, done.oldest_due_at, done.lag) == (0, 0, None, 0.0)

    store.release_lease(grant.name, grant.holder, grant.token)
    released = store.status()
    assert released.lease is not None and not released.lease.valid


def test_status_counts_recent_failures_and_misses(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b")])
    occ = {o.schedule_name: o for o in claim_all(store, lease(store), T0 + HOUR)}
    store.record_outcomes(
        [SubmitOutcome(execution_id=occ["a"].execution_id, ok=False, error="down", final=True)]
    )
    store.record_outcomes([SubmitOutcome(execution_id=occ["b"].execution_id, ok=True)])
    store.record_completion(occ["b"].idempotency_key, outcome=Outcome.FAILED)

    assert store.status(now=T0 + 90 * MINUTE).failed == 2
    assert store.status(now=T0 + 3 * HOUR).failed == 0  # scheduled before the last hour
    assert store.status(now=T0 + 3 * HOUR, window=3 * HOUR).failed == 2

    store.record_misses(
        [Miss(schedule_id=occ["a"].schedule_id, schedule_name="a", count=3, first_at=T0)],
        scheduler_id="s1",
    )
    store.record_misses([], scheduler_id="s1")
    store.delete("b")  # the record of a deleted schedule's misses stays
    store.record_misses([Miss(schedule_id=occ["b"].schedule_id, schedule_name="b", count=2)],
                        scheduler_id="s1")  # fmt: skip
    assert store.status().missed == 5


def test_schedule_health_lists_what_matters_overdue_first(store: ScheduleStore) -> None:
    base = store.now().replace(microsecond=0)

    def every_hour(name: str, last: timedelta, **kw: object) -> Schedule:
        return Schedule(
            name=name,
            task="tasks.x",
            # On the phase of base, whatever the time (an interval never fires before its anchor).
            trigger=IntervalTrigger("1h", anchor=base - timedelta(days=1)),
            last_run_at=base - last,
            **kw,  # type: ignore[arg-type]
        )

    declared = [
        every_hour("ok", 2 * HOUR),
        every_hour("failing", 2 * HOUR),
        every_hour("quiet", timedelta(0)),
        every_hour("skipping", 5 * HOUR, misfire=MisfirePolicy.SKIP),
    ]
    store.publish(declared)
    grant = lease(store)
    found = {o.schedule_name: o for o in claim_all(store, grant, base - 30 * MINUTE)}
    # Due two hours ago and never claimed (no scheduler ran since).
    store.publish([*declared, every_hour("stuck", 3 * HOUR)])
    for name in ("ok", "failing"):
        store.record_outcomes([SubmitOutcome(execution_id=found[name].execution_id, ok=True)])
    store.record_completion(found["ok"].idempotency_key, outcome=Outcome.SUCCEEDED)
    store.record_completion(found["failing"].idempotency_key, outcome=Outcome.FAILED)

    health = store.schedule_health(overdue_after=10 * MINUTE, now=base)
    assert [h.name for h in health] == ["failing", "stuck", "ok", "skipping"]
    assert [h.name for h in health if h.overdue] == ["failing", "stuck"]
    for h in health:  # the stores' SQL says what the core's rule says
        assert h.overdue == is_overdue(
            enabled=h.enabled,
            next_run_at=h.next_run_at,
            last_run_at=h.last_run_at,
            last_success_at=h.last_success_at,
            last_failure_at=h.last_failure_at,
            now=base,
            overdue_after=10 * MINUTE,
        )
    by_name = {h.name: h for h in health}
    assert by_name["failing"].consecutive_failures == 1
    assert by_name["skipping"].missed_count >= 1
    assert [
        h.name for h in store.schedule_health(overdue_after=10 * MINUTE, limit=2, now=base)
    ] == [
        "failing",
        "stuck",
    ]
    # Long enough a wait, nothing is overdue; disabled schedules never are.
    assert not any(h.overdue for h in store.schedule_health(overdue_after=4 * HOUR, now=base))
    store.set_enabled("stuck", False)
    assert "stuck" not in {h.name for h in store.schedule_health(overdue_after=10 * MINUTE)}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_scheduler_stale_for_long_is_deleted_by_another_heartbeat(
    kind: str, tmp_path: Path
) -> None:
    clock = FakeClock(datetime(2031, 1, 1, tzinfo=UTC))
    store: ScheduleStore = (
        MemoryStore(clock) if kind == "memory" else SQLiteStore(tmp_path / "gb.db", clock)
    )
    store.migrate()
    ttl = timedelta(seconds=40)
    store.heartbeat(SchedulerBeat(scheduler_id="crashed", role=Role.LEADER, ttl=ttl))
    clock.advance((ttl + STALE_RETENTION).total_seconds())
    store.heartbeat(SchedulerBeat(scheduler_id="alive", role=Role.STANDBY, ttl=ttl))
    # Stale, still shown (a crashed replica is worth seeing), until STALE_RETENTION is past.
    assert [(p.scheduler_id, p.stale) for p in store.status().schedulers] == [
        ("crashed", True),
        ("alive", False),
    ]
    clock.advance(1)
    store.heartbeat(SchedulerBeat(scheduler_id="alive", role=Role.STANDBY, ttl=ttl))
    assert [p.scheduler_id for p in store.status().schedulers] == ["alive"]
    store.close()
