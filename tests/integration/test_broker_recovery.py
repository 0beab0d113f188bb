"""The broker coming back is noticed (#30 item 5), with a real Redis stopped and started
under a running scheduler (RQ, PostgreSQL).

During the outage each occurrence's submission backs off, up to 30 s between tries; before,
the backlog went out as each backoff ended, up to ~30 s after Redis was back. Now the first
submission that succeeds after failures brings every waiting retry forward
(``submitter.recovered``, with how many): the whole backlog goes out in the next iteration.
What is asserted is that event and where every occurrence ended; the time the backlog took
after the restart is printed (the figure of docs/benchmarks.md), not asserted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from goatbeat.beat import Beat
from goatbeat.core.model import ExecutionStatus
from goatbeat.stores.postgres import PostgresStore
from tests.services import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]

OUTAGE = 25.0
GUARD = 120.0


def tick(*args: object) -> None:
    """The task (never run here: no worker; what reached Redis is what counts)."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GUARD
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {GUARD:g}s")
        time.sleep(0.05)


def test_the_first_success_after_an_outage_sends_the_whole_backlog(
    pg_dsn: str, broker: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    beat = Beat(pg_dsn, submitter="rq", submitter_options={"connection": broker.url})
    beat.schedule(name="every-2s", task=tick, every="2s", misfire="run_all", misfire_grace="600s")
    beat.migrate()
    beat.publish()
    scheduler = beat.scheduler(lease_ttl="3s", lease_renew_interval="1s", max_sleep="1s")
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    store = PostgresStore(pg_dsn)
    try:

        def count(status: ExecutionStatus) -> int:
            return sum(e.status is status for e in store.executions(limit=10_000))

        wait_for("first submissions", lambda: count(ExecutionStatus.SUBMITTED) >= 2)
        broker.stop()
        time.sleep(OUTAGE)
        waiting = {
            e.idempotency_key
            for e in store.executions(limit=10_000)
            if e.status is ExecutionStatus.CLAIMED
        }
        assert len(waiting) >= 8  # the outage's occurrences, backing off
        broker.start()
        up_at = time.monotonic()

        def settled() -> bool:
            return not any(
                e.idempotency_key in waiting and e.status is ExecutionStatus.CLAIMED
                for e in store.executions(limit=10_000)
            )

        wait_for("the backlog sent", settled)
        backlog_seconds = time.monotonic() - up_at
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        stop.set()
        store.close()
        beat.close()

    recovered = [r for r in caplog.records if r.getMessage() == "submitter.recovered"]
    assert recovered, "the first success after the outage brought nothing forward"
    moved = recovered[0].goatbeat["retries_brought_forward"]  # type: ignore[attr-defined]
    assert moved >= 1
    store = PostgresStore(pg_dsn)
    try:
        ended = {e.idempotency_key: e.status for e in store.executions(limit=10_000)}
    finally:
        store.close()
    assert {ended[k] for k in waiting} == {ExecutionStatus.SUBMITTED}
    print(
        f"\nbroker back: {len(waiting)} waiting occurrence(s) sent {backlog_seconds:.2f} s "
        f"after Redis restarted ({moved} retries brought forward)"
    )
