"""What ``goatbeat status --check`` reads at 100,000 schedules on PostgreSQL.

    python -m bench.bench_refusals [--schedules 100000] [--refused 10] [--reads 30]

A fresh database holds ``--schedules`` interval schedules, ``--refused`` of them refused (a
refused run each, as a scheduler that does not know their task leaves them). Reported: the
median wall time of the status read (``store.status()``, indexed) and of the refused
schedules' read (``store.refusals(limit=20)``, one pass over the schedule table, then the
refused rows' runs by index), ``--reads`` times each, on one store. PostgreSQL is started on a
free loopback port (``GOATBEAT_BENCH_PG_DSN`` reuses a running one). Figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench._common import Servers, insert_schedules, migrate
from goatbeat.stores.postgres import PostgresStore

DAY = {"kind": "interval", "every": 86400.0, "anchor": None}


def _median_ms(call: Callable[[], Any], reads: int) -> float:
    times = []
    for _ in range(reads):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--refused", type=int, default=10)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    servers = Servers().start()
    try:
        dsn = servers.new_database("refusals")
        migrate(dsn)
        total = args.schedules
        later = datetime.now(UTC) + timedelta(hours=6)
        insert_schedules(
            dsn,
            [f"bench-{i}" for i in range(total)],
            [DAY] * total,
            [later + timedelta(milliseconds=i) for i in range(total)],
        )
        store = PostgresStore(dsn)
        try:
            grant = store.acquire_lease("scheduler", "bench", timedelta(minutes=10))
            assert grant is not None
            for i in range(args.refused):
                name = f"bench-{i * (total // max(1, args.refused))}"
                run = store.request_run(name)
                store.claim_manual_runs(grant, scheduler_id="bench", execution_ids=[run.id])
                schedule = store.get(name)
                assert schedule.id is not None
                store.refuse(schedule.id, schedule.task, reason="refused: not a known task")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            found = store.refusals(limit=20)
            assert found.total == args.refused, found
            status = _median_ms(store.status, args.reads)
            refusals = _median_ms(lambda: store.refusals(limit=20), args.reads)
        finally:
            store.close()
        servers.drop_database(dsn)
    finally:
        servers.stop()
    print(f"schedules: {total:,}, {args.refused} refused; median of {args.reads} reads")
    print(f"store.status() (indexed):          {status:8.2f} ms")
    print(f"store.refusals(limit=20):          {refusals:8.2f} ms")


if __name__ == "__main__":
    main()
