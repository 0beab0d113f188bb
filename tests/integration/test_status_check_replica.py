"""``goatbeat status --check --scheduler-id ID``: one replica's liveness from its heartbeat
row, as a subprocess (a Kubernetes exec probe): exit 0 for a live leader and a live standby,
1 once a SIGSTOPped replica's heartbeat expires (and 0 again when resumed), 1 for an id with
no row, 2 when the database cannot be read; one line each time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goatbeat.cli import cli
from tests.integration.test_status_and_metrics import APP, ROOT, Scheduler

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

DEADLINE = 60.0


def check(database: str, scheduler_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GOATBEAT_APP", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "goatbeat", "--database", database, "status", "--check",
         "--scheduler-id", scheduler_id],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"gave up waiting for {what}")


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    text = result.stdout + result.stderr
    assert text.count("\n") == 1, text
    return text.strip()


@pytest.fixture
def start(pg_dsn: str, tmp_path: Path) -> Iterator[Callable[[str], Scheduler]]:
    migrated = CliRunner().invoke(cli, ["--app", APP, "--database", pg_dsn, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    started: list[Scheduler] = []

    def make(sid: str) -> Scheduler:
        started.append(Scheduler(pg_dsn, tmp_path, sid))
        return started[-1]

    yield make
    for s in started:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGCONT)
        s.stop(signal.SIGKILL)


def test_each_replica_is_judged_by_its_own_heartbeat(
    pg_dsn: str, start: Callable[[str], Scheduler]
) -> None:
    leader = start("live-1")
    leader.wait_for("lease.acquired")
    standby = start("live-2")
    standby.wait_for("lease.standby")

    for sid, role in (("live-1", "leader"), ("live-2", "standby")):
        result = until(lambda s=sid: (r := check(pg_dsn, s)).returncode == 0 and r, sid)
        line = one_line(result)
        assert line.startswith(f"goatbeat: ok: scheduler '{sid}' (") and f"alive: {role}" in line

    nobody = check(pg_dsn, "nobody")
    assert nobody.returncode == 1
    assert one_line(nobody).startswith("goatbeat: unhealthy: no heartbeat from scheduler 'nobody'")

    standby.proc.send_signal(signal.SIGSTOP)
    # Within the heartbeat's TTL (lease_ttl + lease_renew_interval: 2.5 s here) it fails.
    stopped = until(lambda: (r := check(pg_dsn, "live-2")).returncode == 1 and r, "expiry")
    assert "its heartbeat expired" in one_line(stopped)
    assert check(pg_dsn, "live-1").returncode == 0  # the other replica is judged on its own

    standby.proc.send_signal(signal.SIGCONT)
    resumed = until(lambda: (r := check(pg_dsn, "live-2")).returncode == 0 and r, "resumed")
    assert "alive: standby" in one_line(resumed)


def test_a_database_that_cannot_be_read_is_cannot_tell(tmp_path: Path) -> None:
    down = check("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", "live-1")
    assert down.returncode == 2
    assert one_line(down).startswith("goatbeat: error: ")
    misuse = subprocess.run(
        [sys.executable, "-m", "goatbeat", "--database", f"sqlite:///{tmp_path}/x.db", "status",
         "--scheduler-id", "x"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert misuse.returncode == 2 and "--scheduler-id goes with --check" in misuse.stderr
