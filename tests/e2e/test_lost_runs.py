"""End to end: a run whose worker dies mid-task ends ``lost`` (#30 item 1), on real Celery, RQ
and Dramatiq workers on Redis, with completion reports on as docs/operations.md says.

Each test runs a schedule every 3 s with ``overlap="skip"``: its first run hangs in the
worker, which the test kills with SIGKILL (Celery's pool child, RQ's work horse, Dramatiq's
worker process), or Celery's hard time limit kills. Celery and RQ say so at once (the worker's
main process reports ``WorkerLostError``/``TimeLimitExceeded``, RQ's "Work-horse terminated
unexpectedly"); Dramatiq says nothing, and the leading scheduler ends the run once its
``max_runtime`` passed. Each time: the run ends ``lost`` with the reason, the schedule counts a
failure (``status``, ``schedule_health``), an alert fires, and the overlap policy lets the next
occurrence go out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.beat import Beat
from goatbeat.completion import DATABASE_ENV
from goatbeat.core import scheduler as scheduler_module
from goatbeat.core.alerts import Alert, Alerter, AlertKind
from goatbeat.core.config import parse_settings
from goatbeat.core.model import Execution, ExecutionStatus
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.submit import TaskSubmitter
from goatbeat.idempotency import open_ledger
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.rq import RQSubmitter
from tests.e2e.lost_apps._hang import PID_FILE_ENV
from tests.e2e.workers import StartWorker, Worker

HEARTBEAT_ENV = "GB_TEST_DRAMATIQ_HEARTBEAT_MS"  # read by tests/e2e/lost_apps/dramatiq_app.py

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]

GUARD = 120.0  # seconds: a guard against a hang, not an expectation


def run_until_lost(
    database: str,
    submitter: TaskSubmitter,
    task: str,
    *,
    worker: Worker,
    pid_file: Path,
    max_runtime: str,
    kill: bool = True,
    options: dict[str, Any] | None = None,
    redelivered: bool = False,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Execution, list[Execution], list[Alert]]:
    """Drive a scheduler until the first run is lost and a later occurrence went out."""
    monkeypatch.setattr(scheduler_module, "ALERT_CHECK_INTERVAL", 0.5)
    monkeypatch.setattr(scheduler_module, "LOST_CHECK_INTERVAL", 0.5)
    alerts: list[Alert] = []
    beat = Beat(database, submitter=submitter)
    beat.migrate()
    beat.schedule(
        name="hang",
        task=task,
        every="3s",
        overlap="skip",
        max_runtime=max_runtime,
        options=options or {},
    )
    beat.publish()
    settings = parse_settings(
        {
            "scheduler_id": "e2e",
            "lease_ttl": "3s",
            "lease_renew_interval": "1s",
            "alert_after_failures": 1,
        }
    )
    loop = Scheduler(
        beat.store, beat.submitter, settings=settings, alerter=Alerter([alerts.append])
    )
    killed = not kill
    deadline = time.monotonic() + GUARD

    def runs() -> list[Execution]:
        return sorted(beat.store.executions(name="hang", limit=100), key=lambda e: e.scheduled_at)

    try:
        while True:
            loop.run_once()
            found = runs()
            first = found[0] if found else None
            if not killed and first is not None and first.status is ExecutionStatus.RUNNING:
                with contextlib.suppress(FileNotFoundError, ValueError):
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                    killed = True
            if redelivered and first is not None:
                # A skipped redelivery is never a success, not even for a moment.
                assert first.status is not ExecutionStatus.SUCCEEDED, first
            if first is not None and first.status is ExecutionStatus.LOST:
                if redelivered and not _skipped(database, first.idempotency_key):
                    time.sleep(0.2)
                    continue
                later = [e for e in found[1:] if e.status is not ExecutionStatus.SKIPPED]
                if later and any(a.schedule == "hang" for a in alerts):
                    loop.close()
                    return first, found, alerts
            if time.monotonic() > deadline:
                pytest.fail(f"no lost run after {GUARD}s: {found}\n{worker.output()}")
            time.sleep(0.2)
    finally:
        loop.close()
        beat.close()


def _skipped(database: str, key: str) -> bool:
    """Whether the idempotency guard skipped a redelivery of ``key``."""
    ledger = open_ledger(database)
    try:
        delivery = ledger.read(key)
    finally:
        ledger.close()
    return delivery is not None and delivery.duplicates >= 1


def check_lost(
    database: str, first: Execution, found: list[Execution], alerts: list[Alert], reason: str
) -> None:
    assert first.status is ExecutionStatus.LOST
    assert first.error is not None and reason in first.error, first.error
    assert first.started_at is not None and first.finished_at is not None
    # The overlap policy waited while it ran, and sent the next occurrence once it was lost.
    after = [e for e in found[1:] if e.status is not ExecutionStatus.SKIPPED]
    assert after and after[0].scheduled_at > first.scheduled_at
    assert {a.kind for a in alerts if a.schedule == "hang"} & {AlertKind.LOST, AlertKind.FAILING}
    beat = Beat(database)
    try:
        [health] = beat.store.schedule_health(overdue_after=timedelta(hours=1))
        assert health.consecutive_failures >= 1 and health.last_failure_at is not None
        assert beat.store.status().failed >= 1  # `goatbeat status`: failed in the last hour
    finally:
        beat.close()


@pytest.mark.parametrize(
    ("task", "kill", "reason"),
    [("lost.hang", True, "WorkerLostError"), ("lost.limited", False, "TimeLimitExceeded")],
    ids=["kill-9", "hard-time-limit"],
)
def test_a_celery_pool_child_killed_mid_task_ends_its_run_lost(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
    task: str,
    kill: bool,
    reason: str,
) -> None:
    pid_file = tmp_path / "pid"
    worker = start_worker(
        "celery", "celery", "-A", "tests.e2e.lost_apps.celery_app", "worker",
        "--pool=prefork", "-c", "1", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-l", "info",
        env={DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file)},
    )  # fmt: skip
    first, found, alerts = run_until_lost(
        pg_dsn,
        CelerySubmitter(redis_url),
        task,
        worker=worker,
        pid_file=pid_file,
        max_runtime="1h",  # Celery's main process says so: no need to wait for the bound
        kill=kill,
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, reason)


def test_an_rq_work_horse_killed_mid_job_ends_its_run_lost(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pid_file = tmp_path / "pid"
    worker = start_worker(
        "rq", "rq.cli", "worker", "--url", redis_url,
        "--job-class", "goatbeat.completion.rq.Job", "default",
        env={DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file)},
    )  # fmt: skip
    first, found, alerts = run_until_lost(
        pg_dsn,
        RQSubmitter(redis_url),
        "tests.e2e.lost_apps.rq_jobs.hang",
        worker=worker,
        pid_file=pid_file,
        max_runtime="1h",  # RQ's worker says so
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, "Work-horse terminated unexpectedly")


def test_a_dramatiq_worker_killed_mid_task_ends_its_run_lost_after_max_runtime(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pid_file = tmp_path / "pid"
    worker = start_worker(
        "dramatiq", "dramatiq", "tests.e2e.lost_apps.dramatiq_app", "--processes", "1",
        "--threads", "1", env={DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file)},
    )  # fmt: skip
    first, found, alerts = run_until_lost(
        pg_dsn,
        DramatiqSubmitter(redis_url),
        "lost_hang",
        worker=worker,
        pid_file=pid_file,
        max_runtime="5s",  # no word from Dramatiq: the leader's rule ends it
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, "max_runtime 5s")
    assert AlertKind.LOST in {a.kind for a in alerts}


# -- item 2: a skipped redelivery is never a success --------------------------------------------


def test_a_celery_redelivery_the_guard_skips_is_never_a_success(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """acks_late + reject_on_worker_lost: the killed child's message is requeued and
    delivered again; the guard (record="before") skips it. The run keeps its first delivery's
    outcome (unknown) and ends lost by its max_runtime, never succeeded."""
    pid_file = tmp_path / "pid"
    worker = start_worker(
        "celery", "celery", "-A", "tests.e2e.lost_apps.celery_app", "worker",
        "--pool=prefork", "-c", "1", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-l", "info",
        env={DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file)},
    )  # fmt: skip
    first, found, alerts = run_until_lost(
        pg_dsn,
        CelerySubmitter(redis_url),
        "lost.guarded",
        worker=worker,
        pid_file=pid_file,
        max_runtime="6s",
        redelivered=True,
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, "max_runtime 6s")


def test_an_rq_retry_the_guard_skips_is_never_a_success(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retry(max=1): RQ runs the job again after its work horse was killed; the guard skips
    it. The run ends lost by its max_runtime, never succeeded."""
    pid_file = tmp_path / "pid"
    worker = start_worker(
        "rq", "rq.cli", "worker", "--url", redis_url,
        "--job-class", "goatbeat.completion.rq.Job", "default",
        env={DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file)},
    )  # fmt: skip
    first, found, alerts = run_until_lost(
        pg_dsn,
        RQSubmitter(redis_url),
        "tests.e2e.lost_apps.rq_jobs.guarded",
        worker=worker,
        pid_file=pid_file,
        max_runtime="6s",
        options={"retry": 1},
        redelivered=True,
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, "max_runtime 6s")


def test_a_dramatiq_redelivery_the_guard_skips_is_never_a_success(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two Dramatiq workers; the one running the message is killed, the other requeues what
    the dead one held (a 2 s heartbeat timeout) and gets it again; the guard (record="before")
    skips it. The run keeps its first delivery's outcome and ends lost by its max_runtime,
    never succeeded."""
    pid_file = tmp_path / "pid"
    env = {DATABASE_ENV: pg_dsn, PID_FILE_ENV: str(pid_file), HEARTBEAT_ENV: "2000"}
    workers = [
        start_worker(
            f"dramatiq-{n}",
            "dramatiq",
            "tests.e2e.lost_apps.dramatiq_app",
            "--processes",
            "1",
            "--threads",
            "1",
            env=env,
        )  # fmt: skip
        for n in (1, 2)
    ]
    first, found, alerts = run_until_lost(
        pg_dsn,
        DramatiqSubmitter(redis_url),
        "lost_guarded",
        worker=workers[0],
        pid_file=pid_file,
        max_runtime="8s",
        redelivered=True,
        monkeypatch=monkeypatch,
    )
    check_lost(pg_dsn, first, found, alerts, "max_runtime 8s")
