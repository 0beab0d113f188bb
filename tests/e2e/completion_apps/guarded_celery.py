"""``celery -A tests.e2e.completion_apps.guarded_celery worker``: guarded.py's probe as a
Celery task under the idempotency guard, on relay_celery.py's app (completion reports on)."""

from __future__ import annotations

from goatbeat.idempotency.celery import idempotent
from tests.e2e.completion_apps import guarded
from tests.e2e.completion_apps.relay_celery import app

__all__ = ["app", "probe"]


@app.task(name="guarded.probe")
@idempotent(guarded.LEDGER)
def probe() -> None:
    guarded.body()
