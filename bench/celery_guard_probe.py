"""Where a guarded job's time goes (#30 item 6): bench/bench_completions.py's Celery (or
Dramatiq) worker, one setup at a time, with the CPU time of every process over the jobs.

    python -m bench.celery_guard_probe [--backend celery|dramatiq] [--setups plain,guard]
                                       [--jobs 600] [--rounds 2] [--statements]
                                       [--pyspy DIR [--idle]] [--strace DIR]

For each setup (``plain``, ``reports``, ``guard``, as bench/bench_completions.py's) the same
no-op jobs are dispatched, then one worker runs them (Celery ``--pool=prefork -c 1``, Dramatiq
``--processes 1 --threads 1``). Between the end of the first job and the end of the last it
reads the CPU time (``/proc/<pid>/stat``) of the worker's main process, its pool child (or
worker process), its reporter process, the PostgreSQL backends of each application name, the
whole PostgreSQL cluster and Redis, and prints each per job, with the rate.

``--statements`` runs PostgreSQL with ``pg_stat_statements`` and ``track_wal_io_timing``: it
prints how many times per job each statement ran (all sessions), its mean execution time, and
``pg_stat_wal``'s WAL syncs and their total time (what a durable commit waits for).
``--pyspy DIR`` records the child and the main process with py-spy (collapsed stacks; ``--idle``
keeps the samples of waiting threads); ``--strace DIR`` counts their system calls (``strace
-c``). Rounds alternate the order of the setups. Findings: docs/benchmarks.md, #30 item 6.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench._common import ROOT, Servers, _load_services
from bench.bench_completions import _command, _task, dispatch
from bench.completion_jobs import DONE, REDIS_ENV, SETUP_ENV
from goatbeat.completion import DATABASE_ENV

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """Seconds of CPU (user + system) ``pid`` took so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(p) for p in text)
    return found


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found.append(child)
        found.extend(_descendants(child))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pg_pids(servers: Servers) -> list[int]:
    """The processes of this run's PostgreSQL cluster: the postmaster and its children."""
    pg = servers._pg
    if pg is None or pg.datadir is None:
        return []
    postmaster = int((pg.datadir / "postmaster.pid").read_text().split()[0])
    return [postmaster, *_children(postmaster)]


def _redis_pids(servers: Servers) -> list[int]:
    redis_server = servers._redis
    proc = getattr(redis_server, "proc", None)
    return [] if proc is None else [proc.pid]


