"""Conformance: publishing, pruning and editing schedules (every store)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from goatbeat.core.errors import ConflictError, InvalidSchedule, ScheduleNotFound
from goatbeat.core.model import ExecutionStatus, Routing, Source
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease, snapshot


def test_publish_inserts_new_schedules_anchored_on_their_last_run(store: ScheduleStore) -> None:
    result = store.publish([hourly("b"), hourly("a", args=[1, "x"], kwargs={"k": [1, 2]})])

    assert sorted(result.created) == ["a", "b"]
    assert result.updated == [] and result.unchanged == []
    a = store.get("a")
    assert a.id is not None and a.version == 1
    assert a.source is Source.CODE and a.enabled
    assert a.next_run_at == T0 + HOUR
    assert a.last_run_at == T0
    assert a.args == (1, "x") and a.kwargs == {"k": [1, 2]}
    assert [s.name for s in store.list_schedules()] == ["a", "b"]


def test_new_schedule_without_last_run_starts_after_the_store_clock(store: ScheduleStore) -> None:
    before = store.now()
    store.publish([hourly("fresh", last_run_at=None)])
    after = store.now()

    next_run_at = store.get("fresh").next_run_at
    trigger = IntervalTrigger("1h")
    assert next_run_at is not None
    assert trigger.next_after(before) <= next_run_at <= trigger.next_after(after)  # type: ignore[operator]


def test_republishing_the_same_definition_writes_nothing(store: ScheduleStore) -> None:
    store.publish([hourly("a", routing=Routing(queue="q", headers={"h": 1}))])
    first = store.get("a")

    result = store.publish([hourly("a", routing=Routing(queue="q", headers={"h": 1}))])

    assert result.unchanged == ["a"] and result.created == [] and result.updated == []
    again = store.get("a")
    assert again.version == first.version
    assert again.updated_at == first.updated_at
    assert again.next_run_at == first.next_run_at


def test_republishing_tuples_counts_as_the_same_definition(store: ScheduleStore) -> None:
    # JSON turns tuples into lists; a redeploy must not see that as a change every time.
    store.publish([hourly("a", args=[(1, 2)], kwargs={"t": (3,)})])
    result = store.publish([hourly("a", args=[(1, 2)], kwargs={"t": (3,)})])
    assert result.unchanged == ["a"]


def test_changed_definition_bumps_version_and_recomputes_next_run_at(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("a")])
    first = store.get("a")
    assert first.next_run_at == T0 + HOUR

    before = store.now()
    result = store.publish([hourly("a", trigger=IntervalTrigger("7m"), description="faster")])
    after = store.now()

    assert result.updated == ["a"]
    changed = store.get("a")
    assert changed.version == first.version + 1
    assert changed.description == "faster"
    assert changed.trigger == IntervalTrigger("7m")
    # Recomputed from the store's now, not from the old next_run_at or the imported last run.
    trigger = IntervalTrigger("7m")
    assert changed.next_run_at is not None
    assert trigger.next_after(before) <= changed.next_run_at <= trigger.next_after(after)  # type: ignore[operator]
    assert changed.last_run_at == T0  # state is not definition: it stays


def test_enabled_flag_survives_republish(store: ScheduleStore) -> None:
    store.publish([hourly("a"), hourly("b", enabled=False)])
    assert store.get("b").enabled is False  # a new row takes the declared flag
    assert store.get("b").next_run_at is None

    store.set_enabled("a", False)
    store.publish([hourly("a"), hourly("b")])  # unchanged definitions, declared enabled=True
    assert store.get("a").enabled is False
    assert store.get("b").enabled is False

    store.publish([hourly("a", task="tasks.other")])  # a changed definition
    a = store.get("a")
    assert a.task == "tasks.other"
    assert a.enabled is False and a.next_run_at is None


def test_name_owned_by_another_source_is_refused_and_nothing_written(
    store: ScheduleStore,
) -> None:
    store.create(hourly("shared", source=Source.ADMIN))
    before = snapshot(store)

    with pytest.raises(InvalidSchedule) as excinfo:
        store.publish([hourly("brand-new"), hourly("shared")], source=Source.CODE)

    assert excinfo.value.field == "name"
    assert "shared" in str(excinfo.value)
    assert snapshot(store) == before
    with pytest.raises(ScheduleNotFound):
        store.get("brand-new")


def test_duplicate_names_in_one_publish_are_refused(store: ScheduleStore) -> None:
    with pytest.raises(InvalidSchedule) as excinfo:
        store.publish([hourly("twice"), hourly("twice", task="tasks.other")])
    assert excinfo.value.field == "name"
    assert store.list_schedules() == []


def test_publish_stores_the_source_it_is_given(store: ScheduleStore) -> None:
    store.publish([hourly("c1")], source=Source.CELERY)
    store.publish([hourly("k1")])
    assert store.get("c1").source is Source.CELERY
    assert [s.name for s in store.list_schedules(source=Source.CELERY)] == ["c1"]
    assert [s.name for s in store.list_schedules(source=Source.CODE)] == ["k1"]


def test_prune_disables_missing_schedules_of_that_source_only(store: ScheduleStore) -> None:
    store.publish([hourly("keep"), hourly("gone"), hourly("gone-too")])
    store.publish([hourly("celery-one")], source=Source.CELERY)
    store.create(hourly("admin-one", source=Source.ADMIN))
    version = store.get("gone").version

    pruned = store.prune(["keep"])

    assert pruned == ["gone", "gone-too"]
    gone = store.get("gone")
    assert gone.enabled is False and gone.next_run_at is None
    assert gone.version == version + 1
    assert store.get("keep").enabled
    assert store.get("celery-one").enabled and store.get("admin-one").enabled
    assert store.prune(["keep"]) == []  # already disabled: nothing to do
    assert store.prune([], source=Source.CELERY) == ["celery-one"]


def test_create_get_and_duplicate_name(store: ScheduleStore) -> None:
    created = store.create(
        hourly(
            "nightly",
            source=Source.ADMIN,
            trigger=CronTrigger("30 2 * * *", timezone="Europe/Paris"),
            routing=Routing(queue="low", priority=3, expires=60.0, headers={"x": "y"}),
            misfire_grace=timedelta(minutes=5),
            description="d",
        )
    )
    assert created.id is not None and created.version == 1
    assert created == store.get("nightly")
    assert created.routing == Routing(queue="low", priority=3, expires=60.0, headers={"x": "y"})
    assert created.timezone == "Europe/Paris"
    assert created.next_run_at == CronTrigger("30 2 * * *", timezone="Europe/Paris").next_after(T0)

    with pytest.raises(InvalidSchedule) as excinfo:
        store.create(hourly("nightly", source=Source.ADMIN))
    assert excinfo.value.field == "name"
    with pytest.raises(ScheduleNotFound):
        store.get("missing")


def test_update_replaces_the_definition_and_checks_the_expected_version(
    store: ScheduleStore,
) -> None:
    created = store.create(hourly("edit-me", source=Source.ADMIN))

    with pytest.raises(ConflictError):
        store.update(hourly("edit-me", task="tasks.x"), expected_version=created.version + 7)
    assert store.get("edit-me") == created

    updated = store.update(
        hourly("edit-me", task="tasks.x", trigger=IntervalTrigger("5m")),
        expected_version=created.version,
    )
    assert updated.task == "tasks.x"
    assert updated.version == created.version + 1
    assert updated.source is Source.ADMIN  # update replaces the definition, not the owner
    assert updated.next_run_at is not None and updated.next_run_at != created.next_run_at
    assert store.get("edit-me") == updated

    disabled = store.update(hourly("edit-me", task="tasks.x", enabled=False))
    assert disabled.enabled is False and disabled.next_run_at is None
    before = store.now()
    enabled = store.update(hourly("edit-me", task="tasks.x"))
    assert enabled.enabled and enabled.next_run_at is not None
    assert enabled.next_run_at > before

    with pytest.raises(ScheduleNotFound):
        store.update(hourly("never-created"))


def test_set_enabled_clears_and_recomputes_next_run_at(store: ScheduleStore) -> None:
    store.publish([hourly("toggle")])
    first = store.get("toggle")

    off = store.set_enabled("toggle", False)
    assert off.enabled is False and off.next_run_at is None
    assert off.version == first.version + 1
    assert store.next_due_at() is None

    before = store.now()
    on = store.set_enabled("toggle", True)
    after = store.now()
    assert on.enabled and on.version == off.version + 1
    trigger = IntervalTrigger("1h")
    assert on.next_run_at is not None
    assert trigger.next_after(before) <= on.next_run_at <= trigger.next_after(after)  # type: ignore[operator]
    assert store.next_due_at() == on.next_run_at
    with pytest.raises(ScheduleNotFound):
        store.set_enabled("missing", True)


def test_next_due_at_is_the_earliest_enabled_next_run(store: ScheduleStore) -> None:
    assert store.next_due_at() is None
    store.publish([hourly("late", last_run_at=T0 + HOUR), hourly("early"), hourly("off")])
    store.set_enabled("off", False)
    assert store.next_due_at() == T0 + HOUR


def test_delete_keeps_executions_as_history(store: ScheduleStore) -> None:
    store.publish([hourly("doomed")])
    grant = lease(store)
    claimed = claim_all(store, grant, T0 + HOUR)
    assert len(claimed) == 1

    store.delete("doomed")

    with pytest.raises(ScheduleNotFound):
        store.get("doomed")
    history = store.executions(name="doomed")
    assert [e.idempotency_key for e in history] == ["doomed:2031-03-01T13:00:00Z"]
    assert history[0].schedule_id is None
    assert store.pending(limit=10) == []  # nothing left to submit it with
    # ...so the never-submitted occurrence is closed, not left "claimed" forever.
    assert history[0].status is ExecutionStatus.SUBMIT_FAILED
    assert history[0].error is not None and "deleted" in history[0].error
    with pytest.raises(ScheduleNotFound):
        store.delete("doomed")
