"""``celery -A tests.e2e.completion_apps.celery_app worker``: three tasks that succeed, fail
once and are retried, and always fail."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from goatbeat.completion.celery import report_completions
from tests.e2e.backend_apps._record import URL_ENV

app = Celery("goatbeat_completions", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
report_completions()  # the one line: GOATBEAT_DATABASE names goatbeat's database


@app.task(name="completions.ok")
def ok() -> str:
    return "fine"


@app.task(bind=True, name="completions.flaky", max_retries=1)
def flaky(self: Any) -> str:
    if self.request.retries == 0:
        raise self.retry(exc=ConnectionError("first attempt lost the connection"), countdown=0)
    return "fine the second time"


@app.task(name="completions.broken")
def broken() -> None:
    raise RuntimeError("goatbeat e2e: this task always fails")