def _backends(dsn: str) -> dict[str, list[int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    found: dict[str, list[int]] = {}
    for name, pid in rows:
        found.setdefault(name or "?", []).append(pid)
    return found


def _statements(dsn: str) -> list[tuple[str, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT calls, round(mean_exec_time::numeric, 3) || ' ms ' || query "
            "FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
            "ORDER BY calls DESC"
        ).fetchall()
        wal = conn.execute(
            "SELECT wal_records, wal_fpi, wal_write, wal_sync, round(wal_sync_time::numeric, 1) "
            "FROM pg_stat_wal"
        ).fetchone()
    found = [(" ".join(q.split())[:120], int(c)) for c, q in rows]
    return [*found, (f"pg_stat_wal (records, fpi, write, sync, sync ms): {wal}", 0)]


def run(servers: Servers, setup: str, jobs: int, args: argparse.Namespace, tag: str) -> str:
    dsn = servers.new_database("probe")
    redis.Redis.from_url(servers.redis_url).flushall()
    dispatch(dsn, servers.redis_url, args.backend, _task(args.backend, setup), jobs)
    if args.statements:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("SELECT pg_stat_reset_shared('wal')")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        DATABASE_ENV: dsn,
        SETUP_ENV: setup,
        REDIS_ENV: servers.redis_url,
    }
    client = redis.Redis.from_url(servers.redis_url)
    proc = subprocess.Popen(
        _command(args.backend, setup, servers.redis_url),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    tools: list[subprocess.Popen[bytes]] = []
    try:
        while client.llen(DONE) < 1:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}")
            time.sleep(0.001)
        kids = _descendants(proc.pid)
        reporter = [p for p in kids if "goatbeat.completion.relay" in _cmdline(p)]
        pool = [p for p in kids if p not in reporter]
        backends = {name: pids for name, pids in _backends(dsn).items()}
        watched: dict[str, list[int]] = {"main": [proc.pid], "child": pool}
        if reporter:
            watched["reporter"] = reporter
        for name, pids in backends.items():
            watched[f"pg:{name}"] = pids
        if args.pyspy:
            idle = ["--idle"] if args.idle else []
            for name, pid in (("child", pool[0]), ("main", proc.pid)):
                out = Path(args.pyspy) / f"{tag}-{setup}-{name}.txt"
                cmd = ["py-spy", "record", "--format", "raw", "--rate", "1000", *idle,
                       "--nonblocking", "-o", str(out), "-p", str(pid)]  # fmt: skip
                tools.append(
                    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
        if args.strace:
            for name, pid in (("child", pool[0]), ("main", proc.pid)):
                out = Path(args.strace) / f"{tag}-{setup}-{name}.txt"
                cmd = ["strace", "-c", "-o", str(out), "-p", str(pid)]
                tools.append(
                    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
        first = client.llen(DONE)
        others = {"redis": _redis_pids(servers), "pg:all": _pg_pids(servers)}
        before = {name: {p: _cpu(p) for p in pids} for name, pids in {**watched, **others}.items()}
        while client.llen(DONE) < jobs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}")
            time.sleep(0.02)
        for name, pids in _backends(dsn).items():
            watched.setdefault(f"pg:{name}", pids)
        after = {
            name: {p: _cpu(p) for p in pids}
            for name, pids in {**watched, **others, "pg:all": _pg_pids(servers)}.items()
        }
        ends = sorted(float(v) for v in client.lrange(DONE, 0, -1))
        for tool in tools:
            tool.send_signal(signal.SIGINT)
        for tool in tools:
            tool.wait(30)
        time.sleep(0.5)  # the reporter's last batch
        statements = _statements(dsn) if args.statements else []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        client.close()
    servers.drop_database(dsn)
    counted = jobs - first
    rate = (len(ends) - 1) / (ends[-1] - ends[0])
    took = {
        name: sum(t - before.get(name, {}).get(p, 0.0) for p, t in after[name].items())
        for name in after
    }
    cpu = "  ".join(f"{name} {t / counted * 1000:.2f}" for name, t in took.items())
    wall = 1000 / rate
    lines = [f"{tag} {setup}: {rate:.1f} jobs/s ({wall:.2f} ms/job); CPU ms/job: {cpu}"]
    for query, calls in statements:
        lines.append(f"    {calls / jobs:6.2f}/job  {query}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--setups", default="plain,guard")
    parser.add_argument("--backend", default="celery")
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--statements", action="store_true")
    parser.add_argument("--pyspy", default="")
    parser.add_argument("--idle", action="store_true")
    parser.add_argument("--strace", default="")
    args = parser.parse_args()
    setups = [s for s in args.setups.split(",") if s]
    servers = Servers()
    if args.statements:
        services = _load_services()
        pg: Any = services.PostgresServer(durable=True).start()
        assert pg.datadir is not None
        with open(pg.datadir / "postgresql.conf", "a") as fh:
            fh.write("shared_preload_libraries = 'pg_stat_statements'\n")
            fh.write("pg_stat_statements.track = all\n")
            fh.write("track_wal_io_timing = on\n")
        pg._pg_ctl("restart")
        servers.pg_dsn = pg.dsn
        servers.start()
        servers._pg = pg
    else:
        servers.start()
    try:
        for round_ in range(args.rounds):
            order = setups if round_ % 2 == 0 else list(reversed(setups))
            for setup in order:
                print(run(servers, setup, args.jobs, args, f"r{round_ + 1}"), flush=True)
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
