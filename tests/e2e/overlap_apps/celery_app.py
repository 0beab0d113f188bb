"""``celery -A tests.e2e.overlap_apps.celery_app worker``: a task that outlasts its schedule's
interval, reporting its completions to goatbeat (the one line of docs/operations.md)."""

from __future__ import annotations

import os
import time

from celery import Celery

from goatbeat.completion.celery import report_completions
from tests.e2e.backend_apps._record import URL_ENV

TRACE_ENV = "GOATBEAT_TEST_TRACE"

app = Celery("goatbeat_overlap", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
)
report_completions()  # GOATBEAT_DATABASE names goatbeat's database


def _trace(kind: str) -> None:
    with open(os.environ[TRACE_ENV], "a") as out:
        out.write(f"{kind} {time.time():.3f}\n")


@app.task(name="overlap.slow")
def slow(seconds: float) -> None:
    _trace("start")
    try:
        time.sleep(seconds)
    finally:
        _trace("end")
