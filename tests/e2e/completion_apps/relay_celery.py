"""``celery -A tests.e2e.completion_apps.relay_celery worker``: the probe of relay_jobs.py as
a Celery task, with completion reports on."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.completion.celery import report_completions
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.completion_apps import relay_jobs

app = Celery("goatbeat_relay", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
report_completions()  # GOATBEAT_DATABASE names goatbeat's database


@app.task(name="relay.probe")
def probe() -> None:
    relay_jobs.probe()
