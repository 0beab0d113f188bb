"""goatbeat.idempotency through real Celery, Dramatiq and RQ workers: a duplicate runs once.

For each backend, the goatbeat submitter sends the same occurrence twice, as a resubmission
does (the same key, the same backend id), once to a task guarded by the helper and once to the
same task unguarded. The second message goes out after the first has run, as after a crash
between submission and bookkeeping. The test counts the bodies' side effect (a Redis list):
the unguarded control runs twice (so the duplicate really was delivered), the guarded task
once, and the ledger counts one run and one skipped duplicate. Django Tasks' counterpart is in
tests/django/test_idempotency_worker.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from goatbeat.core.model import Occurrence, Routing, idempotency_key
from goatbeat.core.submit import TaskSubmitter
from goatbeat.idempotency import Ledger, open_ledger
from goatbeat.stores.postgres import PostgresStore
from goatbeat.stores.sqlite import SQLiteStore
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.rq import RQSubmitter, job_id_for
from tests.e2e.backend_apps._record import URL_ENV, WORKER_ENV, read
from tests.e2e.idempotency_apps import LEDGER_ENV

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 45.0
AT = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)


def occurrence(task: str, name: str, n: int) -> Occurrence:
    return Occurrence(
        execution_id=n,
        schedule_id=n,
        schedule_name=name,
        task=task,
        args=(n,),
        kwargs={},
        routing=Routing(),
        scheduled_at=AT,
        idempotency_key=idempotency_key(name, AT),
    )


def migrate(store: PostgresStore | SQLiteStore) -> None:
    try:
        store.migrate()
    finally:
        store.close()


@pytest.fixture
def worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(ledger: str, *args: str) -> subprocess.Popen[bytes]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),
            "PYTHONDONTWRITEBYTECODE": "1",
            URL_ENV: redis_url,
            WORKER_ENV: "idem",
            LEDGER_ENV: ledger,
        }
        with (tmp_path / "worker.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


def wait_until(what: str, check: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            pytest.fail(f"{what} did not happen within {DEADLINE}s\n{text}")
        time.sleep(0.1)


def runs(client: redis.Redis, backend: str) -> list[int]:
    return [r["n"] for r in read(client, backend)]


def send_twice_and_count(
    client: redis.Redis,
    submitter: TaskSubmitter,
    ledger: Ledger,
    *,
    backend: str,
    guarded: str,
    plain: str,
    log: Path,
    between: Callable[[], None] = lambda: None,
    after: Callable[[], None] = lambda: None,
) -> None:
    once = occurrence(guarded, "guarded", 1)
    control = occurrence(plain, "plain", 2)
    for occ in (once, control):
        submitter.submit(occ)
    after()
    wait_until(
        "the first deliveries",
        lambda: (
            runs(client, f"{backend}-guarded") == [1] and runs(client, f"{backend}-plain") == [2]
        ),
        log,
    )
    between()
    for occ in (once, control):
        submitter.submit(occ)  # the resubmission: same key, same backend id
    after()
    wait_until("the control's duplicate", lambda: runs(client, f"{backend}-plain") == [2, 2], log)
    wait_until(
        "the guarded duplicate",
        lambda: (r := ledger.read(once.idempotency_key)) is not None and r.duplicates == 1,
        log,
    )
    record = ledger.read(once.idempotency_key)
    assert record is not None
    assert (record.state, record.attempts, record.duplicates) == ("succeeded", 1, 1)
    guarded_runs = read(client, f"{backend}-guarded")
    assert [r["n"] for r in guarded_runs] == [1]  # the side effect happened exactly once
    assert guarded_runs[0]["key"] == once.idempotency_key
    # The control had no guard: the ledger never saw it.
    assert ledger.read(control.idempotency_key) is None


def test_celery_worker_runs_a_guarded_occurrence_once_when_it_is_sent_twice(
    pg_dsn: str, redis_url: str, tmp_path: Path, worker: Callable[..., subprocess.Popen[bytes]]
) -> None:
    migrate(PostgresStore(pg_dsn))
    ledger = open_ledger(pg_dsn)
    client = redis.Redis.from_url(redis_url)
    submitter = CelerySubmitter(redis_url)
    worker(pg_dsn, "celery", "-A", "tests.e2e.idempotency_apps.celery_app", "worker",
           "--pool=solo", "-c", "1", "--without-gossip", "--without-mingle",
           "--without-heartbeat", "-l", "info")  # fmt: skip
    try:
        send_twice_and_count(
            client, submitter, ledger, backend="celery", guarded="idem.guarded",
            plain="idem.plain", log=tmp_path / "worker.log",
        )  # fmt: skip
    finally:
        submitter.close()
        ledger.close()
        client.close()


def test_dramatiq_worker_runs_a_guarded_occurrence_once_when_it_is_sent_twice(
    pg_dsn: str, redis_url: str, tmp_path: Path, worker: Callable[..., subprocess.Popen[bytes]]
) -> None:
    migrate(PostgresStore(pg_dsn))
    ledger = open_ledger(pg_dsn)
    client = redis.Redis.from_url(redis_url)
    submitter = DramatiqSubmitter(redis_url)
    worker(pg_dsn, "dramatiq", "tests.e2e.idempotency_apps.dramatiq_app", "--processes", "1",
           "--threads", "2")  # fmt: skip
    try:
        send_twice_and_count(
            client, submitter, ledger, backend="dramatiq", guarded="idem_guarded",
            plain="idem_plain", log=tmp_path / "worker.log",
        )  # fmt: skip
    finally:
        submitter.close()
        ledger.close()
        client.close()


def test_rq_worker_runs_a_guarded_occurrence_once_when_it_is_sent_twice(
    redis_url: str, tmp_path: Path, worker: Callable[..., subprocess.Popen[bytes]]
) -> None:
    # The embedded default's ledger: a SQLite file (RQ forks a work horse per job).
    path = tmp_path / "goatbeat.db"
    migrate(SQLiteStore(path))
    url = f"sqlite:///{path}"
    ledger = open_ledger(url)
    client = redis.Redis.from_url(redis_url)
    submitter = RQSubmitter(redis_url)

    def burst() -> None:
        proc = worker(url, "rq.cli", "worker", "--url", redis_url, "--burst", "default")
        assert proc.wait(DEADLINE) == 0, (tmp_path / "worker.log").read_text()[-3000:]

    def forget_jobs() -> None:
        # RQ refuses a second job with the id while it knows the first (unique=True): the
        # resubmission that gets through is one that comes after the first job's result_ttl.
        from rq.job import Job

        connection = redis.Redis.from_url(redis_url)
        for name in ("guarded", "plain"):
            Job.fetch(job_id_for(idempotency_key(name, AT)), connection=connection).delete()
        connection.close()

    try:
        send_twice_and_count(
            client, submitter, ledger, backend="rq", guarded="tests.e2e.idempotency_apps.rq_jobs.guarded",
            plain="tests.e2e.idempotency_apps.rq_jobs.plain", log=tmp_path / "worker.log",
            between=forget_jobs, after=burst,
        )  # fmt: skip
    finally:
        submitter.close()
        ledger.close()
        client.close()
