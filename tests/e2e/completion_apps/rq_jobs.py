"""RQ job functions for ``rq worker --job-class goatbeat.completion.rq.Job``: one succeeds, one
fails once and is retried (the schedule asks RQ for one retry), one always fails."""

from __future__ import annotations

from rq import get_current_job


def ok() -> str:
    return "fine"


def flaky() -> str:
    job = get_current_job()
    assert job is not None
    if job.retries_left:  # the first attempt still has its retry
        raise ConnectionError("first attempt lost the connection")
    return "fine the second time"


def broken() -> None:
    raise RuntimeError("goatbeat e2e: this job always fails")
