"""What runs inside the task backend's workers, through PgBouncer (transaction pooling): the
idempotency ledger and completion reports keep one connection each and run the same few
statements again and again, which psycopg would prepare server-side after five runs; through a
pool that hands each transaction to another server session, a prepared statement is gone at
the next one. They never prepare."""

from __future__ import annotations

from typing import Any

import pytest

from goatbeat.core.health import Outcome
from goatbeat.idempotency import SKIPPED, Guard, open_ledger
from goatbeat.stores import open_store

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]


def test_the_idempotency_ledger_runs_many_deliveries_through_pgbouncer(
    pg_dsn: str, pgbouncer_server: Any
) -> None:
    store = open_store(pg_dsn)
    store.migrate()
    store.close()
    ledger = open_ledger(pgbouncer_server.pooled(pg_dsn))
    try:
        guard = Guard(ledger)
        runs: list[int] = []
        for i in range(20):
            key = f"report:2031-03-01T12:{i:02d}:00Z"
            assert guard.run(key, lambda i=i: runs.append(i)) is not SKIPPED
            assert guard.run(key, lambda i=i: runs.append(i)) is SKIPPED
        assert runs == list(range(20))
    finally:
        ledger.close()


def test_completion_reports_run_many_times_through_pgbouncer(
    pg_dsn: str, pgbouncer_server: Any
) -> None:
    from goatbeat.beat import Beat

    beat = Beat(pg_dsn)
    beat.schedule(name="report", task="json.dumps", every="1h")
    beat.migrate()
    beat.publish()
    keys = [beat.store.request_run("report").idempotency_key for _ in range(8)]
    beat.close()
    worker_side = open_store(pgbouncer_server.pooled(pg_dsn))
    try:
        for key in keys:
            assert worker_side.record_started(key, worker="w1")
            assert worker_side.record_completion(key, outcome=Outcome.SUCCEEDED, worker="w1")
    finally:
        worker_side.close()
