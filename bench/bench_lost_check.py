"""What the leader's lost-run check costs at 100,000 schedules on PostgreSQL.

    python -m bench.bench_lost_check [--schedules 100000] [--checks 60]

The leader calls ``end_lost_runs`` every ``LOST_CHECK_INTERVAL`` (5 s). It needs the longest
``max_runtime``/``expires`` of all schedules, a pass over the schedule table. A fresh database
holds ``--schedules`` interval schedules (one in 1,000 with a ``max_runtime``) and no open
run; one store calls ``end_lost_runs`` ``--checks`` times in a row, as that many checks (5 min
of them by default), and the median wall time of one check is reported, with the statement
that reads the bound alone. "Every check reads it" is what the store did before it kept the
bound (``BOUND_REFRESH``), measured by forgetting the kept bound before each call.
PostgreSQL is started on a free loopback port (``GOATBEAT_BENCH_PG_DSN`` reuses a running
one). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

import psycopg

from bench._common import Servers, insert_schedules, migrate
from goatbeat.core.scheduler import LOST_CHECK_INTERVAL
from goatbeat.stores.postgres import PostgresStore
from goatbeat.stores.store import BOUND_REFRESH

DAY = {"kind": "interval", "every": 86400.0, "anchor": None}


def _checks(store: PostgresStore, count: int, *, forget: bool) -> list[float]:
    times = []
    for _ in range(count):
        if forget:
            store._bound = None  # the store before it kept the bound
        began = time.perf_counter()
        store.end_lost_runs(lost_after=timedelta(hours=1))
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--checks", type=int, default=60)
    args = parser.parse_args()
    servers = Servers().start()
    try:
        dsn = servers.new_database("lost")
        migrate(dsn)
        total = args.schedules
        later = datetime.now(UTC) + timedelta(hours=6)
        insert_schedules(
            dsn,
            [f"bench-{i}" for i in range(total)],
            [DAY] * total,
            [later + timedelta(milliseconds=i) for i in range(total)],
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE goatbeat_schedule SET max_runtime = 30 WHERE id % 1000 = 0")
            conn.execute("VACUUM ANALYZE goatbeat_schedule")
            statement = []
            for _ in range(args.checks):
                began = time.perf_counter()
                conn.execute(
                    "SELECT max(GREATEST(COALESCE(max_runtime, 0), COALESCE(expires, 0))) "
                    "FROM goatbeat_schedule"
                ).fetchone()
                statement.append(time.perf_counter() - began)
        store = PostgresStore(dsn)
        try:
            store.end_lost_runs(lost_after=timedelta(hours=1))  # connect, warm up
            before = _checks(store, args.checks, forget=True)
            after = _checks(store, args.checks, forget=False)
        finally:
            store.close()
        servers.drop_database(dsn)
    finally:
        servers.stop()
    ms = 1000.0
    print(f"schedules: {total:,}; checks: {args.checks} in a row, median per check")
    print(f"the bound's statement alone:           {statistics.median(statement) * ms:8.2f} ms")
    print(f"every check reads the bound (before):  {statistics.median(before) * ms:8.2f} ms")
    print(f"the bound kept (after):                {statistics.median(after) * ms:8.2f} ms")
    per_minute = 60 / LOST_CHECK_INTERVAL
    refresh = BOUND_REFRESH.total_seconds() / 60
    print(
        "database time per minute of leading:   "
        f"before {statistics.median(before) * ms * per_minute:.0f} ms, "
        f"after {statistics.median(after) * ms * per_minute:.1f} ms "
        f"+ one read of the bound per {refresh:g} min"
    )


if __name__ == "__main__":
    main()
