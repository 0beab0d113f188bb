"""Shards: aggregate claim throughput by shards and processes, and a million idle schedules.

Throughput. N interval schedules (hourly, no-op submitter) in a fresh database, all falling
due at one instant ``T0`` a few seconds after the scheduler processes start (``goatbeat --app
bench._common:make_beat scheduler --shards S``, default settings otherwise), so the processes
have shared out the shard leases before anything is due. Measured: from ``T0`` to the moment
the database holds N executions ``submitted`` (polled every 50 ms from another connection),
for S = 1, 2, 4 shards held by P = 1 and 2 processes, against the same PostgreSQL, one case
after another in the same run, three times each (once with ``--quick``). Reported: N / that
time, the median of the runs, and every run's.

A million idle schedules. 1,000,000 schedules, none due for an hour (daily ones and 10,000
minutely ones whose first run is an hour away), inserted with SQL. One scheduler process with
``--shards 1`` and then ``--shards 4``: start-up (``Popen`` to its first ``lease.acquired``),
then over a window (60 s; 20 s with ``--quick``) its CPU time as a share of one core and its
resident memory (``VmRSS``). Then one leader iteration with 1 % (10,000) due, as
``bench_scale`` measures it (``claim_due(now=...)`` in batches of 500 + ``record_outcomes``
until nothing is left, then ``next_due_at``), at simulated minutes ``base + k min``, for one
shard (the ``scheduler`` lease) and for 4 shards held by one process (each shard's lease in
turn, ``next_due_at`` per shard); median of 3 minutes.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import (
    NoopSubmitter,
    Row,
    SchedulerProcess,
    Section,
    Servers,
    child_main,
    insert_schedules,
    migrate,
    proc_cpu_seconds,
    proc_rss_mb,
    run_child,
)

HOUR = {"kind": "interval", "every": 3600.0, "anchor": None}
DAY = {"kind": "interval", "every": 86400.0, "anchor": None}
MINUTE = {"kind": "interval", "every": 60.0, "anchor": None}
LEAD = 8.0
"""Seconds between the processes' start and T0: time to start and share the shards."""


def throughput(servers: Servers, total: int, shards: int, processes: int) -> dict[str, Any]:
    import psycopg

    dsn = servers.new_database("shards")
    procs: list[SchedulerProcess] = []
    try:
        migrate(dsn)
        t0 = datetime.now(UTC) + timedelta(hours=1)  # moved to T0 below, once shared out
        insert_schedules(dsn, [f"bench-{i}" for i in range(total)], [HOUR] * total, [t0] * total)
        for p in range(processes):
            procs.append(
                SchedulerProcess(
                    dsn, scheduler_id=f"bench-{shards}s-{p}", options=["--shards", str(shards)]
                )
            )
        for proc in procs:
            proc.wait_for("lease.shards" if shards > 1 else "scheduler.started", 60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT now()").fetchone()
            assert row is not None
            t0 = row[0] + timedelta(seconds=LEAD)
            conn.execute("UPDATE goatbeat_schedule SET next_run_at = %s", (t0,))
            conn.execute("NOTIFY goatbeat, 'schedule:0'")
            conn.execute("VACUUM ANALYZE goatbeat_schedule")
        time.sleep(max(0.0, (t0 - datetime.now(UTC)).total_seconds() - 0.5))
        holders = _holders(dsn)
        time.sleep(max(0.0, (t0 - datetime.now(UTC)).total_seconds()))
        began = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM goatbeat_execution WHERE status = 'submitted'"
                ).fetchone()
                done = int(row[0]) if row else 0
                if done >= total:
                    break
                if time.monotonic() - began > 600:
                    raise RuntimeError(f"only {done} of {total} submitted after 600 s")
                time.sleep(0.05)
        elapsed = time.monotonic() - began
        per_process = _per_scheduler(dsn)
    finally:
        for proc in procs:
            proc.stop()
        servers.drop_database(dsn)
    return {
        "total": total,
        "shards": shards,
        "processes": processes,
        "seconds": elapsed,
        "rate": total / elapsed,
        "holders": holders,
        "per_process": per_process,
    }


def _holders(dsn: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, holder FROM goatbeat_lease WHERE expires_at > now() ORDER BY name"
        ).fetchall()
    return {str(n): str(h) for n, h in rows}


