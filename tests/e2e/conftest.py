"""Fixtures of the e2e tests: real worker processes, stopped at the end of each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.workers import StartWorker, Worker, stop, worker_starter


@pytest.fixture
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[StartWorker]:
    """Start a worker subprocess with a hermetic environment; every one is stopped at the end."""
    started: list[Worker] = []
    try:
        yield worker_starter(redis_url, tmp_path, started)
    finally:
        for worker in started:
            stop(worker.proc)
