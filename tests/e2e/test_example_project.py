"""The example Django + Celery project, migrated live: stock celery beat -> the drop-in
``celery beat -S goatbeat.compat:Scheduler`` (two replicas) -> import + diff ->
``manage.py goatbeat scheduler``, against real PostgreSQL, Redis and a Celery worker.

Every task run is recorded in Redis by the task itself; the checks: the 2-second schedule ran
in every phase, never twice for one occurrence (no two runs closer than half the interval),
and the django-celery-beat rows run once imported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("celery")
pytest.importorskip("django_celery_beat")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "celery_project"

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]


class Project:
    def __init__(self, pg_dsn: str, redis_url: str, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(ROOT)]),
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "EXAMPLE_DATABASE_URL": pg_dsn,
            "EXAMPLE_REDIS_URL": redis_url,
            "EXAMPLE_LEASE_TTL": "4s",
            "EXAMPLE_LEASE_RENEW": "1s",
            "PYTHONWARNINGS": "ignore",
        }
        self.env.pop("GOATBEAT_APP", None)
        self.env.pop("GOATBEAT_DATABASE", None)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.redis_url = redis_url

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=PROJECT, env=self.env, stdout=log, stderr=log
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def beat(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        return self.start(
            name,
            "-m",
            "celery",
            "-A",
            "proj",
            "beat",
            "--loglevel",
            "INFO",
            "--max-interval",
            "1",
            "-s",
            str(self.tmp / f"{name}-schedule"),
            *extra,
        )

    def runs(self) -> list[tuple[str, float]]:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            raw = client.lrange("example:runs", 0, -1)
        finally:
            client.close()
        out = []
        for item in raw:
            label, stamp = item.decode().split()
            out.append((label, float(stamp)))
        return out

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def project(pg_dsn: str, redis_url: str, tmp_path: Path) -> Iterator[Project]:
    p = Project(pg_dsn, redis_url, tmp_path)
    try:
        yield p
    finally:
        for proc in p.procs:
            p.stop(proc)


def _wait_for_runs(project: Project, label: str, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for lbl, _ in project.runs() if lbl == label) >= at_least:
            return
        time.sleep(0.2)


def test_example_project_cuts_over_without_double_runs(project: Project) -> None:
    project.run("manage.py", "migrate", "--verbosity", "0")
    project.run("manage.py", "seed_beat_rows")
    worker = project.start(
        "worker", "-m", "celery", "-A", "proj", "worker", "-P", "solo", "--loglevel", "WARNING"
    )

    # Phase 1: stock celery beat (PersistentScheduler) runs CELERY_BEAT_SCHEDULE.
    stock = project.beat("stock")
    _wait_for_runs(project, "tick", 3, timeout=60)
    project.stop(stock)
    phase1_end = time.time()
    ticks_1 = sum(1 for lbl, _ in project.runs() if lbl == "tick")
    assert ticks_1 >= 3, project.log("stock") + project.log("worker")

    # Phase 2: the drop-in scheduler, two replicas on the same PostgreSQL database.
    replicas = [project.beat(f"compat-{i}", "-S", "goatbeat.compat:Scheduler") for i in range(2)]
    _wait_for_runs(project, "tick", ticks_1 + 4, timeout=60)
    ticks_2 = sum(1 for lbl, _ in project.runs() if lbl == "tick")
    assert ticks_2 >= ticks_1 + 4, project.log("compat-0") + project.log("compat-1")

    # Phase 3: import (CELERY_BEAT_SCHEDULE is already there, the django-celery-beat rows are
    # new), then diff: the two sides must agree.
    imported = project.run("manage.py", "goatbeat", "import_celery_beat")
    assert "create  admin-poll-3s" in imported.stdout, imported.stdout
    assert "unchanged" in imported.stdout
    diff = project.run(
        "manage.py", "goatbeat", "diff", "--horizon", "2d", "--accept-known-bugs", check=False
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr

    # Phase 4: the native scheduler joins (same lease), then the drop-in replicas leave.
    native_start = time.time()
    native = project.start("native", "manage.py", "goatbeat", "scheduler")
    time.sleep(3)
    for r in replicas:
        project.stop(r)
    replicas_end = time.time()
    before_native_only = sum(1 for lbl, _ in project.runs() if lbl == "tick")
    _wait_for_runs(project, "tick", before_native_only + 3, timeout=60)
    _wait_for_runs(project, "poll", 4, timeout=30)
    project.stop(native)
    time.sleep(2)  # let the worker finish what is queued
    project.stop(worker)

    runs = project.runs()
    ticks = sorted(t for lbl, t in runs if lbl == "tick")
    polls = sorted(t for lbl, t in runs if lbl == "poll")
    assert len(ticks) >= before_native_only + 3, project.log("native")
    assert len(polls) >= 4, project.log("native") + project.log("worker")
    # No occurrence ran twice: consecutive runs of the 2 s schedule are never much closer
    # than its interval, across every switch, except across the stock -> goatbeat switch,
    # where goatbeat's grid (epoch-aligned) may sit anywhere relative to beat's last run.
    gaps = [
        (b - a, a) for a, b in zip(ticks, ticks[1:], strict=False) if not (a <= phase1_end <= b)
    ]
    marks = {"stock_end": phase1_end, "native_start": native_start, "replicas_end": replicas_end}
    assert all(gap >= 1.0 for gap, _ in gaps), ([g for g in gaps if g[0] < 1.0], marks)
    # None lost after goatbeat took over: no gap much larger than the interval.
    goatbeat_gaps = [gap for gap, a in gaps if a > phase1_end]
    assert all(gap <= 4.5 for gap in goatbeat_gaps), goatbeat_gaps
    # The admin row never ran under celery: its first goatbeat run is the catch-up of the
    # missed instant (as celery would make one), then the regular 3 s grid follows, once each.
    poll_gaps = [b - a for a, b in zip(polls, polls[1:], strict=False)][1:]
    assert all(1.5 <= gap <= 4.5 for gap in poll_gaps), poll_gaps
