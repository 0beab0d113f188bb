"""Celery: ``@idempotent(ledger)`` under ``@app.task`` runs a goatbeat occurrence once.

::

    from goatbeat.idempotency.celery import idempotent

    @app.task
    @idempotent("postgresql://…/goatbeat")   # or a Ledger: PostgresLedger, DjangoLedger()
    def send_report(day): ...

The key is the ``goatbeat_idempotency_key`` header goatbeat puts on every message (also the
task id). A message without it (``send_report.delay()`` from your code) runs unguarded. A
skipped duplicate returns None without running the body. :mod:`goatbeat.idempotency` explains
``record`` and ``lease``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from goatbeat.idempotency import SKIPPED, Ledger, Record, guard_for
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["idempotent", "current_key"]

F = TypeVar("F", bound=Callable[..., Any])


def current_key() -> str | None:
    """The idempotency key of the Celery task running on this thread (None: none, or a message
    goatbeat did not send)."""
    from celery import current_task

    request = getattr(current_task, "request", None)
    if request is None:
        return None
    headers = getattr(request, "headers", None) or {}
    key = headers.get(KEY_HEADER) or getattr(request, KEY_HEADER, None)
    return key if isinstance(key, str) and key else None


def idempotent(
    ledger: Ledger | str, *, record: Record = "before", lease: timedelta | None = None
) -> Callable[[F], F]:
    """Guard a Celery task function (apply it *under* ``@app.task``)."""
    guard = guard_for(ledger, record=record, lease=lease)

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = guard().run(current_key(), lambda: func(*args, **kwargs))
            return None if result is SKIPPED else result

        wrapper.__goatbeat_idempotent__ = True  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
