"""``celery -A bench.completion_celery worker``: the no-op task of bench/bench_completions.py,
with completion reports when ``GB_BENCH_SETUP`` is ``reports`` or ``guard``."""

from __future__ import annotations

import os

from celery import Celery

from bench.completion_jobs import DATABASE, REDIS_ENV, SETUP_ENV, done
from goatbeat.idempotency.celery import idempotent

app = Celery("bench_completions", broker=os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_ignore_result=True,
)
if os.environ.get(SETUP_ENV, "plain") != "plain":
    from goatbeat.completion.celery import report_completions

    report_completions()


@app.task(name="bench.celery_noop")
def noop() -> None:
    done()


@app.task(name="bench.celery_guarded")
@idempotent(DATABASE)
def guarded_noop() -> None:
    done()
