"""Lateness: how long after its scheduled instant an occurrence reaches the broker.

10,000 cron schedules spread over the minute (six-field expressions ``S * * * * *`` with
``S = i mod 60``: about 167 due every second), in PostgreSQL. The scheduler runs as operators
run it (``goatbeat ... --log-format json scheduler``, INFO logs, default settings, the Celery
submitter sending to the real Redis). With the defaults, each second's occurrences are claimed
up to 250 ms before their instant (``claim_ahead``) and published at the instant, in kombu
batches of 50 (one Redis round trip each). After it took the lease and a 5 s warm-up, every
occurrence scheduled in the measured window (2 minutes; 1 with ``--quick``) counts:

- lateness at the broker (the headline): a thread of the benchmark pops each message off
  Redis's ``celery`` list as it lands (``BLPOP``) and subtracts the scheduled instant carried in
  its task id (the idempotency key ``<name>:<scheduled_at>``) from the arrival time;
- lateness of the bookkeeping: ``submitted_at - scheduled_at`` from ``goatbeat_execution``,
  where ``submitted_at`` is the database's ``now()`` when the outcome of the occurrence's batch
  was recorded, after the whole batch was sent (so one value per batch).

Both clocks are the same host's wall clock. goatbeat adds no deliberate jitter.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import (
    QUEUE,
    Row,
    SchedulerProcess,
    Section,
    Servers,
    insert_schedules,
    migrate,
    percentile,
    redis_client,
    reset_queue,
)

TARGET_P99_MS = 50.0  # issue #18


def _next_at_second(after: datetime, second: int) -> datetime:
    base = after.replace(microsecond=0)
    candidate = base.replace(second=second)
    while candidate <= after:
        candidate += timedelta(minutes=1)
    return candidate


class BrokerClock:
    """Pops messages off the queue as they land and records (scheduled_at, arrival)."""

    def __init__(self, redis_url: str) -> None:
        import threading

        self.client = redis_client(redis_url)
        self.arrivals: list[tuple[datetime, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self.client.blpop([QUEUE], timeout=0.5)
            if item is None:
                continue
            arrived = time.time()
            task_id = json.loads(item[1])["headers"]["id"]
            _, _, stamp = task_id.partition(":")
            self.arrivals.append((datetime.fromisoformat(stamp), arrived))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def lateness_ms(self, lo: datetime, hi: datetime) -> list[float]:
        return [(arrived - at.timestamp()) * 1000 for at, arrived in self.arrivals if lo <= at < hi]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else float("nan"),
    }


def measure(servers: Servers, n: int, window: float) -> dict[str, Any]:
    import psycopg

    dsn = servers.new_database("late")
    reset_queue(servers.redis_url)
    try:
        migrate(dsn)
        start = datetime.now(UTC) + timedelta(seconds=10)
        seconds = [i % 60 for i in range(n)]
        insert_schedules(
            dsn,
            [f"late-{i}" for i in range(n)],
            [{"kind": "cron", "expression": f"{s} * * * * *", "timezone": "UTC"} for s in seconds],
            [_next_at_second(start, s) for s in seconds],
            misfire_grace=60.0,
        )
        clock = BrokerClock(servers.redis_url)
        proc = SchedulerProcess(dsn, broker=servers.redis_url, scheduler_id="bench-late")
        try:
            proc.wait_for("lease.acquired", 60)
            # Measure from the first whole second after the warm-up.
            lo = max(datetime.now(UTC), start) + timedelta(seconds=5)
            lo = lo.replace(microsecond=0) + timedelta(seconds=1)
            hi = lo + timedelta(seconds=window)
            time.sleep(max(0.0, (hi - datetime.now(UTC)).total_seconds()) + 2.0)
        finally:
            proc.stop()
            clock.stop()
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM submitted_at - scheduled_at) * 1000, status "
                "FROM goatbeat_execution WHERE scheduled_at >= %s AND scheduled_at < %s",
                [lo, hi],
            ).fetchall()
    finally:
        servers.drop_database(dsn)
    broker = clock.lateness_ms(lo, hi)
    booked = [float(r[0]) for r in rows if r[0] is not None]
    return {
        "n": n,
        "window": window,
        "expected": round(n * window / 60),
        "occurrences": len(rows),
        "submitted": sum(1 for r in rows if r[1] == "submitted"),
        "landed": len(broker),
        **_stats(broker),
        "booked": _stats(booked),
    }


def run(servers: Servers, *, quick: bool) -> Section:
    n = 10_000
    res = measure(servers, n, 60.0 if quick else 120.0)
    print(
        f"  lateness: p50 {res['p50']:.1f} ms, p99 {res['p99']:.1f} ms, max {res['max']:.1f} ms "
        f"({res['submitted']} of {res['expected']} expected)",
        file=sys.stderr,
    )
    section = Section("Lateness: 10,000 cron schedules spread over the minute")
    section.rows = [
        Row(section.name, "lateness p50 (at the broker)", res["p50"], "ms"),
        Row(
            section.name,
            "lateness p99 (at the broker)",
            res["p99"],
            "ms",
            target=f"< {TARGET_P99_MS:.0f} ms",
            met=res["p99"] < TARGET_P99_MS,
        ),
    ]
    booked = res["booked"]
    section.details = (
        f"{res['occurrences']:,} occurrences scheduled in a {res['window']:.0f} s window "
        f"({res['expected']:,} expected), {res['submitted']:,} marked submitted, "
        f"{res['landed']:,} seen landing in Redis.\n\n"
        "| lateness | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|\n"
        f"| at the broker | {res['p50']:.1f} ms | {res['p90']:.1f} ms | {res['p99']:.1f} ms | "
        f"{res['max']:.1f} ms |\n"
        f"| bookkeeping (`submitted_at`) | {booked['p50']:.1f} ms | {booked['p90']:.1f} ms | "
        f"{booked['p99']:.1f} ms | {booked['max']:.1f} ms |\n"
    )
    section.chart = {k: res[k] for k in ("p50", "p90", "p99", "max")}
    return section
