"""Conformance: publishing what another scheduler ran (``follow_last_run``), and telling an
operator's edit from the publish's own write (``edited_since_publish``). Every store."""

from __future__ import annotations

from datetime import timedelta

from goatbeat.core.store import FieldChange, ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, lease

MINUTE = timedelta(minutes=1)


def test_a_changed_definition_follows_the_later_last_run_not_now(store: ScheduleStore) -> None:
    # The rehearsal import anchored the interval on celery's last run then; celery ran again,
    # and the cutover import brings the new anchor: the next run counts from it, even though
    # it is in the past (the occurrence due in the gap is still owed).
    store.publish([hourly("i", trigger=IntervalTrigger("10m", anchor=T0))], follow_last_run=True)
    later = T0 + 3 * timedelta(minutes=10)
    result = store.publish(
        [hourly("i", trigger=IntervalTrigger("10m", anchor=later), last_run_at=later)],
        follow_last_run=True,
    )
    assert result.updated == ["i"]
    row = store.get("i")
    assert row.last_run_at == later
    assert row.next_run_at == later + timedelta(minutes=10)


def test_without_follow_last_run_a_changed_definition_counts_from_now(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("i", trigger=IntervalTrigger("10m", anchor=T0))])
    later = T0 + timedelta(minutes=30)
    before = store.now()
    store.publish([hourly("i", trigger=IntervalTrigger("10m", anchor=later), last_run_at=later)])
    row = store.get("i")
    assert row.last_run_at == T0  # a plain publish never moves state
    assert row.next_run_at is not None and row.next_run_at > before


def test_the_same_definition_with_a_later_last_run_is_refreshed(store: ScheduleStore) -> None:
    cron = CronTrigger("*/5 * * * *")
    store.publish([hourly("c", trigger=cron, last_run_at=T0)], follow_last_run=True)
    first = store.get("c")
    assert first.next_run_at == T0 + 5 * MINUTE

    later = T0 + 22 * MINUTE  # celery ran the 20-minute instant since (a bit late)
    result = store.publish([hourly("c", trigger=cron, last_run_at=later)], follow_last_run=True)

    assert result.refreshed == ["c"] and result.updated == [] and result.unchanged == []
    row = store.get("c")
    assert row.last_run_at == later
    assert row.next_run_at == T0 + 25 * MINUTE
    assert row.version == first.version + 1


def test_an_older_last_run_never_moves_the_phase_back(store: ScheduleStore) -> None:
    # goatbeat ran it since celery's last run: re-importing celery's stale last run is a no-op.
    cron = CronTrigger("*/5 * * * *")
    store.publish([hourly("c", trigger=cron, last_run_at=T0)], follow_last_run=True)
    grant = lease(store)
    claimed = claim_all(store, grant, T0 + 16 * MINUTE)
    assert [o.scheduled_at for o in claimed] == [T0 + 15 * MINUTE]  # run_once: the latest
    state = store.get("c")

    result = store.publish([hourly("c", trigger=cron, last_run_at=T0)], follow_last_run=True)

    assert result.unchanged == ["c"]
    assert store.get("c") == state


def test_goatbeats_later_run_wins_over_celerys_on_a_changed_definition(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("c", trigger=CronTrigger("*/5 * * * *"), last_run_at=T0)])
    grant = lease(store)
    claim_all(store, grant, T0 + 11 * MINUTE)  # goatbeat ran the 10-minute instant
    store.publish(
        [hourly("c", trigger=CronTrigger("*/2 * * * *"), last_run_at=T0 + MINUTE)],
        follow_last_run=True,
    )
    row = store.get("c")
    assert row.last_run_at == T0 + 10 * MINUTE
    assert row.next_run_at == T0 + 12 * MINUTE


def test_a_disabled_row_records_the_later_run_and_stays_unplanned(store: ScheduleStore) -> None:
    store.publish([hourly("d", enabled=False)], follow_last_run=True)
    result = store.publish(
        [hourly("d", enabled=False, last_run_at=T0 + HOUR)], follow_last_run=True
    )
    assert result.refreshed == ["d"]
    row = store.get("d")
    assert (row.enabled, row.next_run_at, row.last_run_at) == (False, None, T0 + HOUR)


def test_an_import_follows_the_sources_enabled_flag_when_the_source_changed_it(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("s")], follow_last_run=True)
    result = store.publish([hourly("s", enabled=False)], follow_last_run=True)
    assert result.updated == ["s"]
    assert [c.to_dict() for c in result.changes["s"]] == [
        FieldChange(field="enabled", old=True, new=False).to_dict()
    ]
    assert (store.get("s").enabled, store.get("s").next_run_at) == (False, None)
    assert store.edited_since_publish(["s"]) == set()
    result = store.publish([hourly("s")], follow_last_run=True)
    assert result.updated == ["s"] and store.get("s").enabled
    assert store.get("s").next_run_at is not None
    # The same flag again: nothing to follow.
    assert store.publish([hourly("s")], follow_last_run=True).unchanged == ["s"]


def test_an_operators_toggle_is_kept_while_the_source_keeps_its_flag(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("o")], follow_last_run=True)
    store.set_enabled("o", False)
    assert store.publish([hourly("o")], follow_last_run=True).unchanged == ["o"]
    assert not store.get("o").enabled
    # The source disables it too: they agree. Then the source enables it: followed.
    store.publish([hourly("o", enabled=False)], follow_last_run=True)
    assert not store.get("o").enabled
    result = store.publish([hourly("o")], follow_last_run=True)
    assert result.updated == ["o"] and store.get("o").enabled


def test_a_code_publication_never_changes_the_enabled_flag(store: ScheduleStore) -> None:
    store.publish([hourly("c")])
    result = store.publish([hourly("c", enabled=False)])
    assert result.unchanged == ["c"] and store.get("c").enabled


def test_an_edit_since_the_publish_is_reported_and_a_publish_clears_it(
    store: ScheduleStore,
) -> None:
    store.publish([hourly("a"), hourly("b")])
    assert store.edited_since_publish(["a", "b", "missing"]) == set()

    store.update(hourly("a", description="edited in the admin"))
    store.set_enabled("b", False)  # a toggle is not an edit of the definition

    assert store.edited_since_publish(["a", "b"]) == {"a"}
    store.publish([hourly("a", description="from the source again")])
    assert store.edited_since_publish(["a"]) == set()


def test_an_edit_back_to_the_published_definition_is_no_edit(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    store.update(hourly("a", description="x"))
    store.update(hourly("a"))
    assert store.edited_since_publish(["a"]) == set()


def test_schedules_created_in_the_admin_are_never_reported(store: ScheduleStore) -> None:
    store.create(hourly("admin-made"))
    store.update(hourly("admin-made", description="changed"))
    assert store.edited_since_publish(["admin-made"]) == set()