def _per_scheduler(dsn: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT scheduler_id, count(*) FROM goatbeat_execution GROUP BY 1 ORDER BY 1"
        ).fetchall()
    return {str(s): int(n) for s, n in rows}


# -- a million idle schedules ---------------------------------------------------------------


def _million(servers: Servers, total: int, due: int) -> tuple[str, datetime]:
    dsn = servers.new_database("million")
    migrate(dsn)
    now = datetime.now(UTC)
    base = now.replace(second=0, microsecond=0) + timedelta(hours=1)
    later = now + timedelta(hours=6)
    names = [f"bench-{i}" for i in range(total)]
    specs = [MINUTE] * due + [DAY] * (total - due)
    nexts: list[datetime | None] = [base] * due + [
        later + timedelta(milliseconds=i) for i in range(total - due)
    ]
    insert_schedules(dsn, names, specs, nexts)
    return dsn, base


def idle(dsn: str, shards: int, window: float) -> dict[str, Any]:
    proc = SchedulerProcess(
        dsn, scheduler_id=f"bench-idle-{shards}", options=["--shards", str(shards)]
    )
    try:
        ready_at, _ = proc.wait_for("lease.acquired", 120)
        startup = ready_at - proc.started_at
        time.sleep(2.0)
        cpu0, t0 = proc_cpu_seconds(proc.pid), time.monotonic()
        time.sleep(window)
        cpu1, t1 = proc_cpu_seconds(proc.pid), time.monotonic()
        rss = proc_rss_mb(proc.pid)
    finally:
        proc.stop()
    return {
        "shards": shards,
        "startup": startup,
        "cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss_mb": rss,
        "window": t1 - t0,
    }


def child_iterations(args: dict[str, Any]) -> dict[str, Any]:
    from goatbeat.core.model import SubmitOutcome
    from goatbeat.core.shards import Shard
    from goatbeat.stores.postgres import PostgresStore

    store = PostgresStore(args["dsn"])
    count = int(args["shards"])
    shards = [Shard(index=i, count=count) for i in range(count)]
    grants = []
    for shard in shards:
        grant = store.acquire_lease(shard.lease, "bench-iter", timedelta(hours=1))
        assert grant is not None
        grants.append(grant)
    submitter = NoopSubmitter()
    base = datetime.fromisoformat(args["base"])
    times: list[float] = []
    claimed: list[int] = []
    for k in range(args["minutes"]):
        now = base + timedelta(minutes=k)
        began = time.perf_counter()
        n = 0
        for shard, grant in zip(shards, grants, strict=True):
            while True:
                result = store.claim_due(grant, scheduler_id="bench-iter", limit=500, now=now)
                if result.occurrences:
                    store.record_outcomes(
                        [
                            SubmitOutcome(
                                execution_id=o.execution_id,
                                ok=True,
                                backend_task_id=submitter.submit(o),
                            )
                            for o in result.occurrences
                        ]
                    )
                n += len(result.occurrences)
                if max(result.schedules_seen, len(result.occurrences)) < 500:
                    break
            store.next_due_at(shard=shard)
        times.append(time.perf_counter() - began)
        claimed.append(n)
    store.close()
    return {"seconds": times, "claimed": claimed}


HANDLERS = {"iterations": child_iterations}


def iterations(dsn: str, base: datetime, shards: int, first_minute: int, minutes: int) -> Any:
    out = run_child(
        "bench_shards",
        {
            "contender": "iterations",
            "dsn": dsn,
            "base": (base + timedelta(minutes=first_minute)).isoformat(),
            "minutes": minutes,
            "shards": shards,
        },
        timeout=1800,
    )
    out.update(shards=shards, median=statistics.median(out["seconds"]))
    return out


def _runs(res: dict[str, Any]) -> str:
    return ", ".join(f"{r:,.0f}" for r in res["all"])


