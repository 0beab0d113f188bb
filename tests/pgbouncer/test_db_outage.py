"""PostgreSQL crashing behind PgBouncer under a running scheduler: it backs off, recovers, and
loses nothing.

Clients keep their connections to PgBouncer while PostgreSQL is down (PgBouncer reports the
failed server logins to them as errors); the scheduler's LISTEN connection, which goes to
PostgreSQL directly, breaks and is replaced. The schedules fire every second with ``run_all``
and a grace longer than the outage, so every instant is owed: afterwards the claimed instants
of each schedule must be contiguous, each claimed once and submitted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from goatbeat.core.config import Settings
from goatbeat.core.model import MisfirePolicy, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.postgres import PostgresStore
from tests.chaos.pg import ChaosPostgres
from tests.integration.test_db_outage import (
    SCHEDULES,
    Events,
    GateSubmitter,
    assert_nothing_lost,
    events,
)
from tests.services import PgBouncerServer

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer, pytest.mark.slow]

__all__ = ["events"]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ChaosPostgres, PgBouncerServer]]:
    pg = ChaosPostgres().start()
    bouncer = PgBouncerServer.in_front_of(pg.dsn).start()
    try:
        yield pg, bouncer
    finally:
        bouncer.stop()
        pg.stop()


def test_postgresql_crashing_behind_pgbouncer_loses_nothing(
    servers: tuple[ChaosPostgres, PgBouncerServer], events: Events
) -> None:
    pg, bouncer = servers
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "outage"')
    direct = pg.dsn_for("outage")
    pooled = bouncer.pooled(direct)
    store = PostgresStore(pooled, listen_database=direct, poll_interval=0.5)
    store.migrate()
    store.publish(
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
    submitter = GateSubmitter()
    scheduler = Scheduler(
        store,
        submitter,
        settings=Settings(
            lease_ttl=timedelta(seconds=3),
            lease_renew_interval=timedelta(seconds=1),
            max_sleep=timedelta(seconds=1),
            scheduler_id="outage-test",
        ),
    )
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()

    def wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
        import time

        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    try:
        wait_for(lambda: submitter.count() >= 2 * SCHEDULES, "first submissions")
        pg.crash(down_for=5.0)
        before = submitter.count()
        wait_for(lambda: submitter.count() >= before + 4 * SCHEDULES, "recovery")
    finally:
        stop.set()
        thread.join(30)
        store.close()
    errors = events.named("scheduler.error")
    # PgBouncer answers "server login has been failing, try again later" until
    # server_login_retry (15 s) has passed since its last failed login: docs/pgbouncer.md.
    distinct = sorted({f"{e.get('stage')}: {str(e.get('error'))[:100]}" for e in errors})
    print("\n" + "\n".join(distinct))
    assert errors, "the outage went unnoticed"
    assert_nothing_lost(direct, submitter.keys)
