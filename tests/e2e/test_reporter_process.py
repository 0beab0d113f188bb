"""End to end: workers report through one reporter process (goatbeat.completion.relay, #30
item 6), on real workers, Redis and PostgreSQL: no RQ work horse, Celery pool child or
Dramatiq worker process opens a database connection, the reports land in order with the
horse's name, a horse whose reporter was killed writes directly, and the reporter exits once
its worker is killed. (The work horse killed mid-job, whose ``lost`` the main process sends
after the horse's ``started``: tests/e2e/test_lost_runs.py.)"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from goatbeat.beat import Beat
from goatbeat.completion import DATABASE_ENV
from goatbeat.core.model import Execution, ExecutionStatus
from goatbeat.stores import open_store
from goatbeat.submitters.rq import RQSubmitter
from tests.e2e.completion_apps.relay_jobs import GATE_ENV, NOTES_ENV, PG_PORT_ENV
from tests.e2e.workers import DEADLINE, StartWorker, Worker

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(150)]

JOBS = "tests.e2e.completion_apps.relay_jobs"


def dispatch(
    database: str, redis_url: str, names: list[str], task: str, submitter: Any = None
) -> None:
    beat = Beat(database, submitter=submitter or RQSubmitter(redis_url))
    try:
        beat.migrate()
        for name in dict.fromkeys(names):
            beat.schedule(name=name, task=task if submitter else f"{JOBS}.{task}", every="1d")
        beat.publish()
        for name in names:
            beat.run_now(name)
        loop = beat.scheduler()
        try:
            assert loop.run_once().submitted == len(names)
        finally:
            loop.release()  # the next dispatch's scheduler leads at once
            loop.close()
    finally:
        beat.close()


def probe_env(pg_dsn: str, tmp_path: Path) -> dict[str, str]:
    return {
        DATABASE_ENV: pg_dsn,
        PG_PORT_ENV: str(urlsplit(pg_dsn).port),
        NOTES_ENV: str(tmp_path / "notes"),
        GATE_ENV: str(tmp_path / "gate"),
    }


def start(
    start_worker: StartWorker, redis_url: str, pg_dsn: str, tmp_path: Path, *burst: str
) -> Worker:
    return start_worker(
        "rq", "rq.cli", "worker", "--url", redis_url, *burst,
        "--job-class", "goatbeat.completion.rq.Job", "default",
        env=probe_env(pg_dsn, tmp_path),
    )  # fmt: skip


def runs(database: str) -> list[Execution]:
    store = open_store(database)
    try:
        return sorted(store.executions(limit=100), key=lambda e: e.id)
    finally:
        store.close()


def wait(what: str, check: object, worker: Worker) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} after {DEADLINE}s:\n{worker.output()}")
        time.sleep(0.1)


def notes(tmp_path: Path) -> list[str]:
    with contextlib.suppress(FileNotFoundError):
        return (tmp_path / "notes").read_text().splitlines()
    return []


def reporters(worker_pid: int) -> list[int]:
    """The reporter processes whose parent is ``worker_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if (
                int(stat[1]) == worker_pid
                and stat[0] not in "ZX"
                and b"goatbeat.completion.relay" in cmdline
            ):
                found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def statuses(database: str) -> list[ExecutionStatus]:
    return [e.status for e in runs(database)]


def test_rq_work_horses_open_no_database_connection_and_their_reports_land_in_order(
    redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    dispatch(pg_dsn, redis_url, ["a", "b", "c", "d"], "probe")
    worker = start(start_worker, redis_url, pg_dsn, tmp_path, "--burst")
    wait(
        "not every run succeeded",
        lambda: statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED] * 4,
        worker,
    )
    horses = [line.split() for line in notes(tmp_path)]
    assert len(horses) == 4 and len({pid for pid, _ in horses}) == 4, horses
    # Each horse reported started (running) before its body ran: with no socket to PostgreSQL.
    assert [count for _, count in horses] == ["0"] * 4, horses
    host = socket.gethostname()
    for run, (pid, _) in zip(
        sorted(runs(pg_dsn), key=lambda e: e.started_at or 0), horses, strict=True
    ):
        # Written by the reporter process, in the order sent (started, then succeeded), under
        # the name of the horse that ran it.
        assert run.started_at is not None and run.finished_at is not None
        assert run.started_at <= run.finished_at and run.error is None
        assert run.worker == f"{host}:{pid}", (run, horses)