def run(servers: Servers, *, quick: bool) -> Section:
    section = Section("Shards")
    total = 20_000 if quick else 50_000
    repeats = 1 if quick else 3
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for _ in range(repeats):
        # Round after round, so a slow spell of the machine hits every case alike.
        for processes in (1, 2):
            for shards in (1, 2, 4):
                res = throughput(servers, total, shards, processes)
                runs.setdefault((shards, processes), []).append(res)
                print(
                    f"  throughput {shards} shard(s), {processes} process(es): "
                    f"{res['rate']:,.0f} claims/s ({res['seconds']:.2f} s; by scheduler "
                    f"{res['per_process']}; leases {res['holders']})",
                    file=sys.stderr,
                )
    rates: dict[tuple[int, int], dict[str, Any]] = {}
    for key, results in runs.items():
        median = sorted(results, key=lambda r: r["rate"])[len(results) // 2]
        rates[key] = {**median, "all": [r["rate"] for r in results]}
    lines = [
        f"Aggregate claim throughput: {total:,} schedules due at one instant, no-op "
        f"submitter, same PostgreSQL; median of {repeats} (every run in brackets):\n",
        "| shards | 1 process | 2 processes |",
        "|---:|---:|---:|",
    ]
    for shards in (1, 2, 4):
        one, two = rates[shards, 1], rates[shards, 2]
        lines.append(
            f"| {shards} | {one['rate']:,.0f} /s ({_runs(one)}) | "
            f"{two['rate']:,.0f} /s ({_runs(two)}) |"
        )
    lines.append("\nClaims by scheduler with 2 processes:\n")
    for shards in (1, 2, 4):
        lines.append(f"- {shards} shard(s): {rates[shards, 2]['per_process']}")

    million = 200_000 if quick else 1_000_000
    due = million // 100
    window = 20.0 if quick else 60.0
    minutes = 3
    dsn, base = _million(servers, million, due)
    try:
        idles = [idle(dsn, shards, window) for shards in (1, 4)]
        for res in idles:
            print(
                f"  idle {million:,}, {res['shards']} shard(s): start {res['startup']:.2f} s, "
                f"cpu {res['cpu_percent']:.2f} %, rss {res['rss_mb']:.1f} MB",
                file=sys.stderr,
            )
        iters = [
            iterations(dsn, base, shards, offset, minutes)
            for offset, shards in ((0, 1), (minutes, 4))
        ]
        for res in iters:
            print(
                f"  iteration {million:,} schedules, {due:,} due, {res['shards']} shard(s): "
                f"{res['median'] * 1000:.0f} ms (claimed {res['claimed']})",
                file=sys.stderr,
            )
    finally:
        servers.drop_database(dsn)
    lines += [
        f"\n{million:,} idle schedules, one scheduler process (CPU and RSS over {window:.0f} s):\n",
        "| shards | start-up to first lease | idle CPU (one core) | RSS | "
        f"iteration with 1 % ({due:,}) due |",
        "|---:|---:|---:|---:|---:|",
    ]
    for res, it in zip(idles, iters, strict=True):
        lines.append(
            f"| {res['shards']} | {res['startup']:.2f} s | {res['cpu_percent']:.2f} % | "
            f"{res['rss_mb']:.1f} MB | {it['median'] * 1000:.0f} ms |"
        )
    section.details = "\n".join(lines) + "\n"
    best = max(rates.values(), key=lambda r: r["rate"])
    section.rows += [
        Row(section.name, "claims/s, 1 shard, 1 process", rates[1, 1]["rate"], "/s"),
        Row(
            section.name,
            f"claims/s, best ({best['shards']} shards, {best['processes']} processes)",
            best["rate"],
            "/s",
            reference="1 shard, 1 process",
            ratio=best["rate"] / rates[1, 1]["rate"],
        ),
        Row(section.name, f"start-up, {million:,} schedules, 4 shards", idles[1]["startup"], "s"),
        Row(
            section.name,
            f"idle CPU, {million:,} schedules, 4 shards",
            idles[1]["cpu_percent"],
            "% of a core",
        ),  # fmt: skip
        Row(section.name, f"RSS, {million:,} schedules, 4 shards", idles[1]["rss_mb"], "MB"),
        Row(
            section.name,
            f"iteration, {million:,} schedules, 1 % due, 4 shards",
            iters[1]["median"] * 1000,
            "ms",
        ),  # fmt: skip
    ]
    section.chart = {f"{s} shards, {p} proc": r["rate"] for (s, p), r in rates.items()}
    return section


if __name__ == "__main__":
    if not child_main(HANDLERS):
        sys.exit("usage: python -m bench (this module runs as its child)")
