"""Django Tasks: a run whose ``db_worker`` is killed mid-task ends ``lost`` (#30 item 1).

django-tasks-db neither reports a killed worker nor runs the task again (its row stays
``RUNNING``), so the leading scheduler's rule ends the run once its ``max_runtime`` passed with
no final report: lost, with the reason, a failure for the schedule's health, and the overlap
policy lets the next occurrence go out. A real ``db_worker`` process, killed with SIGKILL while
the task sleeps; a real ``manage.py goatbeat scheduler`` process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from goatbeat.core.model import ExecutionStatus
from tests.django.conftest import ROOT, SETTINGS_MODULE

pytestmark = [pytest.mark.django_tasks, pytest.mark.slow, pytest.mark.timeout(180)]

GUARD = 120.0  # seconds: a guard against a hang, not an expectation
TASK = "tests.django.project.reports.tasks.slow_report"


def goatbeat(*args: str) -> str:
    out = StringIO()
    call_command("goatbeat", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def start(tmp_path: Path, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    from django.db import connection

    environ = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **env,
    }
    with (tmp_path / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "tests/django/project/manage.py"), *args],
            env=environ,
            cwd=str(ROOT),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_db_worker_killed_mid_task_ends_its_run_lost_after_max_runtime(
    store: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    goatbeat("schedule", "list")  # publishes the code schedules
    goatbeat(
        "schedule", "add", "hang-report", "--task", TASK, "--kwargs", '{"seconds": 600}',
        "--every", "3s", "--queue", "reports", "--overlap", "skip", "--max-runtime", "5s",
    )  # fmt: skip
    scheduler = start(
        tmp_path, "scheduler", "goatbeat", "scheduler", "--scheduler-id", "django-lost",
        "--lease-ttl", "3s", "--lease-renew-interval", "1s", "--max-sleep", "1s",
    )  # fmt: skip
    worker = start(
        tmp_path, "worker", "db_worker", "--no-startup-delay", "--no-reload",
        "--queue-name", "reports", GOATBEAT_TEST_TRACE=str(trace),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + GUARD

        def runs() -> list[Any]:
            found = store.executions(name="hang-report", limit=100)
            return sorted(found, key=lambda e: e.scheduled_at)

        # Reported running, and the body has begun (its first trace line): now kill its worker.
        while not (
            runs()
            and runs()[0].status is ExecutionStatus.RUNNING
            and trace.exists()
            and trace.read_text().startswith("start ")
        ):
            assert time.monotonic() < deadline, (runs(), (tmp_path / "worker.log").read_text())
            time.sleep(0.2)
        stop(worker)
        while True:
            found = runs()
            first = found[0]
            later = [e for e in found[1:] if e.status is not ExecutionStatus.SKIPPED]
            if first.status is ExecutionStatus.LOST and later:
                break
            # Running until the bound ends it lost (never succeeded, failed or anything else).
            assert first.status in (ExecutionStatus.RUNNING, ExecutionStatus.LOST), first
            assert time.monotonic() < deadline, (found, (tmp_path / "scheduler.log").read_text())
            time.sleep(0.2)
    finally:
        stop(worker)
        stop(scheduler)
    assert first.error is not None and "max_runtime 5s" in first.error, first.error
    assert "end " not in trace.read_text()  # the body never finished
    # The overlap policy waited while it ran, and sent the next occurrence once it was lost.
    assert later[0].scheduled_at > first.scheduled_at
    [health] = [
        h
        for h in store.schedule_health(overdue_after=timedelta(hours=1))
        if h.name == "hang-report"
    ]
    assert health.consecutive_failures >= 1 and health.last_failure_at is not None
