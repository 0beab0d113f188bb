"""A running scheduler on RabbitMQ (publisher confirms on) through a broker outage and a memory
alarm: nothing owed is lost, nothing is doubled, the lease is never lost.

The scheduler runs in a thread on PostgreSQL and sends to Celery on the suite's RabbitMQ node;
one schedule fires every 2 s with ``run_all`` and 600 s of grace, so every occurrence of the
trouble is owed until it is over. What reached the broker is read back from the queue. No
timing is asserted: each wait has a deadline, and what is checked is where every occurrence
ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from goatbeat.beat import Beat
from goatbeat.core.model import ExecutionStatus
from goatbeat.stores.postgres import PostgresStore
from tests.services import RabbitMQServer

celery = pytest.importorskip("celery")
kombu = pytest.importorskip("kombu")

pytestmark = [
    pytest.mark.rabbitmq,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]

TROUBLE = 8.0
DEADLINE = 90.0


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {DEADLINE:g}s")
        time.sleep(0.2)


def _drain(url: str, queue: str) -> Counter[str]:
    seen: Counter[str] = Counter()
    with kombu.Connection(url) as conn:
        while (message := conn.default_channel.basic_get(queue, no_ack=True)) is not None:
            seen[message.headers["id"]] += 1
    return seen


@pytest.fixture
def running(pg_dsn: str, rabbitmq: RabbitMQServer) -> Iterator[tuple[Beat, PostgresStore]]:
    app = celery.Celery("outage", broker=rabbitmq.url, set_as_current=False)
    app.conf.task_serializer = "json"
    app.conf.broker_transport_options = {"confirm_publish": True}
    beat = Beat(
        pg_dsn,
        submitter="celery",
        submitter_options={"app": app, "publish_timeout": 2.0},
    )
    beat.schedule(
        name="tick",
        task="proj.tasks.tick",
        every="2s",
        misfire="run_all",
        misfire_grace="600s",
        queue="outage",
    )
    beat.migrate()
    beat.publish()
    scheduler = beat.scheduler(lease_ttl="9s", lease_renew_interval="3s", max_sleep="1s")
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    store = PostgresStore(pg_dsn)
    try:
        yield beat, store
    finally:
        rabbitmq.memory_alarm(False)
        stop.set()
        thread.join(30)
        store.close()
        beat.close()
        app.close()
    assert not thread.is_alive()


def _through(
    store: PostgresStore, trouble: Callable[[], None], end: Callable[[], None]
) -> set[str]:
    """Let two occurrences go out, cause ``trouble`` for TROUBLE seconds, ``end`` it, and wait
    until every occurrence claimed meanwhile is settled; returns those keys."""

    def submitted() -> int:
        return sum(e.status is ExecutionStatus.SUBMITTED for e in store.executions(limit=1000))

    wait_for("first submissions", lambda: submitted() >= 2)
    trouble()
    time.sleep(TROUBLE)
    waiting = {
        e.idempotency_key
        for e in store.executions(limit=1000)
        if e.status is ExecutionStatus.CLAIMED
    }
    end()
    assert waiting, "the trouble's occurrences should have been owed"

    def settled() -> bool:
        return not any(
            e.idempotency_key in waiting and e.status is ExecutionStatus.CLAIMED
            for e in store.executions(limit=1000)
        )

    wait_for("every occurrence of the trouble settled", settled)
    return waiting


def _check(store: PostgresStore, url: str, waiting: set[str], at_most_twice: int) -> None:
    rows = [e for e in store.executions(limit=1000) if e.status is not ExecutionStatus.CLAIMED]
    assert {e.status for e in rows} == {ExecutionStatus.SUBMITTED}
    assert store.get("tick").missed_count == 0
    seen = _drain(url, "outage")
    assert {e.idempotency_key for e in rows} <= set(seen)  # nothing lost
    assert waiting <= set(seen)
    doubled = [key for key, n in seen.items() if n > 1]
    assert max(seen.values()) <= 2 and len(doubled) <= at_most_twice, seen


def test_a_broker_stop_and_restart_loses_nothing_within_the_grace(
    running: tuple[Beat, PostgresStore], rabbitmq: RabbitMQServer, caplog: Any
) -> None:
    _, store = running
    caplog.set_level(logging.INFO, logger="goatbeat")
    waiting = _through(store, rabbitmq.stop_app, rabbitmq.start_app)
    _check(store, rabbitmq.url, waiting, at_most_twice=0)
    assert "lease.lost" not in caplog.text


def test_a_memory_alarm_with_confirms_neither_hangs_nor_loses(
    running: tuple[Beat, PostgresStore], rabbitmq: RabbitMQServer, caplog: Any
) -> None:
    _, store = running
    caplog.set_level(logging.INFO, logger="goatbeat")
    waiting = _through(
        store, lambda: rabbitmq.memory_alarm(True), lambda: rabbitmq.memory_alarm(False)
    )
    # The one message each abandoned publish left with the broker may come twice (case 4):
    # the submitter's own publish_timeout, or the scheduler's bound of the whole call (#32's
    # io.timeout), whichever gave up first.
    timeouts = caplog.text.count("submitter.publish_timeout")
    assert timeouts >= 1
    abandoned = timeouts + caplog.text.count("io.timeout")
    _check(store, rabbitmq.url, waiting, at_most_twice=abandoned)
    assert "lease.lost" not in caplog.text
