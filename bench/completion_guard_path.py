"""The idempotency guard's task path alone (#30 item 6): the time one guarded delivery of a
no-op spends in ``Guard.run``, with and without a reporter process for the ledger's database.

    python -m bench.completion_guard_path [--deliveries 1000] [--relay]

Without ``--relay`` each delivery commits ``delivery_begin`` and ``delivery_succeeded`` on its
own connection (as without completion reports); with it, only ``delivery_begin``, and the
success goes down the reporter's pipe (docs/operations.md, "The idempotency guard and the
reporter"). One process, a durable PostgreSQL (as bench/bench_completions.py's), every
delivery a new key. Prints the median, p90, p99 and max per delivery, the mean, the CPU time
per delivery, and the ledger's states once the reporter wrote what it held. Figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench._common import Servers
from goatbeat.idempotency import Guard
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.stores import open_store


def measure(dsn: str, deliveries: int, relayed: bool) -> str:
    store = open_store(dsn)
    try:
        store.migrate()
    finally:
        store.close()
    reporter = None
    if relayed:
        from goatbeat.completion.relay import RelayedReporter

        reporter = RelayedReporter(dsn)
        reporter.start_relay()
    ledger = PostgresLedger(dsn)
    try:
        guard = Guard(ledger)
        guard.run("warm:2031-01-01T00:00:00Z", lambda: None)  # the connection, opened
        times = []
        cpu = time.process_time()
        began = time.perf_counter()
        for i in range(deliveries):
            key = f"job:2031-01-01T00:00:00.{i:06d}Z"
            start = time.perf_counter()
            guard.run(key, lambda: None)
            times.append(time.perf_counter() - start)
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu
        if reporter is not None and reporter.relay is not None:
            reporter.relay.close()  # the reporter writes what it holds, then exits
            reporter.relay.process.wait(60)
        import psycopg

        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT state, count(*) FROM goatbeat_delivery GROUP BY state")
            states = dict(rows.fetchall())
    finally:
        ledger.close()
    q = statistics.quantiles(times, n=100)
    ms = 1000.0
    return (
        f"{'with a reporter' if relayed else 'no reporter'}: median "
        f"{statistics.median(times) * ms:.2f} ms, p90 {q[89] * ms:.2f}, p99 {q[98] * ms:.2f}, "
        f"max {max(times) * ms:.1f}; mean {wall / deliveries * ms:.2f} ms; CPU "
        f"{cpu / deliveries * ms:.2f} ms per delivery; ledger {states}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--relay", action="store_true")
    args = parser.parse_args()
    servers = Servers().start()
    try:
        dsn = servers.new_database("guard_path")
        print(measure(dsn, args.deliveries, args.relay), flush=True)
        servers.drop_database(dsn)
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
