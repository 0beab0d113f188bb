"""End to end: a message the backend drops because its ``expires`` passed ends ``expired``, as
the worker reports it (#30 item 3), on a real Celery worker (``task_revoked``, expired) and a
real Dramatiq worker (``AgeLimit``'s ``max_age``), on Redis, with completion reports on.

The scheduler submits one run with ``expires="2s"`` and stops: no leader is left to infer
anything. The worker starts only once the window has passed, drops the message unrun and
reports it: the run ends ``expired`` with the worker's reason, never started (the task would
hang if it ran, and the test would fail on its guard).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from goatbeat.beat import Beat
from goatbeat.completion import DATABASE_ENV
from goatbeat.core.model import Execution, ExecutionStatus
from goatbeat.core.submit import TaskSubmitter
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from tests.e2e.workers import StartWorker

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]

GUARD = 90.0  # seconds: a guard against a hang, not an expectation
EXPIRES = 2.0


def submit_one_that_expires(database: str, submitter: TaskSubmitter, task: str) -> Execution:
    beat = Beat(database, submitter=submitter)
    try:
        beat.migrate()
        beat.schedule(name="expiring", task=task, every="1d", expires=f"{EXPIRES:g}s")
        beat.publish()
        beat.run_now("expiring")
        loop = beat.scheduler(scheduler_id="e2e")
        deadline = time.monotonic() + GUARD
        while not loop.run_once().submitted:
            assert time.monotonic() < deadline, "nothing submitted"
            time.sleep(0.1)
        loop.release()
        loop.close()
        [run] = beat.store.executions(name="expiring", limit=10)
        assert run.status is ExecutionStatus.SUBMITTED
        return run
    finally:
        beat.close()


def wait_for_the_end(database: str, key: str, output: object) -> Execution:
    beat = Beat(database)
    try:
        deadline = time.monotonic() + GUARD
        while True:
            [run] = [e for e in beat.store.executions(limit=10) if e.idempotency_key == key]
            if run.status is not ExecutionStatus.SUBMITTED:
                return run
            if time.monotonic() > deadline:
                pytest.fail(f"still submitted after {GUARD:g}s: {run}\n{output}")
            time.sleep(0.2)
    finally:
        beat.close()


@pytest.mark.parametrize(
    ("backend", "task", "argv", "reason"),
    [
        (
            "celery",
            "lost.hang",
            ("celery", "-A", "tests.e2e.lost_apps.celery_app", "worker", "--pool=solo",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"),
            "the worker dropped it unrun",
        ),
        (
            "dramatiq",
            "lost_hang",
            ("dramatiq", "tests.e2e.lost_apps.dramatiq_app", "--processes", "1",
             "--threads", "1"),
            "max_age",
        ),
    ],
    ids=["celery", "dramatiq"],
)  # fmt: skip
def test_a_message_dropped_for_its_expires_ends_expired_as_the_worker_says(
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    start_worker: StartWorker,
    backend: str,
    task: str,
    argv: tuple[str, ...],
    reason: str,
) -> None:
    submitter: TaskSubmitter = (
        CelerySubmitter(redis_url) if backend == "celery" else DramatiqSubmitter(redis_url)
    )
    sent = submit_one_that_expires(pg_dsn, submitter, task)
    time.sleep(EXPIRES + 1.0)  # the window has passed before any worker sees the message
    worker = start_worker(backend, *argv, env={DATABASE_ENV: pg_dsn})
    run = wait_for_the_end(pg_dsn, sent.idempotency_key, worker)
    assert run.status is ExecutionStatus.EXPIRED, (run, worker.output())
    assert run.error is not None and reason in run.error, run.error
    assert run.started_at is None  # dropped unrun: never reported started
