"""A refusal is not a death, seen from outside (#30 item 7), on SQLite and PostgreSQL with two
code versions: a scheduler process of a release that does not know a task refuses the admin
schedule naming it; ``goatbeat status`` (table, ``--json``, ``--check``) and ``/metrics`` show
it refused, with the reason and since when, and the probe is unhealthy. A scheduler of the
release that knows the task then leads: the schedule runs by itself (no disable and enable)
and every view clears."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.refused_app import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
GOATBEAT = str(Path(sys.executable).parent / "goatbeat")  # the installed CLI
DEADLINE = 45.0  # the store-derived metrics are read every 15 s


def _env(tmp: Path) -> dict[str, str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "GB_REPORT_FILE": str(tmp / "report.txt")}
    environ.pop("GOATBEAT_APP", None)
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    return environ


def goatbeat(
    database: str, tmp: Path, release: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GOATBEAT, "--app", f"tests.integration.refused_app:{release}", "--database", database,
         *args],
        cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


class Scheduler:
    def __init__(self, database: str, tmp: Path, release: str) -> None:
        self.log = tmp / f"{release}.log"
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [GOATBEAT, "--app", f"tests.integration.refused_app:{release}",
                 "--database", database, "--log-format", "json", "scheduler",
                 "--scheduler-id", release, "--lease-ttl", "2s", "--lease-renew-interval",
                 "500ms", "--max-sleep", "500ms", "--metrics-port", "0",
                 "--metrics-address", "127.0.0.1"],
                cwd=tmp, env=_env(tmp), stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def wait_for(self, event: str) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                pytest.fail(f"the scheduler exited:\n{self.log.read_text()[-3000:]}")
            return next((e for e in self.events() if e["event"] == event), None)

        return until(found, event)

    def metrics(self) -> str:
        port = int(self.wait_for("metrics.serving")["port"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(30)


def until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}")


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def start(database: str, tmp_path: Path) -> Iterator[Callable[[str], Scheduler]]:
    migrated = goatbeat(database, tmp_path, "old", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    started: list[Scheduler] = []

    def make(release: str) -> Scheduler:
        started.append(Scheduler(database, tmp_path, release))
        return started[-1]

    yield make
    for s in started:
        s.stop(signal.SIGKILL)


def test_a_refused_schedule_shows_in_status_and_metrics_until_a_release_that_knows_it_runs_it(
    database: str, tmp_path: Path, start: Callable[[str], Scheduler]
) -> None:
    old = start("old")
    old.wait_for("lease.acquired")
    # The operator adds it with the new release's CLI, which knows the task; the scheduler
    # that leads still runs the old one.
    added = goatbeat(database, tmp_path, "new", "schedule", "add", "report", "--task", REPORT,
                     "--every", "1s")  # fmt: skip
    assert added.returncode == 0, added.stderr
    refused = old.wait_for("schedule.refused")
    assert refused["schedule"] == "report"

    probe = goatbeat(database, tmp_path, "old", "status", "--check")
    assert probe.returncode == 1, probe.stdout + probe.stderr
    [line] = probe.stdout.strip().splitlines()
    assert line.startswith(
        "goatbeat: unhealthy: refused: 1 schedule(s) do not run: 'report' since "
    )
    assert "is not a known task" in line and "lease" not in line  # the leader is fine

    data = json.loads(goatbeat(database, tmp_path, "old", "status", "--json").stdout)
    assert data["healthy"] is False and data["refused"]["total"] == 1
    [item] = data["refused"]["schedules"]
    assert (item["name"], item["task"], item["source"]) == ("report", REPORT, "admin")
    assert item["reason"].startswith(f"refused: {REPORT!r} is not a known task")
    since = datetime.fromisoformat(item["since"])
    assert since <= datetime.now(UTC) and item["since_seconds"] >= 0
    table = goatbeat(database, tmp_path, "old", "status")
    assert table.returncode == 0, table.stderr
    assert "refused:    1 schedule(s) do not run" in table.stdout
    assert f"  'report' since {item['since'].replace('+00:00', 'Z')}" in table.stdout
    assert "health:     UNHEALTHY: refused: " in table.stdout

    text = until(
        lambda: (t := old.metrics()) and sample(t, "goatbeat_schedules_refused") == 1.0 and t,
        "the refusal in the metrics",
    )
    [series] = [
        line for line in text.splitlines()
        if line.startswith("goatbeat_schedule_refused_since_timestamp_seconds{")
    ]  # fmt: skip
    assert 'schedule="report"' in series and f'task="{REPORT}"' in series
    assert 'reason="refused: ' in series
    assert float(series.rsplit(" ", 1)[1]) == pytest.approx(since.timestamp())
    assert not (tmp_path / "report.txt").exists()  # nothing of it ran

    # The release that knows the task rolls out: its scheduler leads and runs it.
    old.stop()
    new = start("new")
    readmitted = new.wait_for("schedule.readmitted")
    assert readmitted["schedule"] == "report"
    until(lambda: (tmp_path / "report.txt").exists(), "the report to run")
    healthy = until(
        lambda: (
            (r := goatbeat(database, tmp_path, "new", "status", "--check")).returncode == 0 and r
        ),
        "a healthy status",
    )
    assert healthy.stdout.startswith("goatbeat: ok: new#")
    data = json.loads(goatbeat(database, tmp_path, "new", "status", "--json").stdout)
    assert data["refused"] == {"total": 0, "schedules": []}
    assert "refused:    none" in goatbeat(database, tmp_path, "new", "status").stdout
    text = until(
        lambda: (t := new.metrics()) and sample(t, "goatbeat_schedules_refused") == 0.0 and t,
        "no refusal in the metrics",
    )
    assert "goatbeat_schedule_refused_since_timestamp_seconds{" not in text
