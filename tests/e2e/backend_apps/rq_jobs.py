"""The RQ job function of the e2e tests (the worker imports it by its dotted path)."""

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
    )
