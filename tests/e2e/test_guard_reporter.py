"""End to end: the idempotency guard's success travels through the completion reporter
(goatbeat.idempotency, goatbeat.completion.relay; #30 item 6), on real RQ, Celery and Dramatiq
workers, Redis and PostgreSQL. The process that runs a guarded task (an RQ work horse, a
Celery pool child, a Dramatiq worker thread) runs one ledger statement, taking the key
(``delivery_begin``), and an RQ work horse none (the reporter takes the key for it and
answers); the worker's reporter process records the success; every run and every key ends
``succeeded``. (What a redelivery meanwhile, and a reporter killed with the success
unwritten, do: tests/integration/test_guard_handoff.py.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.model import ExecutionStatus
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.rq import RQSubmitter
from tests.e2e.test_reporter_process import dispatch, notes, probe_env, runs, statuses, wait
from tests.e2e.workers import StartWorker

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(150)]

APPS = "tests.e2e.completion_apps"


def _worker(backend: str) -> tuple[str, ...]:
    if backend == "rq":
        return ("rq.cli", "worker", "--burst", "--job-class", "goatbeat.completion.rq.Job")
    if backend == "celery":
        return ("celery", "-A", f"{APPS}.guarded_celery", "worker", "--pool=prefork", "-c",
                "1", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l",
                "info")  # fmt: skip
    return ("dramatiq", f"{APPS}.guarded_dramatiq", "--processes", "1", "--threads", "2")


def _submitter(backend: str, redis_url: str) -> tuple[Any, str]:
    if backend == "rq":
        return RQSubmitter(redis_url), f"{APPS}.guarded.probe"
    if backend == "celery":
        return CelerySubmitter(redis_url), "guarded.probe"
    return DramatiqSubmitter(redis_url), "guarded_probe"


def _keys_state(database: str) -> list[str | None]:
    ledger = PostgresLedger(database)
    try:
        found = []
        for run in runs(database):
            row = ledger.read(run.idempotency_key)
            found.append(None if row is None else row.state)
        return found
    finally:
        ledger.close()


@pytest.mark.parametrize("backend", ["rq", "celery", "dramatiq"])
def test_a_guarded_task_commits_only_its_key_and_the_reporter_records_its_success(
    backend: str, redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    submitter, task = _submitter(backend, redis_url)
    dispatch(pg_dsn, redis_url, ["a", "b", "c"], task, submitter)
    args = _worker(backend)
    if backend == "rq":
        args = (*args, "--url", redis_url, "default")
    worker = start_worker(backend, *args, env=probe_env(pg_dsn, tmp_path))
    wait(
        "not every run and key succeeded",
        lambda: (
            statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED] * 3
            and _keys_state(pg_dsn) == ["succeeded"] * 3
        ),
        worker,
    )
    done = Counter(line.split()[1] for line in notes(tmp_path))
    # The task path took each key (RQ: through the reporter) and ran each body once; the
    # success was not its to commit.
    expected = {"body": 3} if backend == "rq" else {"delivery_begin": 3, "body": 3}
    assert done == expected, (done, worker.output())
