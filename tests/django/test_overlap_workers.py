"""The overlap policy with REAL Django Tasks workers: a task that outlasts its interval.

Two ``db_worker`` processes consume the queue, so nothing but the policy keeps two runs of
the schedule apart; ``manage.py goatbeat scheduler`` processes schedule it (every 2 s, each
run sleeping 3 s). The task writes when each run started and ended. With ``skip`` the
occurrences due while a run runs are recorded ``skipped`` and never enqueued; with
``buffer_one`` one of them waits and starts as soon as the run ends, even when the scheduler
that buffered it has handed over to another in the meantime. Bounded: each test stops after
three runs or 45 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.model import ExecutionStatus, OverlapPolicy, Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from tests.django.conftest import ROOT, SETTINGS_MODULE
from tests.overlap_trace import assert_never_overlapped, read_runs

RUNS = 3
DEADLINE = 45.0

pytestmark = pytest.mark.django_tasks


def _popen(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """A manage.py process whose stderr goes to ``log`` (read when it dies early)."""
    from django.db import connection

    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **env,
    }
    with log.open("w") as err:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "tests/django/project/manage.py"), *args],
            env=full_env,
            cwd=str(ROOT),
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )


def _stop(*processes: subprocess.Popen[str]) -> None:
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _schedule(store: Any, policy: OverlapPolicy) -> None:
    store.create(
        Schedule(
            name="slow",
            task="tests.django.project.reports.tasks.slow_report",
            trigger=IntervalTrigger("2s"),
            args=(3,),
            overlap=policy,
            max_runtime=timedelta(minutes=5),
            source=Source.ADMIN,
        )
    )


def _workers(trace: Path) -> list[subprocess.Popen[str]]:
    env = {"GOATBEAT_TEST_TRACE": str(trace)}
    logs = trace.parent
    return [
        _popen(
            "db_worker",
            "--no-startup-delay",
            "--no-reload",
            "--interval",
            "0.1",
            "--queue-name",
            "reports",
            "--worker-id",
            f"w{i}",
            env=env,
            log=logs / f"worker-{i}.log",
        )
        for i in range(2)
    ]


def _scheduler(sid: str, logs: Path) -> subprocess.Popen[str]:
    return _popen(
        "goatbeat",
        "scheduler",
        "--no-publish",
        "--scheduler-id",
        sid,
        env={},
        log=logs / f"scheduler-{sid}.log",
    )


def _wait_for_runs(trace: Path, count: int, processes: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        done = [r for r in read_runs(trace) if r[1] is not None]
        if len(done) >= count:
            return
        for p in processes:
            if p.poll() is not None:
                logs = {f.name: f.read_text()[-2000:] for f in trace.parent.glob("*.log")}
                pytest.fail(f"a process ended ({p.args[2:4]}, {p.returncode}): {logs}")
        time.sleep(0.2)
    pytest.fail(f"fewer than {count} runs ended within {DEADLINE:g}s: {read_runs(trace)}")


@pytest.mark.slow
def test_skip_records_the_occurrences_due_while_the_task_still_runs(
    store: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    _schedule(store, OverlapPolicy.SKIP)
    workers = _workers(trace)
    scheduler = _scheduler("a", tmp_path)
    try:
        _wait_for_runs(trace, RUNS, [*workers, scheduler])
    finally:
        _stop(scheduler, *workers)
    runs = read_runs(trace)
    assert_never_overlapped(runs)
    executions = store.executions(name="slow", limit=100)
    statuses = [e.status for e in executions]
    started = [e for e in executions if e.status is not ExecutionStatus.SKIPPED]
    skipped = [e for e in executions if e.status is ExecutionStatus.SKIPPED]
    # Every run that started is one the policy let through; one due every 2 s while each run
    # lasts 3 s: about one skip per run.
    assert len(started) == len(runs), statuses
    assert len(skipped) >= RUNS - 1, statuses
    assert ExecutionStatus.BUFFERED not in statuses
    assert all(e.status is ExecutionStatus.SUCCEEDED for e in started[1:]), statuses
    stored = store.get("slow")
    assert stored.skipped_count == len(skipped)
    # A skipped instant was due while a run was in flight: submitted (perhaps still queued: a
    # loaded worker can take it up seconds later) and not yet ended.
    in_flight = [
        (x.submitted_at.timestamp() if x.submitted_at is not None else start, end)
        for x, (start, end) in zip(
            sorted(started, key=lambda x: x.scheduled_at), sorted(runs), strict=True
        )
    ]
    for e in skipped:
        due = e.scheduled_at.timestamp()
        assert any(
            sent <= due + 1.0 and (end is None or due <= end + 1.0) for sent, end in in_flight
        ), (e.scheduled_at, in_flight, runs)


@pytest.mark.slow
def test_buffer_one_starts_the_waiting_run_when_the_task_ends_across_a_leader_change(
    store: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    _schedule(store, OverlapPolicy.BUFFER_ONE)
    workers = _workers(trace)
    first = _scheduler("a", tmp_path)
    second: subprocess.Popen[str] | None = None
    try:
        # The leader that buffered an occurrence goes (graceful: its lease is released); a
        # standby that starts now takes over and must start the buffered one.
        deadline = time.monotonic() + DEADLINE
        while not any(e.status is ExecutionStatus.BUFFERED for e in store.executions(name="slow")):
            assert time.monotonic() < deadline, "nothing was buffered"
            time.sleep(0.1)
        _stop(first)
        second = _scheduler("b", tmp_path)
        _wait_for_runs(trace, RUNS, [*workers, second])
    finally:
        _stop(*([second] if second else []), first, *workers)
    runs = read_runs(trace)
    assert_never_overlapped(runs)
    for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
        assert end is not None
        # Started when the run before it ended: the completion report wakes the leader,
        # which starts it; then a worker picks it up (polling every 0.1 s).
        assert start - end < 3.0, runs
    executions = store.executions(name="slow", limit=100)
    by_scheduler = {e.scheduler_id for e in executions if e.status is ExecutionStatus.SUCCEEDED}
    assert "b" in by_scheduler, [(e.scheduled_at, e.status, e.scheduler_id) for e in executions]
    assert sum(e.status is ExecutionStatus.BUFFERED for e in executions) <= 1
