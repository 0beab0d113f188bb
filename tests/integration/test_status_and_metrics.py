"""``goatbeat status`` and ``--metrics-port`` against real scheduler processes, on SQLite and
PostgreSQL: a live leader is healthy (exit 0), a killed one stops being so once its lease
expires (exit 1), a backlog older than ``--max-lag`` is unhealthy even with a leader, and
``/metrics`` serves what the process and the database say."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from goatbeat.cli import cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.ops_app:beat"
DEADLINE = 30.0


def status(database: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--app", APP, "--database", database, "status", *args])


class Scheduler:
    def __init__(self, database: str, tmp: Path, sid: str, *extra: str, **env: str) -> None:
        self.sid = sid
        self.log = tmp / f"{sid}.log"
        environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
        environ.pop("GOATBEAT_APP", None)
        environ.pop("DJANGO_SETTINGS_MODULE", None)
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "goatbeat", "--app", APP, "--database", database,
                 "--log-format", "json", "scheduler", "--scheduler-id", sid,
                 "--lease-ttl", "2s", "--lease-renew-interval", "500ms", "--max-sleep", "500ms",
                 *extra],
                cwd=tmp, env=environ, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def wait_for(self, event: str) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            found = [e for e in self.events() if e["event"] == event]
            if found:
                return found[0]
            if self.proc.poll() is not None:
                pytest.fail(f"{self.sid} exited:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        pytest.fail(f"no {event} from {self.sid}:\n{self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(30)


@pytest.fixture
def start(database: str, tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    assert status(database, "--check").exit_code in (1, 2)  # not migrated yet, or no leader
    migrated = CliRunner().invoke(cli, ["--app", APP, "--database", database, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    started: list[Scheduler] = []

    def make(sid: str, *extra: str, **env: str) -> Scheduler:
        started.append(Scheduler(database, tmp_path, sid, *extra, **env))
        return started[-1]

    yield make
    for s in started:
        s.stop(signal.SIGKILL)


def until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_live_leader_is_healthy_and_a_killed_one_is_not_past_its_ttl(
    database: str, start: Callable[..., Scheduler]
) -> None:
    leader = start("ops-1", "--metrics-port", "0", "--metrics-address", "127.0.0.1")
    leader.wait_for("lease.acquired")
    port = int(leader.wait_for("metrics.serving")["port"])

    healthy = until(lambda: (r := status(database, "--check")).exit_code == 0 and r, "health")
    assert healthy.output.startswith("goatbeat: ok: ops-1#")  # the id and its start
    assert " holds the lease (fencing token " in healthy.output
    assert len(healthy.output.strip().splitlines()) == 1

    # The heartbeat is written right after the iteration that took the lease.
    data = until(
        lambda: (d := json.loads(status(database, "--json").output))["schedulers"] and d,
        "the heartbeat",
    )
    assert data["healthy"] is True and data["lease"]["holder_scheduler_id"] == "ops-1"
    assert [(p["scheduler_id"], p["role"], p["stale"]) for p in data["schedulers"]] == [
        ("ops-1", "leader", False)
    ]
    assert data["schedulers"][0]["pid"] == leader.proc.pid
    table = status(database)
    assert table.exit_code == 0 and "held by ops-1" in table.output and "leader" in table.output

    # The process's own counters and the database's view, from /metrics.
    text = until(
        lambda: (t := scrape(port)) and (sample(t, "goatbeat_lateness_seconds_count") or 0) > 0 and t,
        "a submission in the metrics",
    )  # fmt: skip
    assert sample(text, "goatbeat_lease_held") == 1.0
    assert (sample(text, "goatbeat_iterations_total") or 0) >= 1
    assert 'scheduler_id="ops-1"' in text
    until(lambda: sample(scrape(port), "goatbeat_lease_valid") == 1.0, "the store read")
    text = scrape(port)
    assert sample(text, "goatbeat_store_up") == 1.0
    assert sample(text, 'goatbeat_schedulers{role="leader"}') == 1.0
    # The inline submitter reports each completion: the schedule has a last success.
    until(
        lambda: sample(scrape(port), 'goatbeat_schedule_last_success_timestamp_seconds{schedule="tick"}'),
        "the schedule's last success",
    )  # fmt: skip

    leader.stop(signal.SIGKILL)
    down = until(lambda: (r := status(database, "--check")).exit_code == 1 and r, "unhealthy")
    assert down.output.startswith("goatbeat: unhealthy: no scheduler holds the lease")
    assert "ops-1" in down.output and len(down.output.strip().splitlines()) == 1
    stale = until(
        lambda: [p for p in json.loads(status(database, "--json").output)["schedulers"]
                 if p["stale"]],
        "a stale heartbeat",
    )  # fmt: skip
    assert [p["scheduler_id"] for p in stale] == ["ops-1"]


def test_a_backlog_older_than_max_lag_is_unhealthy_even_with_a_leader(
    database: str, start: Callable[..., Scheduler]
) -> None:
    leader = start("ops-2", GB_SUBMIT_FAILS="1")
    leader.wait_for("occurrence.submit_retry")  # claimed, then every submission fails

    def late() -> Result | None:
        result = status(database, "--check", "--max-lag", "2s")
        return result if result.exit_code == 1 else None

    result = until(late, "the backlog to pass --max-lag")
    line = result.output.strip()
    assert line.startswith("goatbeat: unhealthy: backlog: 'tick' due since ")
    assert "(--max-lag 2s)" in line and "claimed and not submitted" in line
    assert "lease" not in line  # the leader is fine
    assert status(database, "--check", "--max-lag", "1h").exit_code == 0

    leader.stop()
    assert leader.proc.returncode == 0
    # A graceful stop takes its heartbeat away.
    assert json.loads(status(database, "--json").output)["schedulers"] == []


def test_status_mistakes_and_unreadable_databases_exit_2(tmp_path: Path) -> None:
    bad = status(f"sqlite:///{tmp_path}/x.db", "--check", "--max-lag", "soon")
    assert bad.exit_code == 2 and "--max-lag" in bad.stderr
    missing = CliRunner().invoke(
        cli, ["--database", "postgresql://nobody@127.0.0.1:1/none", "status", "--check"]
    )
    assert missing.exit_code == 2
    assert missing.stderr.startswith("goatbeat: error: cannot read the status: ")
    assert len(missing.stderr.strip().splitlines()) == 1


def test_metrics_on_a_port_in_use_is_one_line_exit_2(database: str) -> None:
    import socket

    migrated = CliRunner().invoke(cli, ["--app", APP, "--database", database, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli,
            ["--app", APP, "--database", database, "scheduler", "--once", "--metrics-port",
             str(port), "--metrics-address", "127.0.0.1"],
        )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.startswith(f"goatbeat: error: --metrics-port {port}: cannot serve")


def test_schedule_list_and_show_tell_the_real_last_outcome(database: str) -> None:
    from datetime import UTC, datetime, timedelta

    from goatbeat.core.health import Outcome
    from goatbeat.core.model import Schedule, SubmitOutcome
    from goatbeat.core.triggers import IntervalTrigger
    from goatbeat.stores import open_store

    store = open_store(database)
    try:
        store.migrate()
        store.publish(
            [Schedule(name="nightly", task="jobs.nightly", trigger=IntervalTrigger("1d"))]
        )
        grant = store.acquire_lease("scheduler", "s1", timedelta(minutes=5))
        assert grant is not None
        base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
        for n, error in enumerate(["RuntimeError: disk full", "RuntimeError: disk still full"]):
            run = store.request_run("nightly", now=base + timedelta(minutes=n))
            store.claim_manual_runs(grant, scheduler_id="s1", execution_ids=[run.id])
            store.record_outcomes([SubmitOutcome(execution_id=run.id, ok=True)])
            store.record_started(run.idempotency_key, worker="w-1:42")
            store.record_completion(
                run.idempotency_key, outcome=Outcome.FAILED, error=error, runtime=2.5
            )
    finally:
        store.close()

    runner = CliRunner()
    listed = runner.invoke(cli, ["--database", database, "schedule", "list", "--json"])
    [item] = json.loads(listed.output)
    assert (item["last_status"], item["consecutive_failures"]) == ("failed", 2)
    assert item["last_failure_at"] is not None and item["last_success_at"] is None
    table = runner.invoke(cli, ["--database", database, "schedule", "list"]).output
    assert "failed (2 in a row)" in table

    shown = runner.invoke(cli, ["--database", database, "schedule", "show", "nightly"]).output
    assert "outcomes:   last success -, last failure " in shown
    assert "2 failure(s) in a row" in shown
    assert "2.50s" in shown and "RuntimeError: disk still full" in shown
    data = json.loads(
        runner.invoke(cli, ["--database", database, "schedule", "show", "nightly", "--json"]).output
    )
    latest = data["executions"][0]
    assert (latest["status"], latest["runtime"], latest["worker"]) == ("failed", 2.5, "w-1:42")
    assert latest["started_at"] is not None and data["consecutive_failures"] == 2

    summary = runner.invoke(cli, ["--database", database, "status"]).output
    # Its latest run, due two hours ago, has not succeeded: overdue as well as failing.
    assert "schedules:  overdue: nightly; failing: nightly (2 in a row)" in summary
    health = json.loads(runner.invoke(cli, ["--database", database, "status", "--json"]).output)
    assert [(h["name"], h["consecutive_failures"]) for h in health["schedules"]] == [("nightly", 2)]


def test_schedule_show_says_a_reported_start_before_any_run_ended(database: str) -> None:
    """#30 item 8: a schedule whose only report is ``running`` does report completions."""
    from datetime import timedelta

    from goatbeat.core.model import Schedule, SubmitOutcome
    from goatbeat.core.triggers import IntervalTrigger
    from goatbeat.stores import open_store

    store = open_store(database)
    try:
        store.migrate()
        store.publish(
            [Schedule(name="nightly", task="jobs.nightly", trigger=IntervalTrigger("1d"))]
        )
        grant = store.acquire_lease("scheduler", "s1", timedelta(minutes=5))
        assert grant is not None
        run = store.request_run("nightly")
        store.claim_manual_runs(grant, scheduler_id="s1", execution_ids=[run.id])
        store.record_outcomes([SubmitOutcome(execution_id=run.id, ok=True)])
        store.record_started(run.idempotency_key, worker="w-1:42")
    finally:
        store.close()

    shown = CliRunner().invoke(cli, ["--database", database, "schedule", "show", "nightly"])
    assert shown.exit_code == 0, shown.output
    assert "outcomes:   running reported, no run ended yet" in shown.output, shown.output
    assert "none reported" not in shown.output


def test_the_first_scrape_has_the_per_schedule_series(
    database: str, start: Callable[..., Scheduler]
) -> None:
    # #30 item 8: the per-schedule series appeared only after the first read of the store
    # (~15 s after start), so a scrape right after a restart lacked them. One run first (the
    # inline submitter reports its success), then a scheduler serving metrics, scraped from
    # the first instant its port answers.
    for command in (["scheduler", "--once"], ["schedule", "run", "tick"], ["scheduler", "--once"]):
        done = CliRunner().invoke(cli, ["--app", APP, "--database", database, *command])
        assert done.exit_code == 0, done.output
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    leader = start("ops-1", "--metrics-port", str(port), "--metrics-address", "127.0.0.1")
    deadline = time.monotonic() + DEADLINE * 2
    while True:
        try:
            first = scrape(port)
            break
        except OSError:
            if leader.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no /metrics:\n{leader.log.read_text()[-3000:]}")
            time.sleep(0.005)
    assert sample(first, 'goatbeat_schedule_last_success_timestamp_seconds{schedule="tick"}')
