"""The example Django + Celery project, migrated live: stock celery beat -> the drop-in
``celery beat -S goatbeat.compat:Scheduler`` (two replicas) -> import + diff ->
``manage.py goatbeat scheduler``, against real PostgreSQL, Redis and a Celery worker.

Every task run is recorded in Redis by the task itself; the checks: the 2-second schedule ran
in every phase, never twice for one occurrence (no two runs closer than half the interval),
and the django-celery-beat rows run once imported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.example_project import Project

pytest.importorskip("celery")
pytest.importorskip("django_celery_beat")

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(240)]


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
        if project.count(label) >= at_least:
            return
        time.sleep(0.2)


def _times(project: Project, label: str) -> list[float]:
    return sorted(r["at"] for r in project.runs() if r["label"] == label)


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
    ticks_1 = project.count("tick")
    assert ticks_1 >= 3, project.log("stock") + project.log("worker")

    # Phase 2: the drop-in scheduler, two replicas on the same PostgreSQL database.
    replicas = [project.beat(f"compat-{i}", "-S", "goatbeat.compat:Scheduler") for i in range(2)]
    _wait_for_runs(project, "tick", ticks_1 + 4, timeout=60)
    ticks_2 = project.count("tick")
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
    before_native_only = project.count("tick")
    _wait_for_runs(project, "tick", before_native_only + 3, timeout=60)
    _wait_for_runs(project, "poll", 4, timeout=30)
    project.stop(native)
    time.sleep(2)  # let the worker finish what is queued
    project.stop(worker)

    ticks = _times(project, "tick")
    polls = _times(project, "poll")
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
