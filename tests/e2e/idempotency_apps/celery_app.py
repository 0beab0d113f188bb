"""``celery -A tests.e2e.idempotency_apps.celery_app worker``: a guarded and a plain task."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.idempotency.celery import current_key, idempotent
from tests.e2e.backend_apps._record import URL_ENV, record
from tests.e2e.idempotency_apps import LEDGER_ENV

app = Celery("goatbeat_idem", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="idem.guarded")
@idempotent(os.environ.get(LEDGER_ENV, "sqlite:///unused.db"))
def guarded(n: int) -> None:
    record("celery-guarded", n=n, key=current_key())


@app.task(name="idem.plain")
def plain(n: int) -> None:
    record("celery-plain", n=n, key=current_key())
