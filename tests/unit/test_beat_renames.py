"""``renamed_from=`` on a declaration (#31 item 2): what Beat refuses before publishing."""

from __future__ import annotations

from pathlib import Path

import pytest

from goatbeat.beat import Beat
from goatbeat.core.errors import InvalidSchedule


def test_a_rename_names_another_schedule_once() -> None:
    beat = Beat("memory://")
    with pytest.raises(InvalidSchedule, match="cannot be renamed from itself"):
        beat.schedule(name="ping", task="json.dumps", every="10s", renamed_from="ping")
    with pytest.raises(InvalidSchedule, match="is not a name"):
        beat.schedule(name="ping", task="json.dumps", every="10s", renamed_from=" ")
    beat.schedule(name="ping-user", task="json.dumps", every="10s", renamed_from="ping")
    with pytest.raises(InvalidSchedule, match="both say they were 'ping' before"):
        beat.schedule(name="ping-admin", task="json.dumps", every="10s", renamed_from="ping")


def test_the_old_name_declared_still_is_refused_at_publish() -> None:
    beat = Beat("memory://")
    beat.schedule(name="ping-user", task="json.dumps", every="10s", renamed_from="ping")
    beat.schedule(name="ping", task="json.dumps", every="10s")
    beat.migrate()
    with pytest.raises(InvalidSchedule, match="'ping' is still declared"):
        beat.publish()
    assert beat.store.list_schedules() == []


def test_publishing_a_rename_takes_the_row_over_and_the_old_release_cannot_undo_it(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'gb.db'}"  # one database, two releases
    old = Beat(database)
    old.schedule(name="ping", task="json.dumps", every="10s")
    old.migrate()
    old.publish()
    new = Beat(database)
    new.schedule(name="ping-user", task="json.dumps", every="10s", renamed_from="ping")
    result = new.publish()
    assert result.renamed == {"ping-user": "ping"} and result.orphaned == []
    assert [s.name for s in new.store.list_schedules()] == ["ping-user"]
    # The release before publishing again is older code now: nothing comes back.
    assert old.publish().superseded
    assert [s.name for s in old.store.list_schedules()] == ["ping-user"]
    old.close()
    new.close()
