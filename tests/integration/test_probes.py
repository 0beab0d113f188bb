"""Per-replica probes of real ``goatbeat scheduler`` processes on PostgreSQL: ``/healthz``
passes for a live leader and a live standby, fails for a replica whose loop is wedged (its
HTTP server still answers: 503, saying since when) and for one that is SIGSTOPped (no answer
within the probe's timeout), and keeps passing while the database is unreachable, which
``/readyz`` reports instead."""

from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from goatbeat.cli import cli
from tests.integration.test_status_and_metrics import APP, Scheduler

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

DEADLINE = 30.0
PROBE_TIMEOUT = 2.0
"""Seconds a probe waits for an answer, as a kubelet's ``timeoutSeconds``."""


def probe(port: int, path: str) -> tuple[int, str]:
    """(HTTP status, body) of one probe; raises TimeoutError when nothing answers in time."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}{path}", timeout=PROBE_TIMEOUT
        ) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise exc.reason from None
        raise


def until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}")


@pytest.fixture
def start(pg_dsn: str, tmp_path: Path) -> Iterator[Callable[..., tuple[Scheduler, int]]]:
    migrated = CliRunner().invoke(cli, ["--app", APP, "--database", pg_dsn, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    started: list[Scheduler] = []

    def make(sid: str, *extra: str, **env: str) -> tuple[Scheduler, int]:
        started.append(Scheduler(pg_dsn, tmp_path, sid, "--health-port", "0", *extra, **env))
        port = int(started[-1].wait_for("metrics.serving")["port"])
        return started[-1], port

    yield make
    for s in started:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGCONT)
        s.stop(signal.SIGKILL)


def test_a_leader_and_a_standby_are_both_live_and_ready(
    start: Callable[..., tuple[Scheduler, int]],
) -> None:
    leader, leader_port = start("probe-1")
    leader.wait_for("lease.acquired")
    # No --metrics-address: loopback only.
    assert leader.wait_for("metrics.serving")["address"] == "127.0.0.1"
    standby, standby_port = start("probe-2")
    standby.wait_for("lease.standby")

    for port, role in ((leader_port, "leader (fencing token "), (standby_port, "standby")):
        status, body = until(lambda p=port: (r := probe(p, "/healthz"))[0] == 200 and r, "live")
        assert body.startswith("ok: alive: iteration ") and role in body, body
        status, body = until(lambda p=port: (r := probe(p, "/readyz"))[0] == 200 and r, "ready")
        assert body.startswith(f"ok: ready: {role}"), body
        assert len(body.strip().splitlines()) == 1
    assert probe(leader_port, "/nothing")[0] == 404


def test_a_sigstopped_replica_fails_its_probe_and_passes_again_once_resumed(
    start: Callable[..., tuple[Scheduler, int]],
) -> None:
    leader, leader_port = start("probe-3")
    leader.wait_for("lease.acquired")
    standby, port = start("probe-4")
    standby.wait_for("lease.standby")
    # Alive, not only starting: its first iteration has ended (lease.standby is logged inside it).
    until(lambda: probe(port, "/healthz")[1].startswith("ok: alive: "), "the standby alive")

    standby.proc.send_signal(signal.SIGSTOP)
    with pytest.raises(TimeoutError):
        probe(port, "/healthz")
    assert probe(leader_port, "/healthz")[0] == 200  # the other replica is judged on its own

    standby.proc.send_signal(signal.SIGCONT)
    # Resumed, it answers again and its loop iterates again (a 503 "stalled" may come first,
    # while the iteration the SIGSTOP froze finishes).
    status, body = until(
        lambda: (r := probe(port, "/healthz"))[1].startswith("ok: alive: ") and r, "resumed"
    )
    assert status == 200, body


def test_a_wedged_loop_fails_liveness_while_its_server_still_answers(
    start: Callable[..., tuple[Scheduler, int]],
) -> None:
    # The first submission hangs for ever, as a broker call that never returns.
    leader, port = start("probe-5", "--liveness-timeout", "3s", GB_SUBMIT_HANGS="1")
    leader.wait_for("lease.acquired")

    status, body = until(lambda: (r := probe(port, "/healthz"))[0] == 503 and r, "stalled")
    # Wedged in its first iteration, or in a later one.
    found = re.fullmatch(
        r"unhealthy: stalled: (the scheduler loop's last iteration ended ([\d.]+)s ago"
        r"|no scheduler iteration in the ([\d.]+)s since the process started) \(limit 3s\)",
        body.strip(),
    )
    assert found, body
    assert float(found.group(2) or found.group(3)) >= 3.0
    assert probe(port, "/readyz")[0] == 503
    assert leader.proc.poll() is None  # alive, but its loop is not: a restart is the cure


def test_an_unreachable_database_keeps_liveness_and_fails_readiness(
    pg_dsn: str, start: Callable[..., tuple[Scheduler, int]]
) -> None:
    leader, port = start("probe-6")
    leader.wait_for("lease.acquired")
    until(lambda: probe(port, "/readyz")[0] == 200, "ready")

    admin_dsn, _, name = pg_dsn.rpartition("/")
    with psycopg.connect(f"{admin_dsn}/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        try:
            status, body = until(lambda: (r := probe(port, "/readyz"))[0] == 503 and r, "not ready")
            assert body.startswith("unhealthy: the last iteration could not reach the database: ")
            # The loop still iterates (and backs off): restarting would not help.
            for _ in range(5):
                status, body = probe(port, "/healthz")
                assert status == 200 and body.startswith("ok: alive: iteration "), body
                time.sleep(0.3)
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    status, body = until(lambda: (r := probe(port, "/readyz"))[0] == 200 and r, "ready again")
    assert body.startswith("ok: ready: "), body