def check_probes(pg_dsn: str, tmp_path: Path, worker: Worker, count: int) -> None:
    """Every run succeeded; each task's process held no socket to PostgreSQL when it ran
    (after its started report); the reports carry that process's name."""
    wait(
        "not every run succeeded",
        lambda: statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED] * count,
        worker,
    )
    probes = [line.split() for line in notes(tmp_path)]
    assert len(probes) == count and [n for _, n in probes] == ["0"] * count, probes
    names = {f"{socket.gethostname()}:{pid}" for pid, _ in probes}
    for run in runs(pg_dsn):
        assert run.started_at is not None and run.finished_at is not None
        assert run.started_at <= run.finished_at and run.worker in names, (run, probes)
    assert reporters(worker.proc.pid) or any(reporters(p) for p in children(worker.proc.pid))


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def test_celery_pool_children_open_no_database_connection(
    redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    from goatbeat.submitters.celery import CelerySubmitter

    dispatch(pg_dsn, redis_url, ["a", "b", "c"], "relay.probe", CelerySubmitter(redis_url))
    worker = start_worker(
        "celery", "celery", "-A", "tests.e2e.completion_apps.relay_celery", "worker",
        "--pool=prefork", "-c", "1", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-l", "info", env=probe_env(pg_dsn, tmp_path),
    )  # fmt: skip
    check_probes(pg_dsn, tmp_path, worker, 3)


def test_dramatiq_worker_processes_open_no_database_connection(
    redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    from goatbeat.submitters.dramatiq import DramatiqSubmitter

    dispatch(pg_dsn, redis_url, ["a", "b", "c"], "relay_probe", DramatiqSubmitter(redis_url))
    worker = start_worker(
        "dramatiq", "dramatiq", "tests.e2e.completion_apps.relay_dramatiq",
        "--processes", "1", "--threads", "2", env=probe_env(pg_dsn, tmp_path),
    )  # fmt: skip
    check_probes(pg_dsn, tmp_path, worker, 3)


def test_a_horse_whose_reporter_was_killed_writes_directly_and_the_next_fork_starts_another(
    redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    dispatch(pg_dsn, redis_url, ["gated"], "gated")
    worker = start(start_worker, redis_url, pg_dsn, tmp_path)
    try:
        wait("no running run", lambda: statuses(pg_dsn) == [ExecutionStatus.RUNNING], worker)
        [reporter] = reporters(worker.proc.pid)
        os.kill(reporter, signal.SIGKILL)
        wait("the reporter outlived SIGKILL", lambda: gone(reporter), worker)
    finally:
        (tmp_path / "gate").touch()
    # The horse's success went straight to the database.
    wait("no success", lambda: statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED], worker)
    dispatch(pg_dsn, redis_url, ["gated"], "gated")
    wait(
        "the next run did not succeed",
        lambda: statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED] * 2,
        worker,
    )
    [again] = reporters(worker.proc.pid)
    assert again != reporter


def test_the_reporter_exits_once_its_worker_is_killed_and_the_horse_then_writes_directly(
    redis_url: str, pg_dsn: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    dispatch(pg_dsn, redis_url, ["gated"], "gated")
    worker = start(start_worker, redis_url, pg_dsn, tmp_path)
    try:
        wait("no running run", lambda: statuses(pg_dsn) == [ExecutionStatus.RUNNING], worker)
        [reporter] = reporters(worker.proc.pid)
        os.kill(worker.proc.pid, signal.SIGKILL)  # the main process; its horse runs on
        worker.proc.wait(DEADLINE)
        wait("the reporter outlived its worker", lambda: gone(reporter), worker)
    finally:
        (tmp_path / "gate").touch()
    wait("no success", lambda: statuses(pg_dsn) == [ExecutionStatus.SUCCEEDED], worker)
