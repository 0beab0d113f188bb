"""The database going away under a running scheduler: it logs, backs off, reconnects, and
loses nothing.

A real Scheduler loop (in a thread) on a real PostgreSQL server that the test stops and starts
(``tests/chaos/pg.py``: its own server, so stopping it disturbs no other test). The schedules
fire every second with a misfire grace longer than any outage here and ``run_all``, so every
instant is owed: after the outage the claimed instants of each schedule must be contiguous,
and every claimed key submitted.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar

import psycopg
import pytest

from goatbeat.core.config import Settings
from goatbeat.core.model import MisfirePolicy, Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.postgres import PostgresStore
from tests.chaos.pg import ChaosPostgres
from tests.doubles import AcceptingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEDULES = 4


class GateSubmitter(AcceptingSubmitter):
    """Records submissions; when armed, the next submission blocks until released, so the
    test can take the database away between a submission and its bookkeeping."""

    name: ClassVar[str] = "gate"

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.lock = threading.Lock()
        self.armed = threading.Event()
        self.inside = threading.Event()
        self.release = threading.Event()

    def submit(self, occurrence: Occurrence) -> str | None:
        with self.lock:
            self.keys.append(occurrence.idempotency_key)
        if self.armed.is_set():
            self.armed.clear()
            self.inside.set()
            self.release.wait(30)
        return occurrence.idempotency_key

    def count(self) -> int:
        with self.lock:
            return len(self.keys)


class Events(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "goatbeat", None)
        self.seen.append((record.getMessage(), dict(fields) if isinstance(fields, dict) else {}))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [f for e, f in list(self.seen) if e == event]


@pytest.fixture(scope="module")
def server() -> Iterator[ChaosPostgres]:
    srv = ChaosPostgres().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def dsn(server: ChaosPostgres) -> Iterator[str]:
    name = f"outage_{time.monotonic_ns()}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.dsn_for(name)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def events() -> Iterator[Events]:
    handler = Events()
    log = logging.getLogger("goatbeat")
    previous = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(previous)


class Running:
    def __init__(self, dsn: str) -> None:
        self.store = PostgresStore(dsn)
        self.store.migrate()
        self.store.publish(
            [
                Schedule(
                    name=f"tick-{i}",
                    task="t.f",
                    trigger=IntervalTrigger("1s"),
                    misfire=MisfirePolicy.RUN_ALL,
                    misfire_grace=timedelta(minutes=5),
                )
                for i in range(SCHEDULES)
            ]
        )
        self.submitter = GateSubmitter()
        self.scheduler = Scheduler(
            self.store,
            self.submitter,
            settings=Settings(
                lease_ttl=timedelta(seconds=3),
                lease_renew_interval=timedelta(seconds=1),
                max_sleep=timedelta(seconds=1),
                scheduler_id="outage-test",
            ),
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.submitter.release.set()
        self.stop.set()
        self.thread.join(30)
        self.store.close()

    def wait_for(self, predicate: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


def executions(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT idempotency_key, status FROM goatbeat_execution").fetchall()
    return [(str(k), str(s)) for k, s in rows]


def assert_nothing_lost(dsn: str, submitted: list[str]) -> None:
    rows = executions(dsn)
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys))
    assert set(submitted) == set(keys), "a claimed occurrence was never submitted (or vice versa)"
    assert {s for _, s in rows} == {"submitted"}
    for i in range(SCHEDULES):
        stamps = sorted(k.split(":", 1)[1] for k in keys if k.startswith(f"tick-{i}:"))
        instants = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps]
        gaps = [
            (a, b)
            for a, b in zip(instants, instants[1:], strict=False)
            if b - a != timedelta(seconds=1)
        ]
        assert not gaps, f"tick-{i} lost occurrences: {gaps}"


def test_database_stopped_between_submission_and_bookkeeping_resubmits_and_loses_nothing(
    server: ChaosPostgres, dsn: str, events: Events
) -> None:
    with Running(dsn) as run:
        run.wait_for(lambda: run.submitter.count() >= 2 * SCHEDULES, "first submissions")
        run.submitter.armed.set()
        assert run.submitter.inside.wait(30), "no submission came"
        gated = run.submitter.keys[-1]
        server.stop_server()  # the batch's bookkeeping now fails
        run.submitter.release.set()
        run.wait_for(lambda: events.named("scheduler.error"), "the error to be logged")
        time.sleep(3)
        server.start_server()
        before = run.submitter.count()
        run.wait_for(lambda: run.submitter.count() >= before + 3 * SCHEDULES, "recovery")
        run.wait_for(
            lambda: all(s == "submitted" for _, s in executions(dsn)), "bookkeeping caught up"
        )
    errors = events.named("scheduler.error")
    assert any(e.get("stage") in ("claim", "pending") for e in errors), errors
    # Each failed iteration is followed by a pause, never a busy loop.
    delays = [e["retry_in"] for e in errors if "retry_in" in e]
    assert delays and min(delays) > 0, delays
    # Reconnected and led again (a dropped lease is re-acquired).
    assert len(events.named("lease.acquired")) >= 2
    # The occurrence in flight when the database vanished was submitted again, same key.
    assert Counter(run.submitter.keys)[gated] >= 2
    assert any(f.get("idempotency_key") == gated for f in events.named("occurrence.resubmitted"))
    assert_nothing_lost(dsn, run.submitter.keys)


def test_database_down_for_several_backoffs_then_back_loses_nothing(
    server: ChaosPostgres, dsn: str, events: Events
) -> None:
    with Running(dsn) as run:
        run.wait_for(lambda: run.submitter.count() >= 2 * SCHEDULES, "first submissions")
        server.crash(down_for=6.0)  # an immediate shutdown: no goodbye to the clients
        before = run.submitter.count()
        run.wait_for(lambda: run.submitter.count() >= before + 3 * SCHEDULES, "recovery")
    delays = [e["retry_in"] for e in events.named("scheduler.error") if "retry_in" in e]
    assert len(delays) >= 3, delays
    assert delays[1] > delays[0], f"no backoff: {delays}"
    assert max(delays) <= 1.0, "backoff is capped by max_sleep (1 s here)"
    assert_nothing_lost(dsn, run.submitter.keys)


def test_a_scheduler_started_while_the_database_is_down_waits_then_publishes(
    server: ChaosPostgres, dsn: str, tmp_path: Any
) -> None:
    # A replica restarted during an outage must back off like a running one, not exit.
    import os
    import signal
    import subprocess
    import sys

    app = tmp_path / "outage_app.py"
    app.write_text(
        "from goatbeat.beat import Beat\n"
        f"beat = Beat({dsn!r}, submitter='inline')\n"
        "beat.schedule(name='tick', task='builtins.print', every='1s')\n"
    )
    store = PostgresStore(dsn)
    store.migrate()
    store.close()
    server.stop_server()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.getcwd()}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goatbeat",
            "--app",
            "outage_app:beat",
            "--log-format",
            "json",
            "scheduler",
            "--lease-ttl",
            "3s",
            "--lease-renew-interval",
            "1s",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        assert proc.poll() is None, "the scheduler exited instead of waiting for the database"
        server.start_server()
        deadline = time.monotonic() + 30
        published = False
        while time.monotonic() < deadline and not published:
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM goatbeat_execution WHERE schedule_name = 'tick'"
                    ).fetchone()
                published = bool(row and row[0] > 0)
            except psycopg.OperationalError:
                pass
            time.sleep(0.3)
        assert published, "no occurrence was claimed after the database came back"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    stages = [json.loads(line).get("stage") for line in err.splitlines() if line.startswith("{")]
    assert "publish" in stages
