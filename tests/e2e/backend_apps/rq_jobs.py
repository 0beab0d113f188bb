"""The RQ job functions of the e2e tests (the worker imports them by their dotted paths)."""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from tests.e2e.backend_apps._record import record


def record_run(*args: Any, **kwargs: Any) -> None:
    job = get_current_job()
    assert job is not None
    record(
        "rq",
        args=list(args),
        kwargs=kwargs,
        job_id=job.id,
        key=job.meta.get("goatbeat_idempotency_key"),
        scheduled_at=job.meta.get("goatbeat_scheduled_at"),
        extra={k: v for k, v in job.meta.items() if k.startswith("x-")},
        queue=job.origin,
        retries_left=job.retries_left,
        timeout=job.timeout,
    )


def fail_run(*args: Any, **kwargs: Any) -> None:
    """Records the attempt, then fails: a schedule's ``retry`` decides how often RQ retries."""
    record_run(*args, **kwargs)
    raise RuntimeError("goatbeat e2e: this job always fails")
