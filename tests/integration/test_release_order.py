"""Two real ``python -m goatbeat scheduler`` processes of two code versions on one PostgreSQL
database (issue #31 items 1 and 2): a rolling deploy from release 1 to release 2, started in
both orders, and the old replica restarting after the new one published.

Release 2 changes ``daily-report`` from ``0 9 * * *`` to ``30 8 * * *``, renames ``ping`` to
``ping-user`` (``renamed_from="ping"``) and adds ``cleanup``. Both run with the default flags
(they publish at start) and ``prune_on_publish`` on, the most dangerous combination: the old
code must never write. Checked: the stored definitions are release 2's whatever the order, the
old process says so at WARNING naming the schedules, and every instant of ping / ping-user is
dispatched exactly once across the rename, by whichever process leads.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.model import Schedule
from goatbeat.stores.postgres import PostgresStore
from tests.integration.test_cli import write_app
from tests.integration.test_multi_scheduler import Cluster, instants

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HEAD = """
    from goatbeat.beat import Beat
    from tests.integration.test_multi_scheduler import FileRecordingSubmitter

    beat = Beat(
        "memory://", submitter=FileRecordingSubmitter(), settings={"prune_on_publish": True}
    )
"""
RELEASE_1 = (
    HEAD
    + """
    beat.schedule(name="daily-report", task="json.dumps", cron="0 9 * * *")
    beat.schedule(
        name="ping", task="json.dumps", every="1s", misfire="run_all", misfire_grace="60s"
    )
"""
)
RELEASE_2 = (
    HEAD
    + """
    beat.schedule(name="daily-report", task="json.dumps", cron="30 8 * * *")
    beat.schedule(
        name="ping-user",
        renamed_from="ping",
        task="json.dumps",
        every="1s",
        misfire="run_all",
        misfire_grace="60s",
    )
    beat.schedule(name="cleanup", task="json.dumps", every="1h")
"""
)
OLD_KEPT = ["cleanup", "daily-report", "ping", "ping-user"]
"""What release 1 would change: daily-report back, ping created again, the rest pruned."""


class Deploy(Cluster):
    """The multi-scheduler harness, each process running the app of its release."""

    apps: dict[str, str]

    def start_release(self, sid: str, app: str, release: int | None) -> None:
        root = Path(__file__).resolve().parents[2]
        env = {"PYTHONPATH": f"{self.tmp / 'apps'}{os.pathsep}{root}"}
        if release is not None:
            env["GOATBEAT_RELEASE"] = str(release)
        with pytest.MonkeyPatch.context() as patch:
            # The harness starts its module's APP: here, this release's app.
            patch.setattr("tests.integration.test_multi_scheduler.APP", app)
            self.start(sid, **env)

    def wait_for_records_after(self, count: int, timeout: float = 60) -> None:
        self.wait_for_records(len(self.recorded()) + count, timeout=timeout)


@pytest.fixture
def deploy(pg_dsn: str, tmp_path: Path) -> Any:
    apps_dir = tmp_path / "apps"
    apps_dir.mkdir()
    d = Deploy(pg_dsn, tmp_path)
    d.apps = {"1": write_app(apps_dir, RELEASE_1), "2": write_app(apps_dir, RELEASE_2)}
    try:
        yield d
    finally:
        d.shutdown()


def stored(dsn: str) -> dict[str, Schedule]:
    store = PostgresStore(dsn)
    try:
        rows = store.list_schedules()
    finally:
        store.close()
    return {r.name: r for r in rows if isinstance(r, Schedule)}


def superseded(deploy: Deploy, sid: str) -> list[dict[str, Any]]:
    return [e for e in deploy.events(sid) if e["event"] == "schedule.publication_superseded"]


def assert_release_2_stored(dsn: str) -> None:
    rows = stored(dsn)
    assert sorted(rows) == ["cleanup", "daily-report", "ping-user"]
    assert rows["daily-report"].trigger.to_spec()["expression"] == "30 8 * * *"
    assert all(r.enabled for r in rows.values())


def assert_each_instant_once(deploy: Deploy) -> None:
    keys = [k for k, _ in deploy.recorded()]
    assert len(keys) == len(set(keys)), "a key was dispatched twice"
    by_name = instants(keys)
    assert set(by_name) <= {"ping", "ping-user"}
    assert by_name.get("ping-user"), "nothing ran under the new name"
    old, new = by_name.get("ping", []), by_name["ping-user"]
    # One schedule: no instant under both names, none under the old name after the rename,
    # and no gap from the first instant to the last.
    assert not set(old) & set(new)
    assert not old or max(old) < min(new)
    every = sorted(old + new)
    gaps = [(a, b) for a, b in zip(every, every[1:], strict=False) if b - a != timedelta(seconds=1)]
    assert not gaps, f"instants lost between {gaps}"


def stop_all(deploy: Deploy) -> None:
    leader = deploy.holder()
    for sid in sorted(
        (s for s, p in deploy.procs.items() if p.poll() is None), key=lambda s: s == leader
    ):
        assert deploy.stop(sid) == 0, (deploy.tmp / f"{sid}.log").read_text()


@pytest.mark.parametrize("numbered", [True, False], ids=["release-numbers", "no-numbers"])
def test_old_first_then_new_then_the_old_replica_restarts(deploy: Deploy, numbered: bool) -> None:
    r1, r2 = (1, 2) if numbered else (None, None)
    deploy.start_release("old", deploy.apps["1"], r1)
    deploy.wait_for_event("old", "schedule.published")
    deploy.wait_for_records_after(3)

    deploy.start_release("new", deploy.apps["2"], r2)
    deploy.wait_for_event("new", "schedule.renamed")
    assert_release_2_stored(deploy.dsn)
    deploy.wait_for_records_after(3)

    # The old replica restarts mid-deploy, publishing at start with prune_on_publish.
    assert deploy.stop("old") == 0
    deploy.start_release("old-again", deploy.apps["1"], r1)
    deploy.wait_for_event("old-again", "schedule.publication_superseded")
    deploy.wait_for_records_after(3)
    stop_all(deploy)

    [warning] = superseded(deploy, "old-again")
    assert warning["level"] == "WARNING" and warning["schedules"] == OLD_KEPT
    assert not any(e["event"] == "schedule.pruned" for e in deploy.events("old-again"))
    assert_release_2_stored(deploy.dsn)
    assert_each_instant_once(deploy)


def test_new_first_then_old_with_release_numbers(deploy: Deploy) -> None:
    # Release 1's schedules were never published here: only the numbers order them.
    deploy.start_release("new", deploy.apps["2"], 2)
    deploy.wait_for_event("new", "schedule.published")
    deploy.wait_for_records_after(3)
    deploy.start_release("old", deploy.apps["1"], 1)
    deploy.wait_for_event("old", "schedule.publication_superseded")
    # The old replica takes part as a standby or leader all the same, on release 2's rows.
    deploy.wait_for_records_after(3)
    assert deploy.stop("new") == 0  # the old one leads now, and dispatches the stored rows
    deploy.wait_for_holder({"old"})
    deploy.wait_for_records_after(3)
    stop_all(deploy)

    [warning] = superseded(deploy, "old")
    assert warning["level"] == "WARNING" and warning["schedules"] == OLD_KEPT
    assert "release 1 is older than release 2" in warning["reason"]
    assert_release_2_stored(deploy.dsn)
    assert_each_instant_once(deploy)
    assert {sid for _, sid in deploy.recorded()} == {"new", "old"}
