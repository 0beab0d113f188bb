"""``celery -A tests.e2e.completion_apps.guarded_celery worker``: guarded.py's probe as a
Celery task under the idempotency guard, with completion reports on."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.completion.celery import report_completions
from goatbeat.idempotency.celery import idempotent
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.completion_apps import guarded

app = Celery("goatbeat_guarded", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
report_completions()  # GOATBEAT_DATABASE names goatbeat's database


@app.task(name="guarded.probe")
@idempotent(guarded.LEDGER)
def probe() -> None:
    guarded.body()
