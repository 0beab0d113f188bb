"""What completion reports cost a worker (#30 item 6): each backend's job rate with and without
them, and with the idempotency guard too.

    python -m bench.bench_completions [--jobs 600] [--rq-jobs 150] [--rounds 2]
                                      [--backends rq,celery,dramatiq]

For each backend and setup, ``--jobs`` (RQ: ``--rq-jobs``, its forks are slower) occurrences of a no-op task are submitted by goatbeat
(run-now requests of one schedule, so each carries its key and has its execution row), then
one worker runs them all: RQ ``rq worker --burst`` (a forked work horse per job), Celery
``--pool=prefork -c 1``, Dramatiq ``--processes 1 --threads 1``. Each task notes the instant
it ended in a Redis list; the rate is ``(jobs - 1) / (last end - first end)``, so the worker's
start is left out and every report of a job but the last is inside the window. Setups: plain
(no reports), completion reports, and completion reports with the idempotency guard on the
task. A round runs every setup of a backend once; the rounds alternate the order (plain
first, then plain last) so a change of load during a round does not favour one setup; a ratio
is the setup's mean rate over the plain worker's. PostgreSQL (durable: fsync and synchronous
commit on) and Redis are started on free loopback ports (``GOATBEAT_BENCH_PG_DSN`` /
``GOATBEAT_BENCH_REDIS_URL`` reuse running ones). The workers load modules from bytecode
as a deployment does (cached under the temporary directory, whatever
``PYTHONDONTWRITEBYTECODE`` says): compiled from source, every RQ work horse would compile its
job's module again. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench._common import ROOT, Servers
from bench.completion_jobs import DONE, REDIS_ENV, SETUP_ENV
from goatbeat.beat import Beat
from goatbeat.completion import DATABASE_ENV

SETUPS = ("plain", "reports", "guard")
LABELS = {
    "plain": "plain worker",
    "reports": "completion reports",
    "guard": "completion reports + guard",
}
BACKENDS = ("rq", "celery", "dramatiq")
GUARD = 900.0  # seconds a worker gets for all its jobs: against a hang
PYCACHE = Path(tempfile.gettempdir()) / "goatbeat-bench-pycache"


def _task(backend: str, setup: str) -> str:
    guarded = setup == "guard"
    if backend == "rq":
        return "bench.completion_guarded.guarded_noop" if guarded else "bench.completion_jobs.noop"
    if backend == "celery":
        return "bench.celery_guarded" if guarded else "bench.celery_noop"
    return "bench_noop"  # Dramatiq: the guard is a middleware


def _submitter(backend: str, redis_url: str) -> Any:
    if backend == "rq":
        from goatbeat.submitters.rq import RQSubmitter

        return RQSubmitter(redis_url)
    if backend == "celery":
        from goatbeat.submitters.celery import CelerySubmitter

        return CelerySubmitter(redis_url)
    from goatbeat.submitters.dramatiq import DramatiqSubmitter

    return DramatiqSubmitter(redis_url)


def _command(backend: str, setup: str, redis_url: str) -> list[str]:
    if backend == "rq":
        job_class = "rq.job.Job" if setup == "plain" else "goatbeat.completion.rq.Job"
        return [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", redis_url,
                "--job-class", job_class, "--quiet", "default"]  # fmt: skip
    if backend == "celery":
        return [sys.executable, "-m", "celery", "-A", "bench.completion_celery", "worker",
                "--pool=prefork", "-c", "1", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-l", "warning"]  # fmt: skip
    return [sys.executable, "-m", "dramatiq", "bench.completion_dramatiq",
            "--processes", "1", "--threads", "1"]  # fmt: skip


def dispatch(dsn: str, redis_url: str, backend: str, task: str, jobs: int) -> None:
    beat = Beat(dsn, submitter=_submitter(backend, redis_url))
    try:
        beat.migrate()
        beat.schedule(name="noop", task=task, every="1d")
        beat.publish()
        for _ in range(jobs):
            beat.run_now("noop")
        loop = beat.scheduler(batch_size=1000)
        sent = 0
        while sent < jobs:
            sent += loop.run_once().submitted
        loop.release()
        loop.close()
    finally:
        beat.close()


def run_worker(
    dsn: str, redis_url: str, backend: str, setup: str, jobs: int
) -> tuple[float, float]:
    """The worker's rate over its jobs (jobs/s), and the CPU time its processes took per job
    (ms, start included; the reporter process and the database's not)."""
    cpu_before = _children_cpu()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        DATABASE_ENV: dsn,
        SETUP_ENV: setup,
        REDIS_ENV: redis_url,
        # As deployed: modules load from bytecode (cached outside the tree), not compiled
        # from source in every RQ work horse that imports its job's module.
        "PYTHONPYCACHEPREFIX": str(PYCACHE),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    client = redis.Redis.from_url(redis_url)
    proc = subprocess.Popen(
        _command(backend, setup, redis_url),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + GUARD
        while client.llen(DONE) < jobs:
            if proc.poll() is not None and client.llen(DONE) < jobs:
                raise RuntimeError(f"{backend} worker ({setup}) exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{backend} worker ({setup}): {client.llen(DONE)}/{jobs}")
            time.sleep(0.05)
        ends = sorted(float(v) for v in client.lrange(DONE, 0, -1))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        client.close()
    cpu = (_children_cpu() - cpu_before) / jobs * 1000
    return (len(ends) - 1) / (ends[-1] - ends[0]), cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--rq-jobs", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    servers = Servers().start()
    rates: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    try:
        for round_ in range(args.rounds):
            order = SETUPS if round_ % 2 == 0 else tuple(reversed(SETUPS))
            for backend in backends:
                jobs = args.rq_jobs if backend == "rq" else args.jobs
                for setup in order:
                    dsn = servers.new_database("completions")
                    redis.Redis.from_url(servers.redis_url).flushall()
                    dispatch(dsn, servers.redis_url, backend, _task(backend, setup), jobs)
                    rate, cpu = run_worker(dsn, servers.redis_url, backend, setup, jobs)
                    rates.setdefault((backend, setup), []).append(rate)
                    cpus.setdefault((backend, setup), []).append(cpu)
                    servers.drop_database(dsn)
                    print(
                        f"round {round_ + 1}: {backend} {setup}: {rate:.1f} jobs/s, "
                        f"{cpu:.1f} ms CPU/job",
                        flush=True,
                    )
    finally:
        servers.stop()
    print()
    rounds = " | ".join(f"round {i + 1}" for i in range(args.rounds))
    print(
        f"| backend (no-op jobs: RQ {args.rq_jobs}, others {args.jobs}) | setup | jobs/s "
        f"{rounds} | of plain | CPU ms/job |"
    )
    print("|---|---|" + "---:|" * args.rounds + "---:|---:|")
    for backend in backends:
        base = statistics.mean(rates[(backend, "plain")])
        for setup in SETUPS:
            found = rates[(backend, setup)]
            cells = " | ".join(f"{r:.1f}" for r in found)
            share = statistics.mean(found) / base
            cpu = statistics.mean(cpus[(backend, setup)])
            print(f"| {backend} | {LABELS[setup]} | {cells} | {share:.0%} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
