"""End to end through PgBouncer (transaction pooling): two real ``goatbeat scheduler`` processes
on ``--database <PgBouncer>`` with ``--listen-database <PostgreSQL>``, dispatching to a real
Celery worker over Redis; the leader is killed with SIGKILL.

Two schedules (a task object on the default queue, a task name on a queue of its own) fire
every second over a window of about ten seconds. Once the leader has dispatched, it is killed
between two instants; the standby must hold the lease within ``lease_ttl`` + 1 s. Then
``goatbeat schedule run`` (through PgBouncer too) asks for an extra run.

Checked on the worker side: every occurrence of the window ran, on its queue; each ran exactly
once, except those the killed leader left ``claimed`` (in doubt: submitted or not, nobody
knows; the standby resubmits them with the same key), which may run twice and never more. In
the database: every key claimed once and submitted, both schedulers led.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from goatbeat.core.instance import split_instance
from goatbeat.core.model import idempotency_key
from goatbeat.stores.postgres import PostgresStore
from tests.e2e.backend_apps._record import URL_ENV, read
from tests.e2e.workers import REPO, Worker, stop, worker_starter

pytestmark = [
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.pgbouncer,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]

APP = "tests.pgbouncer.beat_celery:beat"
WINDOW = 10  # seconds during which every schedule fires each second
LEAD = 8  # seconds from now to the first instant: the schedulers start and publish meanwhile
# (4 s was not enough on a loaded machine: a schedule published after its start_at owes no
# instant before it)
TTL = 3.0
SCHEDULES = ("object", "named")
DEADLINE = 60.0


class Scenario:
    def __init__(self, pooled: str, direct: str, redis_url: str, tmp_path: Path) -> None:
        self.pooled = pooled
        self.direct = direct
        self.redis_url = redis_url
        self.tmp = tmp_path
        now = datetime.now(UTC).replace(microsecond=0)
        self.start_at = now + timedelta(seconds=LEAD)
        self.end_at = self.start_at + timedelta(seconds=WINDOW)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.store = PostgresStore(pooled)  # the test's own reads go through PgBouncer too
        self.store.migrate()

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            URL_ENV: self.redis_url,
            "GOATBEAT_E2E_START": self.start_at.isoformat(),
            "GOATBEAT_E2E_END": self.end_at.isoformat(),
        }
        for name in ("GOATBEAT_APP", "GOATBEAT_LISTEN_DATABASE", "GOATBEAT_POOLED"):
            env.pop(name, None)
        return env

    def start(self, sid: str) -> None:
        with (self.tmp / f"{sid}.log").open("wb") as log:
            self.procs[sid] = subprocess.Popen(
                [sys.executable, "-m", "goatbeat", "--app", APP, "--database", self.pooled,
                 "--listen-database", self.direct, "--log-format", "json", "scheduler",
                 "--scheduler-id", sid, "--lease-ttl", f"{TTL:g}s",
                 "--lease-renew-interval", "1s", "--max-sleep", "1s"],
                cwd=self.tmp, env=self.env(), stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "goatbeat", "--app", APP, "--database", self.pooled, *args],
            cwd=self.tmp,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {sid}\n{(self.tmp / f'{sid}.log').read_text(errors='replace')[-3000:]}"
            for sid in self.procs
        )

    def expected_keys(self) -> set[str]:
        instants = [self.start_at + timedelta(seconds=i) for i in range(WINDOW + 1)]
        return {idempotency_key(name, at) for name in SCHEDULES for at in instants}

    def executions(self) -> list[dict[str, Any]]:
        with psycopg.connect(self.direct) as conn:
            rows = conn.execute(
                "SELECT idempotency_key, status, scheduler_id FROM goatbeat_execution"
            ).fetchall()
        return [{"key": k, "status": s, "scheduler": sid} for k, s, sid in rows]

    def wait(self, what: str, done: Callable[[], bool], deadline: float = DEADLINE) -> None:
        until = time.monotonic() + deadline
        while not done():
            for sid, proc in self.procs.items():
                if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                    pytest.fail(f"scheduler {sid} exited with {proc.returncode}\n{self.logs()}")
            if time.monotonic() > until:
                pytest.fail(f"no {what} after {deadline}s\n{self.logs()}")
            time.sleep(0.02)

    def listeners(self) -> int:
        with psycopg.connect(self.direct) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'goatbeat-listen' AND query LIKE 'LISTEN goatbeat%'"
            ).fetchone()
        return int(row[0]) if row else 0

    def holder(self) -> str | None:
        lease = self.store.read_lease("scheduler")
        return None if lease is None or lease[3] else split_instance(lease[0])[0]

    def submitted_by(self, sid: str) -> int:
        return sum(e["status"] == "submitted" and e["scheduler"] == sid for e in self.executions())

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.store.close()


def between_instants() -> None:
    fraction = datetime.now(UTC).microsecond / 1e6
    time.sleep((1.5 - fraction) % 1.0)


@pytest.fixture
def scenario(
    pg_dsn: str, pgbouncer_server: Any, redis_url: str, tmp_path: Path
) -> Iterator[Scenario]:
    s = Scenario(pgbouncer_server.pooled(pg_dsn), pg_dsn, redis_url, tmp_path)
    try:
        yield s
    finally:
        s.shutdown()


@pytest.fixture
def worker(redis_url: str, tmp_path: Path) -> Iterator[Worker]:
    started: list[Worker] = []
    start = worker_starter(redis_url, tmp_path, started)
    try:
        yield start(
            "celery", "celery", "-A", "tests.e2e.backend_apps.celery_app", "worker",
            "--pool=solo", "-c", "1", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-l", "info", "-Q", "celery,custom", "-n", "pgb@%h",
        )  # fmt: skip
    finally:
        for w in started:
            stop(w.proc)


def test_celery_dispatch_and_failover_through_pgbouncer(
    scenario: Scenario, worker: Worker, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    for sid in ("a", "b"):
        scenario.start(sid)
    scenario.wait("leader", lambda: scenario.holder() in {"a", "b"})
    leader = scenario.holder()
    assert leader is not None
    standby = "b" if leader == "a" else "a"
    scenario.wait("dispatch by the leader", lambda: scenario.submitted_by(leader) >= 4)
    # Each scheduler LISTENs on a direct connection of its own, used for nothing else.
    assert scenario.listeners() == 2

    between_instants()
    killed = time.monotonic()
    scenario.procs[leader].send_signal(signal.SIGKILL)
    scenario.procs[leader].wait(10)
    in_doubt = {e["key"] for e in scenario.executions() if e["status"] == "claimed"}
    scenario.wait("takeover", lambda: scenario.holder() == standby)
    takeover = time.monotonic() - killed
    print(f"\ncrash failover through PgBouncer: {takeover:.3f}s (lease_ttl {TTL:g}s)")
    assert takeover <= TTL + 1.0, scenario.logs()

    expected = scenario.expected_keys()

    def all_submitted() -> bool:
        done = {e["key"] for e in scenario.executions() if e["status"] == "submitted"}
        return expected <= done

    scenario.wait("submission of the whole window", all_submitted)

    # A run-now request through PgBouncer, from the CLI, while the standby leads.
    asked = scenario.cli("schedule", "run", "object")
    assert asked.returncode == 0, asked.stderr
    manual = [e["key"] for e in scenario.executions() if ":manual:" in e["key"]]
    assert len(manual) == 1
    expected.add(manual[0])
    scenario.wait("submission of the run-now request", lambda: all_submitted() and all(
        e["status"] == "submitted" for e in scenario.executions() if e["key"] == manual[0]
    ))  # fmt: skip

    def all_ran() -> bool:
        return expected <= {run["key"] for run in read(client, "celery")}

    scenario.wait("runs on the worker", all_ran)
    time.sleep(1.0)  # a resubmitted in-doubt key would arrive now
    assert scenario.procs[standby].poll() is None
    scenario.procs[standby].send_signal(signal.SIGTERM)
    assert scenario.procs[standby].wait(30) == 0

    runs = read(client, "celery")
    by_key: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_key.setdefault(run["key"], []).append(run)
    assert set(by_key) == expected
    for key, key_runs in by_key.items():
        allowed = 2 if key in in_doubt else 1
        assert 1 <= len(key_runs) <= allowed, (key, key_runs)
        name = key.split(":", 1)[0]
        assert {r["queue"] for r in key_runs} == {"custom" if name == "named" else "celery"}
        assert all(r["task_id"] == key for r in key_runs)
    executions = scenario.executions()
    keys = [e["key"] for e in executions]
    assert len(keys) == len(set(keys))
    assert {e["status"] for e in executions} == {"submitted"}
    assert {e["scheduler"] for e in executions} == {"a", "b"}
    print(f"{len(runs)} runs of {len(expected)} keys; in doubt at the kill: {sorted(in_doubt)}")
