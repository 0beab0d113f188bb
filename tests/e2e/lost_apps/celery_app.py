"""``celery -A tests.e2e.lost_apps.celery_app worker``: tasks that hang until killed (kill -9,
or Celery's hard time limit), with completion reports on."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.completion import DATABASE_ENV
from goatbeat.completion.celery import report_completions
from goatbeat.idempotency.celery import idempotent
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.lost_apps._hang import hang

app = Celery("goatbeat_lost", broker=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
report_completions()


@app.task(name="lost.hang")
def hang_task() -> None:
    hang()


@app.task(name="lost.limited", time_limit=2)
def limited_task() -> None:
    hang()


@app.task(name="lost.guarded", acks_late=True, reject_on_worker_lost=True)
@idempotent(os.environ.get(DATABASE_ENV, "sqlite:///unused.db"))
def guarded_task() -> None:
    hang()  # the first delivery hangs and is killed; the redelivery is skipped by the guard
