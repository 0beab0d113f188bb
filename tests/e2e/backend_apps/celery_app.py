"""The Celery app of the e2e tests: ``celery -A tests.e2e.backend_apps.celery_app worker``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from tests.e2e.backend_apps._record import URL_ENV, record

app = Celery("goatbeat_e2e", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(bind=True, name="tests.e2e.backend_apps.celery_app.record_run")
def record_run(self: Any, *args: Any, **kwargs: Any) -> None:
    request = self.request
    headers = request.headers or {}
    record(
        "celery",
        args=list(args),
        kwargs=kwargs,
        task_id=request.id,
        key=headers.get("goatbeat_idempotency_key"),
        scheduled_at=headers.get("goatbeat_scheduled_at"),
        extra={k: v for k, v in headers.items() if k.startswith("x-")},
        queue=(request.delivery_info or {}).get("routing_key"),
        priority=(request.delivery_info or {}).get("priority"),
    )
