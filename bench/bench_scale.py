"""Scale: many schedules, little due.

Idle. 10,000 then 100,000 interval schedules, none due for hours, in a fresh database. The
scheduler runs as operators run it (``goatbeat --app ... --log-format json scheduler``, the
no-op submitter, default settings: lease renewed every 10 s, ``max_sleep`` 60 s):

- start-up: from ``Popen`` to its ``lease.acquired`` log line (interpreter, imports,
  connection, lease; the first claim follows at once), and the wall time of a whole
  ``scheduler --once`` run (start, one iteration, lease release, exit);
- after 2 s, over a window (60 s; 20 s with ``--quick``): CPU time of the process from
  ``/proc/<pid>/stat`` as a share of one core, its resident memory (``VmRSS``), and the
  database's transactions (``xact_commit + xact_rollback`` of ``pg_stat_database``, read from
  another database) per minute. In autocommit every statement is one transaction.

Per-iteration cost. In one process against a PostgreSQL store holding T schedules of which D
are due each minute (interval 1 min; the rest daily), simulated minutes: at ``base + k min``
(the due schedules' first run is ``base``),
``claim_due(now=...)`` in batches of 500 until nothing is left, ``record_outcomes`` per batch,
then ``next_due_at()`` — one leader iteration without the clock wait. Reported: the median
wall time of 5 such minutes (3 with ``--quick``) for (T, D) = (10k, 100), (100k, 100),
(100k, 1,000 = 1 %), (100k, 5,000).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import (
    ROOT,
    NoopSubmitter,
    Row,
    SchedulerProcess,
    Section,
    Servers,
    child_env,
    child_main,
    db_xacts,
    insert_schedules,
    migrate,
    proc_cpu_seconds,
    proc_rss_mb,
    run_child,
)

DAY = {"kind": "interval", "every": 86400.0, "anchor": None}
MINUTE = {"kind": "interval", "every": 60.0, "anchor": None}


def _idle_database(servers: Servers, total: int) -> str:
    dsn = servers.new_database("scale")
    migrate(dsn)
    later = datetime.now(UTC) + timedelta(hours=6)
    insert_schedules(
        dsn,
        [f"bench-{i}" for i in range(total)],
        [DAY] * total,
        [later + timedelta(milliseconds=i) for i in range(total)],
    )
    return dsn


def _once_seconds(dsn: str) -> float:
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "goatbeat", "--app", "bench._common:make_beat", "scheduler",
         "--once", "--scheduler-id", "bench-once"],
        cwd=ROOT,
        env=child_env(GOATBEAT_BENCH_DB=dsn),
        check=True,
        capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - began


def idle(servers: Servers, total: int, window: float) -> dict[str, Any]:
    dsn = _idle_database(servers, total)
    try:
        once = _once_seconds(dsn)
        proc = SchedulerProcess(dsn, scheduler_id=f"bench-idle-{total}")
        try:
            ready_at, _ = proc.wait_for("lease.acquired", 60)
            startup = ready_at - proc.started_at
            time.sleep(2.0)
            cpu0, x0, t0 = (
                proc_cpu_seconds(proc.pid),
                db_xacts(servers.pg_dsn, dsn),
                time.monotonic(),
            )
            time.sleep(window)
            cpu1, x1, t1 = (
                proc_cpu_seconds(proc.pid),
                db_xacts(servers.pg_dsn, dsn),
                time.monotonic(),
            )
            rss = proc_rss_mb(proc.pid)
        finally:
            proc.stop()
    finally:
        servers.drop_database(dsn)
    elapsed = t1 - t0
    return {
        "total": total,
        "startup": startup,
        "once": once,
        "cpu_percent": 100 * (cpu1 - cpu0) / elapsed,
        "rss_mb": rss,
        "xacts_per_min": (x1 - x0) * 60 / elapsed,
        "window": elapsed,
    }


# -- per-iteration cost, in a child ---------------------------------------------------------


def child_iterations(args: dict[str, Any]) -> dict[str, Any]:
    from goatbeat.core.model import SubmitOutcome
    from goatbeat.stores.postgres import PostgresStore

    store = PostgresStore(args["dsn"])
    grant = store.acquire_lease("scheduler", "bench-iter", timedelta(hours=1))
    assert grant is not None
    submitter = NoopSubmitter()
    base = datetime.fromisoformat(args["base"])
    times: list[float] = []
    claimed: list[int] = []
    for k in range(args["minutes"]):
        now = base + timedelta(minutes=k)
        began = time.perf_counter()
        count = 0
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
            count += len(result.occurrences)
            if max(result.schedules_seen, len(result.occurrences)) < 500:
                break
        store.next_due_at()
        times.append(time.perf_counter() - began)
        claimed.append(count)
    store.close()
    return {"seconds": times, "claimed": claimed}


HANDLERS = {"iterations": child_iterations}


def iterations(servers: Servers, total: int, due: int, minutes: int) -> dict[str, Any]:
    dsn = servers.new_database("iter")
    try:
        migrate(dsn)
        now = datetime.now(UTC)
        base = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        later = now + timedelta(hours=6)
        names = [f"bench-{i}" for i in range(total)]
        specs = [MINUTE] * due + [DAY] * (total - due)
        nexts: list[datetime | None] = [base] * due + [later] * (total - due)
        insert_schedules(dsn, names, specs, nexts)
        out = run_child(
            "bench_scale",
            {"contender": "iterations", "dsn": dsn, "base": base.isoformat(), "minutes": minutes},
            timeout=900,
        )
    finally:
        servers.drop_database(dsn)
    out.update(total=total, due=due, median=statistics.median(out["seconds"]))
    return out


def run(servers: Servers, *, quick: bool) -> Section:
    window = 20.0 if quick else 60.0
    section = Section("Scale: 100,000 schedules")
    idles = []
    for total in (10_000, 100_000):
        res = idle(servers, total, window)
        print(
            f"  idle {total}: start {res['startup']:.2f}s, once {res['once']:.2f}s, "
            f"cpu {res['cpu_percent']:.2f}%, rss {res['rss_mb']:.1f} MB, "
            f"{res['xacts_per_min']:.1f} xacts/min",
            file=sys.stderr,
        )
        idles.append(res)
    small, big = idles
    lines = [
        f"Idle (nothing due), measured over {window:.0f} s:\n",
        "| schedules | start-up to lease | `scheduler --once` | CPU (one core) | RSS | "
        "transactions/min |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for res in idles:
        lines.append(
            f"| {res['total']:,} | {res['startup']:.2f} s | {res['once']:.2f} s | "
            f"{res['cpu_percent']:.2f} % | {res['rss_mb']:.1f} MB | {res['xacts_per_min']:.1f} |"
        )
    section.rows += [
        Row(section.name, "start-up, 100k schedules", big["startup"], "s", target="< 2 s",
            met=big["startup"] < 2.0),
        Row(section.name, "idle CPU, 100k schedules", big["cpu_percent"], "% of a core",
            target="near zero", met=big["cpu_percent"] < 1.0),
        Row(section.name, "resident memory, 100k schedules", big["rss_mb"], "MB",
            reference="10k schedules", ratio=big["rss_mb"] / small["rss_mb"],
            target="independent of count", met=big["rss_mb"] < small["rss_mb"] * 1.2),
        Row(section.name, "database transactions/min, idle, 100k", big["xacts_per_min"], "/min"),
    ]  # fmt: skip

    minutes = 3 if quick else 5
    cases = [(10_000, 100), (100_000, 100), (100_000, 1_000), (100_000, 5_000)]
    iters = []
    for total, due in cases:
        res = iterations(servers, total, due, minutes)
        print(
            f"  iteration {total} total, {due} due: {res['median'] * 1000:.1f} ms "
            f"(claimed {res['claimed']})",
            file=sys.stderr,
        )
        iters.append(res)
    lines += [
        f"\nOne leader iteration per simulated minute (median of {minutes}):\n",
        "| schedules | due per minute | ms per iteration | µs per due occurrence |",
        "|---:|---:|---:|---:|",
    ]
    for res in iters:
        lines.append(
            f"| {res['total']:,} | {res['due']:,} | {res['median'] * 1000:.1f} | "
            f"{res['median'] * 1e6 / res['due']:.0f} |"
        )
    by = {(r["total"], r["due"]): r["median"] for r in iters}
    flat = by[(100_000, 100)] / by[(10_000, 100)]
    section.rows += [
        Row(section.name, "iteration, 100k schedules, 1% (1,000) due", by[(100_000, 1_000)] * 1000,
            "ms"),
        Row(section.name, "iteration, 100 due: 100k vs 10k schedules", flat, "x",
            target="~1x (tracks what is due)", met=flat < 1.5),
    ]  # fmt: skip
    section.details = "\n".join(lines) + "\n"
    section.chart = {
        "due": [r["due"] for r in iters if r["total"] == 100_000],
        "ms": [r["median"] * 1000 for r in iters if r["total"] == 100_000],
        "rss": {f"{r['total']:,}": r["rss_mb"] for r in idles},
    }
    return section


if __name__ == "__main__":
    if not child_main(HANDLERS):
        sys.exit("usage: python -m bench (this module runs as its child)")
