"""The no-op task of bench/bench_completions.py, for every backend: it notes the instant it
ended in a Redis list (``bench:done``), which the rate is measured from. This module imports
nothing of goatbeat, so a plain RQ work horse importing it does no more than a plain job's
(the guarded RQ job: bench/completion_guarded.py). ``GB_BENCH_SETUP`` (``plain``,
``reports``, ``guard``) says which setup the Celery app and the Dramatiq broker take (RQ's is
its ``--job-class``)."""

from __future__ import annotations

import os
import time
from typing import Any

DONE = "bench:done"
SETUP_ENV = "GB_BENCH_SETUP"
REDIS_ENV = "GB_BENCH_REDIS"
DATABASE = os.environ.get("GOATBEAT_DATABASE", "sqlite:///unused.db")

_client: list[Any] = []


def done(connection: Any = None) -> None:
    """Note the end of one task (RQ gives its own connection: no extra one per horse)."""
    if connection is None:
        if not _client:
            import redis

            _client.append(redis.Redis.from_url(os.environ[REDIS_ENV]))
        connection = _client[0]
    connection.rpush(DONE, repr(time.time()))


def rq_connection() -> Any:
    from rq import get_current_job

    job = get_current_job()
    return None if job is None else job.connection


def noop() -> None:
    """The RQ job."""
    done(rq_connection())
