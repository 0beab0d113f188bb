"""Real Celery / Dramatiq / RQ worker processes for the e2e tests, and waiting for their runs.

Each worker runs in its own session with a hermetic environment; the tasks it runs record what
they received in a Redis list (tests/e2e/backend_apps/_record.py), which is what the tests read.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.e2e.backend_apps._record import URL_ENV, WORKER_ENV, read

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 45.0  # seconds a worker gets to start and run everything


class Worker:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        # The worker is gone, but what it left in its session may not be (an RQ work horse
        # whose main process a test killed runs on, reparented to init): end those too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    # The worker leads its own session: its pool children go down with it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


StartWorker = Callable[..., Worker]


def worker_starter(default_url: str, tmp_path: Path, started: list[Worker]) -> StartWorker:
    """``start(name, *python_m_args, url=None, env=None)``: a worker subprocess on ``url``
    (default ``default_url``), with ``env`` added to its environment; every one started is
    appended to ``started`` for the caller to stop."""

    def start(
        name: str, *args: str, url: str | None = None, env: dict[str, str] | None = None
    ) -> Worker:
        extra = env or {}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(REPO),
            "PYTHONDONTWRITEBYTECODE": "1",
            URL_ENV: url or default_url,
            WORKER_ENV: name,
            **extra,
        }
        log = tmp_path / f"worker-{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(name, proc, log)
        started.append(worker)
        return worker

    return start


def wait_for_runs(
    client: redis.Redis, backend: str, count: int, workers: list[Worker], *, exits: bool = False
) -> list[dict[str, Any]]:
    """The recorded runs once there are ``count`` of them; fails at the deadline.

    ``exits``: the workers stop by themselves (RQ ``--burst``); a worker that exits otherwise
    has crashed."""
    deadline = time.monotonic() + DEADLINE
    while True:
        runs = read(client, backend)
        if len(runs) >= count and (not exits or all(w.proc.poll() is not None for w in workers)):
            return runs
        for worker in workers:
            code = worker.proc.poll()
            if code is not None and (not exits or code != 0):
                pytest.fail(f"worker {worker.name} exited with {code}:\n{worker.output()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.name}\n{w.output()}" for w in workers)
            pytest.fail(f"{len(runs)}/{count} {backend} runs after {DEADLINE}s: {runs}\n{logs}")
        time.sleep(0.1)
