"""What completion reports cost a worker (#30 item 6): RQ's job rate with and without them.

    python -m bench.bench_completions [--jobs 300]

For each setup, ``--jobs`` occurrences of a no-op job are submitted by goatbeat (run-now
requests of one schedule, so each carries its key and has its execution row), then one
``rq worker --burst`` runs them all; the rate is jobs / the worker's wall time (its start
included, the same for every setup). Setups: plain (``rq.job.Job``), completion reports
(``goatbeat.completion.rq.Job``), and completion reports with the idempotency guard on the
job. PostgreSQL and Redis are started on free loopback ports (``GOATBEAT_BENCH_PG_DSN`` /
``GOATBEAT_BENCH_REDIS_URL`` reuse running ones). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import redis

from bench._common import ROOT, Servers
from goatbeat.beat import Beat
from goatbeat.submitters.rq import RQSubmitter

JOB = "bench.completion_jobs.noop"
GUARDED = "bench.completion_jobs.guarded_noop"


def dispatch(dsn: str, redis_url: str, task: str, jobs: int) -> None:
    beat = Beat(dsn, submitter=RQSubmitter(redis_url))
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


def run_worker(dsn: str, redis_url: str, job_class: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOATBEAT_DATABASE": dsn}
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", redis_url,
         "--job-class", job_class, "--quiet", "default"],
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    jobs = parser.parse_args().jobs
    servers = Servers().start()
    try:
        rates: dict[str, float] = {}
        for label, job_class, task in (
            ("plain worker", "rq.job.Job", JOB),
            ("completion reports", "goatbeat.completion.rq.Job", JOB),
            ("completion reports + guard", "goatbeat.completion.rq.Job", GUARDED),
        ):
            dsn = servers.new_database("completions")
            redis.Redis.from_url(servers.redis_url).flushall()
            dispatch(dsn, servers.redis_url, task, jobs)
            seconds = run_worker(dsn, servers.redis_url, job_class)
            rates[label] = jobs / seconds
            servers.drop_database(dsn)
        base = rates["plain worker"]
        print(f"| RQ setup ({jobs} no-op jobs, one burst worker) | jobs/s | of plain |")
        print("|---|---:|---:|")
        for label, rate in rates.items():
            print(f"| {label} | {rate:.1f} | {rate / base:.0%} |")
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
