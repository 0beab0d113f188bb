"""Wake-ups of a scheduler whose database goes through PgBouncer (transaction pooling).

LISTEN is session state, which PgBouncer does not keep: a pooled scheduler LISTENs on
``listen_database`` (a direct connection) when it has one, and otherwise polls every
``poll_interval``. In both cases a run-now request sent through PgBouncer (as the CLI and the
admin send it) reaches a leader that would otherwise sleep for twenty seconds: promptly with
LISTEN, within the poll interval without. The bounds below are far below that sleep, so they
tell a wake-up from a timer; they are not performance figures.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from goatbeat.beat import Beat
from goatbeat.core.model import Occurrence
from goatbeat.stores.postgres import PostgresStore
from tests.doubles import AcceptingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]

IDLE = {"lease_ttl": "60s", "lease_renew_interval": "20s", "max_sleep": "60s"}


class Recording(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.submitted: dict[str, float] = {}

    def submit(self, occurrence: Occurrence) -> str | None:
        self.submitted[occurrence.idempotency_key] = time.monotonic()
        return occurrence.idempotency_key


class Running:
    """A scheduler running in a thread on ``beat``; stopped (lease released) at the end."""

    def __init__(self, beat: Beat, submitter: Recording) -> None:
        self.beat = beat
        self.submitter = submitter
        self.scheduler = beat.scheduler()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.scheduler.run, args=(self.stop,))
        self.thread.start()

    def wait_until_idle_leader(self, pooled_dsn: str) -> None:
        probe = PostgresStore(pooled_dsn)
        try:
            deadline = time.monotonic() + 20
            while True:
                lease = probe.read_lease("scheduler")
                if lease is not None and lease[0] == self.scheduler.instance:
                    break
                assert time.monotonic() < deadline, "the scheduler never took the lease"
                time.sleep(0.05)
        finally:
            probe.close()
        time.sleep(0.5)  # its first iteration is over: it sleeps until the renewal slot

    def run_now(self, pooled_dsn: str, name: str, timeout: float) -> float:
        """Request a run through PgBouncer; seconds until the scheduler submitted it."""
        admin = PostgresStore(pooled_dsn)
        try:
            sent = time.monotonic()
            execution = admin.request_run(name)
        finally:
            admin.close()
        deadline = sent + timeout
        while execution.idempotency_key not in self.submitter.submitted:
            if time.monotonic() > deadline:
                pytest.fail(f"the run-now request was not submitted within {timeout}s")
            time.sleep(0.02)
        return self.submitter.submitted[execution.idempotency_key] - sent

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.beat.close()


@pytest.fixture
def pooled(pg_dsn: str, pgbouncer_server: Any) -> str:
    dsn: str = pgbouncer_server.pooled(pg_dsn)
    return dsn


@pytest.fixture
def start(pooled: str) -> Iterator[Any]:
    started: list[Running] = []

    def run(**settings: Any) -> Running:
        submitter = Recording()
        beat = Beat(pooled, submitter=submitter, settings={**IDLE, **settings})
        beat.schedule(name="nightly", task="json.dumps", cron="0 3 * * *")
        beat.migrate()
        beat.publish()
        running = Running(beat, submitter)
        started.append(running)
        running.wait_until_idle_leader(pooled)
        return running

    try:
        yield run
    finally:
        for running in started:
            running.close()


def test_a_run_now_request_wakes_the_scheduler_through_listen_database(
    start: Any, pooled: str, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        running = start(listen_database=pg_dsn)
        for _ in range(2):
            latency = running.run_now(pooled, "nightly", timeout=3.0)
            print(f"\nrun-now picked up {latency * 1000:.0f} ms after the request (LISTEN)")
    assert "store.polling" not in [r.getMessage() for r in caplog.records]
    info = running.scheduler.store.info()
    assert (info["pooled"], info["wake_ups"]) == (True, "listen_database")


def test_without_listen_database_a_pooled_scheduler_polls_and_says_so_once(
    start: Any, pooled: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        running = start(pooled=True, poll_interval="1s")
        for _ in range(2):
            latency = running.run_now(pooled, "nightly", timeout=1.0 + 2.0)
            print(f"\nrun-now picked up {latency * 1000:.0f} ms after the request (polling)")
    polling = [r for r in caplog.records if r.getMessage() == "store.polling"]
    assert len(polling) == 1
    assert polling[0].goatbeat["poll_interval"] == 1.0  # type: ignore[attr-defined]
    assert running.scheduler.store.info()["wake_ups"] == "polling every 1s"


def test_listen_database_is_refused_for_a_store_that_is_not_postgresql(tmp_path: Any) -> None:
    from goatbeat.core.errors import InvalidValue

    beat = Beat(f"sqlite:///{tmp_path / 'x.db'}", settings={"listen_database": "postgresql://h/db"})
    with pytest.raises(InvalidValue, match="listen_database"):
        beat.store  # noqa: B018 - opening it is the point


def test_control_listen_through_pgbouncer_misses_the_request(start: Any, pooled: str) -> None:
    # What the two tests above guard against: a store that does not know it is pooled
    # LISTENs through PgBouncer, on a server session it does not keep; the notification
    # never reaches it and the request waits for the next timer (the renewal, 20 s away).
    running = start()
    assert not running.scheduler.store.pooled  # type: ignore[attr-defined]
    with pytest.raises(pytest.fail.Exception, match="not submitted within"):
        running.run_now(pooled, "nightly", timeout=3.0)


def test_an_unreachable_listen_database_falls_back_to_polling(
    start: Any, pooled: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.services import free_port

    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        running = start(listen_database=nowhere, poll_interval="1s")
        for _ in range(2):
            running.run_now(pooled, "nightly", timeout=1.0 + 2.0)
    errors = [
        r
        for r in caplog.records
        if r.getMessage() == "scheduler.error" and "listen_database" in str(r.goatbeat)  # type: ignore[attr-defined]
    ]
    # One failed connection (at start, when the scheduler keeps quiet about it, or reported
    # once): the next attempt waits half a minute, polling meanwhile.
    assert len(errors) <= 1, [r.goatbeat for r in errors]  # type: ignore[attr-defined]
    assert running.scheduler.store._listen_retry_at is not None  # type: ignore[attr-defined]
