"""Start-up with schedules declared in code, and dispatch from a real scheduler process.

Code schedules. ``bench/code_app.py`` declares N schedules in code, as a large ``schedules.py``
does (``beat.schedule(...)`` N times: crons at spread hours and minutes, intervals of 60 to 70
minutes, each with its own argument). The scheduler runs as operators run it, ``goatbeat --app
bench.code_app:make_beat --log-format json scheduler`` (no-op submitter), in a fresh database:

- first start: from ``Popen`` to its ``lease.acquired`` log line, which follows the start-up
  publication (every declaration is new: all of them are written);
- restart, nothing changed: the same process started again on the same database (every
  declaration is found unchanged; nothing is written);
- resident memory: ``VmRSS`` of the restarted process 3 s after it is ready (idle, its
  declarations published), and its peak, ``VmHWM``.

celery beat reads the same declarations from a ``beat_schedule`` (``bench.code_app:celery_app``):
a child process builds the app, creates ``PersistentScheduler`` (a fresh shelve file) and runs
its first ``tick()``; from ``Popen`` to the end of that tick, and its ``VmRSS`` then, beside
the ``VmRSS`` of the same child with an empty ``beat_schedule`` (the difference is what the
schedules cost).

End to end. N = 10,000 schedules declared in code (every minute), published, then all made due
(``next_run_at`` set to the current minute) while no scheduler runs; then ``goatbeat scheduler``
(Celery over Redis, default settings) is started as a subprocess, and Redis's ``celery`` list
is polled every 2 ms: time from ``Popen`` to the first message, and from the first message
to the N-th. The rate (N - 1 messages over that time) is compared with the batched bare loop
(``send_task`` inside kombu's ``producer.batch()``, 50 a batch, one producer) measured in the
same run, in a fresh process with a warm connection.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from bench._common import (
    ROOT,
    Row,
    SchedulerProcess,
    Section,
    Servers,
    child_env,
    child_main,
    fmt,
    migrate,
    proc_rss_mb,
    queue_length,
    reset_queue,
    run_child,
)

TARGET_RESTART = 2.0
TARGET_FIRST = 5.0
TARGET_RSS = 120.0
TARGET_FIRST_MESSAGE = 0.5
TARGET_BATCHED = 0.9
POLL = 0.002
"""How often the end-to-end run asks Redis how many messages landed: often enough to time a
second to within 0.2 %, rarely enough that the asking (a Python loop and Redis's answers) does
not take a core from the scheduler it measures (every 0.2 ms it took most of one)."""


def _hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _start(dsn: str, count: int) -> dict[str, float]:
    proc = SchedulerProcess(
        dsn,
        app="bench.code_app:make_beat",
        scheduler_id="bench-startup",
        env={"GOATBEAT_BENCH_SCHEDULES": str(count)},
    )
    try:
        ready_at, _ = proc.wait_for("lease.acquired", 300)
        seconds = ready_at - proc.started_at
        time.sleep(3.0)
        rss, hwm = proc_rss_mb(proc.pid), _hwm_mb(proc.pid)
    finally:
        proc.stop()
    return {"seconds": seconds, "rss": rss, "hwm": hwm}


# -- celery beat, in a child ----------------------------------------------------------------


def child_celery_beat(args: dict[str, Any]) -> dict[str, Any]:
    import os
    import tempfile

    os.environ["GOATBEAT_BENCH_SCHEDULES"] = str(args["count"])
    os.environ["GOATBEAT_BENCH_BROKER"] = args["redis"]
    from celery.beat import PersistentScheduler

    from bench.code_app import celery_app

    app = celery_app()
    path = os.path.join(tempfile.mkdtemp(prefix="bench-beat-"), "celerybeat-schedule")
    scheduler = PersistentScheduler(app=app, schedule_filename=path)
    scheduler.tick()
    out = {
        "entries": len(scheduler.schedule),
        "rss": proc_rss_mb(os.getpid()),
        "hwm": _hwm_mb(os.getpid()),
    }
    # The parent stamps this line: the end of the first tick.
    print("READY", flush=True)
    scheduler.close()
    return out


def _celery_beat(servers: Servers, count: int) -> dict[str, Any]:
    import json

    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_startup", "--child",
         json.dumps({"contender": "celery_beat", "count": count, "redis": servers.redis_url})],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready = None
    last = ""
    for line in proc.stdout:
        if line.strip() == "READY" and ready is None:
            ready = time.monotonic() - began
        if line.startswith("{"):
            last = line
    proc.wait(600)
    if proc.returncode != 0 or not last or ready is None:
        raise RuntimeError(f"celery beat child failed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
    out: dict[str, Any] = json.loads(last)
    out["seconds"] = ready
    return out


# -- end to end -----------------------------------------------------------------------------


def _end_to_end(servers: Servers, n: int) -> dict[str, Any]:
    import psycopg

    dsn = servers.new_database("e2e")
    migrate(dsn)
    env = {"GOATBEAT_BENCH_SCHEDULES": str(n), "GOATBEAT_BENCH_DUE": str(n)}
    subprocess.run(
        [sys.executable, "-m", "goatbeat", "--app", "bench.code_app:make_beat", "publish"],
        cwd=ROOT, env=child_env(GOATBEAT_BENCH_DB=dsn, **env), check=True, capture_output=True,
    )  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Due now, on the minute (every schedule is on the same grid), as after a deploy pause.
        conn.execute("UPDATE goatbeat_schedule SET next_run_at = date_trunc('minute', now())")
        conn.execute("VACUUM ANALYZE goatbeat_schedule")
    reset_queue(servers.redis_url)
    redis_url = servers.redis_url
    proc = SchedulerProcess(
        dsn, broker=redis_url, app="bench.code_app:make_beat", scheduler_id="bench-e2e", env=env
    )
    first = last = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            landed = queue_length(redis_url)
            now = time.monotonic()
            if landed and first is None:
                first = now
            if landed >= n:
                last = now
                break
            if proc.proc.poll() is not None:
                break
            time.sleep(POLL)
    finally:
        proc.stop()
        servers.drop_database(dsn)
    if first is None or last is None:
        tail = [e for _, e in proc.events[-10:]]
        raise RuntimeError(f"the scheduler did not dispatch {n:,} messages: {tail}")
    return {
        "first_message": first - proc.started_at,
        "seconds": last - first,
        "rate": (n - 1) / (last - first) if last > first else None,
    }


def _batched_loop(servers: Servers, n: int) -> float:
    reset_queue(servers.redis_url)
    out = run_child(
        "bench_dispatch",
        {"contender": "send_task_batch", "n": n, "cap": 600.0, "redis": servers.redis_url},
        timeout=900,
    )
    return float(out["rate"])


# -- the parent -----------------------------------------------------------------------------


def run(servers: Servers, *, quick: bool) -> Section:
    count = 20_000 if quick else 100_000
    e2e_n = 10_000
    repeats = 1 if quick else 3
    section = Section("Code schedules: start-up, memory, and a real scheduler process")

    dsn = servers.new_database("startup")
    migrate(dsn)
    try:
        first = _start(dsn, count)
        print(f"  startup first start: {first}", file=sys.stderr)
        restarts = [_start(dsn, count) for _ in range(repeats)]
        for r in restarts:
            print(f"  startup restart: {r}", file=sys.stderr)
    finally:
        servers.drop_database(dsn)
    restart = sorted(restarts, key=lambda r: r["seconds"])[len(restarts) // 2]
    try:
        beat = _celery_beat(servers, count)
        empty = _celery_beat(servers, 0)
        print(f"  celery beat: {beat}, empty: {empty}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - the comparison must not hide goatbeat's figures
        print(f"  celery beat failed: {exc}", file=sys.stderr)
        beat = empty = None

    e2e_runs, loops = [], []
    for _ in range(repeats):
        loops.append(_batched_loop(servers, e2e_n))
        e2e_runs.append(_end_to_end(servers, e2e_n))
        print(f"  e2e: {e2e_runs[-1]}, batched loop {loops[-1]:.0f}/s", file=sys.stderr)
    e2e_rate = statistics.median([r["rate"] for r in e2e_runs])
    e2e_first = statistics.median([r["first_message"] for r in e2e_runs])
    loop = statistics.median(loops)

    label = f"{count:,} code schedules"
    rows = [
        Row(section.name, f"first start (publishes all), {label}", first["seconds"], "s",
            target=f"< {TARGET_FIRST:g} s", met=first["seconds"] < TARGET_FIRST),
        Row(section.name, f"restart, nothing changed: ready, {label}", restart["seconds"], "s",
            reference="celery beat" if beat else "",
            ratio=restart["seconds"] / beat["seconds"] if beat else None,
            target=f"< {TARGET_RESTART:g} s", met=restart["seconds"] < TARGET_RESTART),
        Row(section.name, f"resident memory after start, {label}", restart["rss"], "MB",
            reference=f"celery beat +{beat['rss'] - empty['rss']:.0f} MB" if beat and empty else "",
            target=f"< {TARGET_RSS:g} MB", met=restart["rss"] < TARGET_RSS),
        Row(section.name, f"peak resident memory (VmHWM), {label}", restart["hwm"], "MB"),
        Row(section.name, f"exec -> first message in Redis, {e2e_n:,} code schedules due",
            e2e_first, "s", target=f"< {TARGET_FIRST_MESSAGE:g} s",
            met=e2e_first < TARGET_FIRST_MESSAGE),
        Row(section.name, f"goatbeat scheduler process, {e2e_n:,} due -> Redis", e2e_rate,
            "occ/s", reference="bare send_task (batches of 50)", ratio=e2e_rate / loop,
            target=f">= {TARGET_BATCHED:.0%} of the batched loop",
            met=e2e_rate / loop >= TARGET_BATCHED),
    ]  # fmt: skip
    if beat:
        rows.insert(
            2,
            Row(section.name, f"celery beat (PersistentScheduler): first tick, {label}",
                beat["seconds"], "s"),
        )  # fmt: skip
    section.rows = rows
    lines = [
        "| measure | goatbeat | celery beat |",
        "|---|---:|---:|",
        f"| first start, {label} (s) | {first['seconds']:.2f} | "
        f"{'' if not beat else f'{beat["seconds"]:.2f} (fresh shelve)'} |",
        f"| restart, nothing changed (s) | {restart['seconds']:.2f} "
        f"(runs: {', '.join(f'{r["seconds"]:.2f}' for r in restarts)}) | |",
        f"| VmRSS when ready (MB) | {restart['rss']:.0f} | "
        f"{'' if not beat else f'{beat["rss"]:.0f} (+{beat["rss"] - empty["rss"]:.0f} over an empty beat_schedule)'} |",
        f"| VmHWM, peak (MB) | {restart['hwm']:.0f} (first start: {first['hwm']:.0f}) | "
        f"{'' if not beat else f'{beat["hwm"]:.0f}'} |",
        "",
        "| end to end, 10,000 due | value |",
        "|---|---:|",
        f"| exec -> first message (s), median of {repeats} | {e2e_first:.2f} "
        f"(runs: {', '.join(f'{r["first_message"]:.2f}' for r in e2e_runs)}) |",
        f"| first -> {e2e_n:,}-th message, rate (occ/s) | {fmt(e2e_rate)} "
        f"(runs: {', '.join(fmt(r['rate']) for r in e2e_runs)}) |",
        f"| bare send_task, batches of 50 (occ/s) | {fmt(loop)} "
        f"(runs: {', '.join(fmt(x) for x in loops)}) |",
        f"| goatbeat process / batched loop | {e2e_rate / loop:.0%} |",
    ]  # fmt: skip
    section.details = "\n".join(lines) + "\n"
    section.chart = {"restart": restart["seconds"], "rss": restart["rss"]}
    return section


HANDLERS = {"celery_beat": child_celery_beat}

if __name__ == "__main__":
    if not child_main(HANDLERS):
        sys.exit("usage: python -m bench (this module runs as its child)")
