"""End to end: real Celery, Dramatiq and RQ workers report what became of each run.

For each backend a scheduler iteration submits three occurrences: a task that succeeds, one
that fails once and is retried by the backend, and one that always fails. A real worker,
set up with the one line docs/operations.md shows, runs them; the test then reads goatbeat's
database (PostgreSQL, or the SQLite file of the embedded default) until every execution holds
its final outcome, and checks what each recorded: started_at, finished_at, runtime, worker,
the error text, the retry, and each schedule's last status and record of success.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.beat import Beat
from goatbeat.completion import DATABASE_ENV
from goatbeat.core.model import Execution, ExecutionStatus
from goatbeat.core.submit import TaskSubmitter
from goatbeat.stores import open_store
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.rq import RQSubmitter
from tests.e2e.workers import DEADLINE, StartWorker, Worker

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]

FINAL = {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED}


def dispatch(
    database: str,
    submitter: TaskSubmitter,
    tasks: dict[str, str],
    options: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Publish a schedule per task, ask for a run of each now (PostgreSQL judges due-ness by
    its own clock, so a fake one cannot bring a run forward) and run the iteration that
    submits them."""
    beat = Beat(database, submitter=submitter)
    try:
        beat.migrate()
        for name, task in tasks.items():
            beat.schedule(name=name, task=task, every="1d", options=(options or {}).get(name, {}))
        beat.publish()
        for name in tasks:
            beat.run_now(name)
        result = beat.scheduler().run_once()
        assert (result.submitted, result.failed, result.error) == (3, 0, None), result
    finally:
        beat.close()


def wait_for_outcomes(database: str, workers: list[Worker]) -> dict[str, Execution]:
    store = open_store(database)
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            found = {e.schedule_name: e for e in store.executions(limit=10)}
            if len(found) == 3 and all(e.status in FINAL for e in found.values()):
                return found
            for worker in workers:
                if worker.proc.poll() not in (None, 0):
                    pytest.fail(f"worker {worker.name} died:\n{worker.output()}")
            if time.monotonic() > deadline:
                logs = "\n".join(w.output() for w in workers)
                pytest.fail(f"outcomes after {DEADLINE}s: {found}\n{logs}")
            time.sleep(0.1)
    finally:
        store.close()


def check_outcomes(database: str, found: dict[str, Execution]) -> None:
    ok, flaky, broken = found["ok"], found["flaky"], found["broken"]
    for e in found.values():
        assert e.submitted_at is not None and e.started_at is not None
        assert e.finished_at is not None and e.started_at <= e.finished_at
        assert e.runtime is not None and 0 <= e.runtime < DEADLINE
        assert e.worker is not None and ":" in e.worker
    assert (ok.status, ok.error, ok.retries) == (ExecutionStatus.SUCCEEDED, None, 0)
    # Failed once, reported "retried", run again by the backend, then succeeded.
    assert (flaky.status, flaky.error, flaky.retries) == (ExecutionStatus.SUCCEEDED, None, 1)
    assert broken.status is ExecutionStatus.FAILED and broken.retries == 0
    assert broken.error is not None and broken.error.startswith("RuntimeError: ")
    assert "always fails" in broken.error

    store = open_store(database)
    try:
        # What `schedule list`, `schedule show`, the admin and the metrics read.
        assert [store.get(n).last_status for n in ("ok", "flaky", "broken")] == [
            "succeeded",
            "succeeded",
            "failed",
        ]
        health = {h.name: h for h in store.schedule_health(overdue_after=timedelta(hours=1))}
        assert health["ok"].last_success_at is not None and health["ok"].last_failure_at is None
        assert health["broken"].consecutive_failures == 1
        assert health["broken"].last_failure_at is not None
    finally:
        store.close()


def test_celery_workers_report_success_retry_and_failure(
    redis_url: str, pg_dsn: str, start_worker: StartWorker
) -> None:
    tasks = {"ok": "completions.ok", "flaky": "completions.flaky", "broken": "completions.broken"}
    dispatch(pg_dsn, CelerySubmitter(redis_url), tasks)
    # prefork: the task runs in a forked child, which opens its own connection.
    worker = start_worker(
        "celery", "celery", "-A", "tests.e2e.completion_apps.celery_app", "worker",
        "--pool=prefork", "-c", "1", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-l", "info", env={DATABASE_ENV: pg_dsn},
    )  # fmt: skip
    check_outcomes(pg_dsn, wait_for_outcomes(pg_dsn, [worker]))


def test_dramatiq_workers_report_success_retry_and_failure(
    redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    database = f"sqlite:///{tmp_path / 'goatbeat.db'}"
    tasks = {"ok": "completions_ok", "flaky": "completions_flaky", "broken": "completions_broken"}
    dispatch(database, DramatiqSubmitter(redis_url), tasks)
    worker = start_worker(
        "dramatiq", "dramatiq", "tests.e2e.completion_apps.dramatiq_app", "--processes", "1",
        "--threads", "2", env={DATABASE_ENV: database},
    )  # fmt: skip
    check_outcomes(database, wait_for_outcomes(database, [worker]))


def test_rq_workers_report_success_retry_and_failure(
    redis_url: str, pg_dsn: str, start_worker: StartWorker
) -> None:
    module = "tests.e2e.completion_apps.rq_jobs"
    tasks = {name: f"{module}.{name}" for name in ("ok", "flaky", "broken")}
    dispatch(pg_dsn, RQSubmitter(redis_url), tasks, options={"flaky": {"retry": 1}})
    worker = start_worker(
        "rq", "rq.cli", "worker", "--url", redis_url, "--burst",
        "--job-class", "goatbeat.completion.rq.Job", "default", env={DATABASE_ENV: pg_dsn},
    )  # fmt: skip
    check_outcomes(pg_dsn, wait_for_outcomes(pg_dsn, [worker]))
