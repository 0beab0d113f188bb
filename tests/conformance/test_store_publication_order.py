"""Ordered code publications (schema 8, issue #31 item 1) and renames (item 2), on every store.

A code set published before the current one, or of a lower release number, is older code: its
publication writes nothing and says so. A declaration renamed from an old name takes the old
row over: same id, history, last run and phase."""

from __future__ import annotations

from datetime import timedelta

from goatbeat.core.model import Schedule, SubmitOutcome
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from tests.conformance.helpers import T0, claim_all, hourly, lease, snapshot

EVERY_10M = IntervalTrigger("10m")


def release_a() -> list[Schedule]:
    # Two declarations sharing one trigger object: PostgreSQL compares them as one combination.
    return [
        Schedule(name="daily-report", task="reports.daily", trigger=CronTrigger("0 9 * * *")),
        hourly("ping", trigger=EVERY_10M),
        hourly("pong", trigger=EVERY_10M),
    ]


def release_b() -> list[Schedule]:
    return [
        Schedule(name="daily-report", task="reports.daily", trigger=CronTrigger("30 8 * * *")),
        hourly("ping", trigger=EVERY_10M),
        hourly("pong", trigger=EVERY_10M),
        hourly("cleanup"),
    ]


def test_the_set_published_before_the_current_one_writes_nothing(store: ScheduleStore) -> None:
    first = store.publish(release_a())
    assert (first.generation, first.superseded) == (1, False)
    second = store.publish(release_b())
    assert second.generation == 2 and second.updated == ["daily-report"]
    before = snapshot(store)

    old = store.publish(release_a())

    assert old.superseded and old.generation == 2
    assert old.kept == ["cleanup", "daily-report"]
    assert "generation 1" in old.reason and "generation 2" in old.reason
    assert old.created == old.updated == old.orphaned == [] and not old.changed
    assert snapshot(store) == before
    assert store.get("daily-report").trigger == CronTrigger("30 8 * * *")
    # The newer code publishing again is the same release: nothing to do, no new generation.
    again = store.publish(release_b())
    assert (again.generation, again.superseded, again.unchanged) == (2, False, again.unchanged)
    assert sorted(again.unchanged) == ["cleanup", "daily-report", "ping", "pong"]
    # A dry run of the old code says the same, and writes nothing either.
    assert store.publish(release_a(), dry_run=True).superseded


def test_a_new_set_is_the_next_generation_and_rollback_goes_back_on_purpose(
    store: ScheduleStore,
) -> None:
    store.publish(release_a())
    store.publish(release_b())
    back = store.publish(release_a(), rollback=True)
    assert (back.superseded, back.generation, back.updated) == (False, 3, ["daily-report"])
    assert back.orphaned == ["cleanup"]
    # Now release b is the older one.
    assert store.publish(release_b()).superseded
    assert store.get("daily-report").trigger == CronTrigger("0 9 * * *")


def test_release_numbers_order_publications_whatever_was_published_before(
    store: ScheduleStore,
) -> None:
    # Release 8's code was never published here (a database made by release 9): only the
    # number tells it is older.
    assert store.publish(release_b(), release=9).release == 9
    old = store.publish(release_a(), release=8)
    assert old.superseded and old.reason.startswith("release 8 is older than release 9")
    assert store.get("daily-report").trigger == CronTrigger("30 8 * * *")
    # A publication without a number after numbered ones cannot say it is newer.
    assert store.publish(release_a()).superseded
    # The very schedules published last, under a lower number (or none): nothing to revert.
    for lower in (3, None):
        same = store.publish(release_b(), release=lower)
        assert not same.superseded and not same.changed and same.release == 9
    # The same code under a higher number is the same set: no write, the number recorded.
    same = store.publish(release_b(), release=10)
    assert (same.superseded, same.release, same.generation, same.changed) == (False, 10, 2, False)
    # Release 11 going back to release 8's schedules is newer (a revert deployed forward).
    forward = store.publish(release_a(), release=11)
    assert (forward.superseded, forward.updated) == (False, ["daily-report"])
    assert store.get("daily-report").trigger == CronTrigger("0 9 * * *")


def test_other_sources_are_not_ordered(store: ScheduleStore) -> None:
    store.publish(release_b(), release=5)
    from goatbeat.core.model import Source

    result = store.publish([hourly("imported")], source=Source.CELERY, follow_last_run=True)
    assert (result.created, result.superseded, result.generation) == (["imported"], False, None)


def test_a_rename_takes_the_old_row_over_with_history_last_run_and_phase(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("ping", trigger=EVERY_10M)])
    grant = lease(store)
    ran = [o for m in (10, 20) for o in claim_all(store, grant, T0 + timedelta(minutes=m))]
    assert [o.scheduled_at for o in ran] == [T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)]
    store.record_outcomes([SubmitOutcome(execution_id=o.execution_id, ok=True) for o in ran])
    old = store.get("ping")

    # The task is renamed too: a changed definition, but the same trigger keeps the phase.
    renamed = [hourly("ping-user", trigger=EVERY_10M, task="tasks.ping_user")]
    preview = store.publish(renamed, renames={"ping-user": "ping"}, dry_run=True)
    assert preview.renamed == {"ping-user": "ping"} and preview.orphaned == []
    assert store.get("ping").id == old.id  # a dry run renames nothing
    result = store.publish(renamed, renames={"ping-user": "ping"})

    assert result.renamed == {"ping-user": "ping"} and result.orphaned == []
    assert result.created == [] and result.updated == ["ping-user"]
    new = store.get("ping-user")
    assert (new.id, new.last_run_at, new.next_run_at) == (
        old.id,
        old.last_run_at,
        T0 + timedelta(minutes=30),
    )
    assert new.task == "tasks.ping_user"
    assert [s.name for s in store.list_schedules()] == ["ping-user"]
    history = store.executions(name="ping-user", limit=10)
    assert sorted(e.scheduled_at for e in history) == [o.scheduled_at for o in ran]
    # The next instant comes once, under the new name; nothing fires under the old one.
    later = [o for m in (30, 40) for o in claim_all(store, grant, T0 + timedelta(minutes=m))]
    assert [(o.schedule_name, o.scheduled_at) for o in later] == [
        ("ping-user", T0 + timedelta(minutes=30)),
        ("ping-user", T0 + timedelta(minutes=40)),
    ]
    # Published again with the rename still declared: nothing more happens.
    again = store.publish(renamed, renames={"ping-user": "ping"})
    assert again.renamed == {} and again.unchanged == ["ping-user"]


def test_a_rename_whose_new_name_exists_disables_the_old_name(store: ScheduleStore) -> None:
    # Published without renamed_from first (the case: both fired until prune).
    store.publish([hourly("ping", trigger=EVERY_10M)])
    store.publish([hourly("ping", trigger=EVERY_10M), hourly("ping-user", trigger=EVERY_10M)])
    result = store.publish([hourly("ping-user", trigger=EVERY_10M)], renames={"ping-user": "ping"})
    assert result.retired == ["ping"] and result.orphaned == []
    assert not store.get("ping").enabled and store.get("ping").next_run_at is None
    grant = lease(store)
    due = claim_all(store, grant, T0 + timedelta(minutes=15))
    assert [o.schedule_name for o in due] == ["ping-user"]
