"""``manage.py goatbeat`` of an older release never overwrites a newer one's schedules
(#31 item 1), and a rename in ``schedules.py`` carries the schedule over (item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from goatbeat.core.model import Schedule
from tests.django.conftest import manage

SETTINGS = "tests.django.project.settings_release"


def release(number: int, *args: str, numbered: bool = True) -> Any:
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "GOATBEAT_TEST_RELEASE": str(number),
        "GOATBEAT_TEST_NUMBERED": "1" if numbered else "0",
    }
    return manage("goatbeat", *args, env=env)


def stored(store: Any) -> dict[str, Schedule]:
    return {s.name: s for s in store.list_schedules() if isinstance(s, Schedule)}


@pytest.mark.parametrize("numbered", [True, False], ids=["release-numbers", "no-numbers"])
def test_an_old_release_scheduler_and_commands_keep_the_new_release_schedules(
    store: Any, numbered: bool
) -> None:
    assert release(1, "publish", numbered=numbered).returncode == 0
    ping = stored(store)["ping"]
    new = release(2, "publish", numbered=numbered)
    assert new.returncode == 0, new.stderr
    assert "rename  ping -> ping-user" in new.stderr
    after = stored(store)
    assert sorted(after) == ["cleanup", "daily-report", "ping-user"]
    assert (after["ping-user"].id, after["ping-user"].next_run_at) == (ping.id, ping.next_run_at)

    # The old replica starts with the default flags (it publishes; prune_on_publish is on).
    old = release(1, "scheduler", "--once", numbered=numbered)
    assert old.returncode == 0, old.stderr
    assert "schedule.publication_superseded" in old.stderr
    [line] = [x for x in old.stderr.splitlines() if "schedule.publication_superseded" in x]
    assert "WARNING" in line
    for name in ("cleanup", "daily-report", "ping", "ping-user"):
        assert name in line
    listed = release(1, "schedule", "list", numbered=numbered)
    assert listed.returncode == 0 and "this code is older" in listed.stderr
    pruned = release(1, "schedule", "prune", numbered=numbered)
    assert pruned.returncode == 2 and "not pruning" in pruned.stderr
    assert pruned.stderr.count("\n") == 1, pruned.stderr

    final = stored(store)
    assert sorted(final) == ["cleanup", "daily-report", "ping-user"]
    assert final["daily-report"].trigger.to_spec()["expression"] == "30 8 * * *"
    assert all(s.enabled for s in final.values())
