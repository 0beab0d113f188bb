"""The overlap policy with a REAL Celery worker: a task that outlasts its interval.

A prefork worker with two processes consumes the queue, so nothing but the policy keeps two
runs of the schedule apart; it reports completions with goatbeat.completion (the one line of
docs/operations.md), which is how the scheduler learns that a run ended. ``goatbeat scheduler``
processes schedule it (every 2 s, each run sleeping 3 s; tests/e2e/overlap_apps). The task
writes when each run started and ended. With ``skip`` the occurrences due while a run runs
are recorded ``skipped`` and never sent; with ``buffer_one`` one of them waits and starts
when the run ends, even after the scheduler that buffered it handed over to another.
Bounded: each test stops after three runs or its deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goatbeat.completion import DATABASE_ENV
from goatbeat.core.model import ExecutionStatus
from goatbeat.stores.postgres import PostgresStore
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.workers import REPO, StartWorker
from tests.overlap_trace import assert_never_overlapped, read_runs

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(150)]

RUNS = 3
DEADLINE = 60.0
APP = "tests.e2e.overlap_apps.beat_celery:beat"
TRACE_ENV = "GOATBEAT_TEST_TRACE"  # tests/e2e/overlap_apps/celery_app.py writes there


class Setup:
    def __init__(self, policy: str, dsn: str, redis_url: str, tmp: Path) -> None:
        self.policy, self.dsn, self.redis_url, self.tmp = policy, dsn, redis_url, tmp
        self.trace = tmp / "trace.txt"
        self.schedulers: dict[str, subprocess.Popen[bytes]] = {}

    def scheduler(self, sid: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            URL_ENV: self.redis_url,
            "GOATBEAT_E2E_OVERLAP": self.policy,
        }
        env.pop("GOATBEAT_APP", None)
        with (self.tmp / f"scheduler-{sid}.log").open("wb") as log:
            self.schedulers[sid] = subprocess.Popen(
                [sys.executable, "-m", "goatbeat", "--app", APP, "--database", self.dsn,
                 "scheduler", "--scheduler-id", sid, "--lease-ttl", "3s",
                 "--lease-renew-interval", "1s", "--max-sleep", "1s"],
                cwd=self.tmp, env=env, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip

    def stop(self, sid: str) -> None:
        proc = self.schedulers[sid]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-2500:]}" for f in self.tmp.glob("*.log")
        )

    def wait(self, what: str, done: object) -> None:
        deadline = time.monotonic() + DEADLINE
        while not done():  # type: ignore[operator]
            for sid, proc in self.schedulers.items():
                if proc.poll() is not None and proc.returncode != 0:
                    pytest.fail(f"scheduler {sid} exited with {proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no {what} after {DEADLINE:g}s: {read_runs(self.trace)}\n{self.logs()}"
                )
            time.sleep(0.2)

    def ended(self, count: int) -> bool:
        return len([r for r in read_runs(self.trace) if r[1] is not None]) >= count


def _start(policy: str, pg_dsn: str, redis_url: str, tmp: Path, start_worker: StartWorker) -> Setup:
    setup = Setup(policy, pg_dsn, redis_url, tmp)
    store = PostgresStore(pg_dsn)
    try:
        store.migrate()
    finally:
        store.close()
    start_worker(
        "celery", "celery", "-A", "tests.e2e.overlap_apps.celery_app", "worker",
        "--pool=prefork", "-c", "2", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-l", "info",
        env={DATABASE_ENV: pg_dsn, TRACE_ENV: str(setup.trace)},
    )  # fmt: skip
    return setup


def test_skip_records_the_occurrences_due_while_the_celery_task_still_runs(
    pg_dsn: str, redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    setup = _start("skip", pg_dsn, redis_url, tmp_path, start_worker)
    setup.scheduler("a")
    try:
        setup.wait(f"{RUNS} runs", lambda: setup.ended(RUNS))
    finally:
        setup.stop("a")
    runs = read_runs(setup.trace)
    assert_never_overlapped(runs)
    store = PostgresStore(pg_dsn)
    try:
        executions = store.executions(name="slow", limit=200)
        statuses = [e.status for e in executions]
        started = [e for e in executions if e.status is not ExecutionStatus.SKIPPED]
        skipped = [e for e in executions if e.status is ExecutionStatus.SKIPPED]
        # Every run the worker started is one the policy let through (one more may have been
        # sent as the last run ended); one is due every 2 s while each run lasts 3 s: about
        # one skip per run.
        assert len(runs) <= len(started) <= len(runs) + 1, statuses
        assert len(skipped) >= RUNS - 1, statuses
        assert ExecutionStatus.BUFFERED not in statuses
        ended = [e for e in started if e.status is ExecutionStatus.SUCCEEDED]
        assert len(ended) >= RUNS, statuses
        assert all(e.runtime is not None and e.runtime >= 2.5 for e in ended), ended
        assert store.get("slow").skipped_count == len(skipped)
    finally:
        store.close()


def test_buffer_one_starts_the_waiting_run_when_the_celery_task_ends_across_a_leader_change(
    pg_dsn: str, redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    setup = _start("buffer_one", pg_dsn, redis_url, tmp_path, start_worker)
    store = PostgresStore(pg_dsn)
    try:
        setup.scheduler("a")
        setup.wait(
            "buffered occurrence",
            lambda: any(
                e.status is ExecutionStatus.BUFFERED
                for e in store.executions(name="slow", limit=50)
            ),
        )
        # The leader that buffered it goes (graceful: the lease is released); a scheduler
        # started now takes over and must start the buffered one when the run ends.
        setup.stop("a")
        setup.scheduler("b")
        setup.wait(f"{RUNS} runs", lambda: setup.ended(RUNS))
        setup.stop("b")
        runs = read_runs(setup.trace)
        assert_never_overlapped(runs)
        executions = store.executions(name="slow", limit=200)
        statuses = [e.status for e in executions]
        sent = [e for e in executions if e.status not in (ExecutionStatus.SKIPPED,
                                                          ExecutionStatus.BUFFERED)]  # fmt: skip
        assert len(runs) <= len(sent) <= len(runs) + 1, statuses
        # At most one waits at a time: the others due meanwhile are skipped.
        assert statuses.count(ExecutionStatus.BUFFERED) <= 1, statuses
        assert ExecutionStatus.SKIPPED in statuses
        # The buffered one was sent when the run before it ended, not at its instant: it
        # waited about a second (runs sent at their instant go out within a poll).
        waited = [
            e
            for e in sent
            if e.submitted_at is not None
            and (e.submitted_at - e.scheduled_at).total_seconds() > 0.5
        ]
        assert waited, [(e.scheduled_at, e.submitted_at, e.status) for e in sent]
        assert any(e.scheduler_id == "b" for e in sent), [(e.status, e.scheduler_id) for e in sent]
    finally:
        setup.stop("a")
        if "b" in setup.schedulers:
            setup.stop("b")
        store.close()
