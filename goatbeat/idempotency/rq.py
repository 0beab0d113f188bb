"""RQ: ``@idempotent(ledger)`` on a job function runs a goatbeat occurrence once.

::

    from goatbeat.idempotency.rq import idempotent

    @idempotent("postgresql://…/goatbeat")   # or a Ledger
    def send_report(day): ...

The key is ``job.meta["goatbeat_idempotency_key"]``. RQ itself already refuses a second job
with the same id while the first is known to it (goatbeat derives the job id from the key and
enqueues with ``unique=True`` on RQ >= 2.4); the guard covers what that does not: a
resubmission after the first job's hash expired (``result_ttl``), an older RQ, or a job
enqueued again by hand. A job without the key runs unguarded; a skipped duplicate returns None.
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
    """The idempotency key of the RQ job running in this process (None: none, or a job goatbeat
    did not enqueue)."""
    from rq import get_current_job

    job = get_current_job()
    if job is None:
        return None
    key = (job.meta or {}).get(KEY_HEADER)
    return key if isinstance(key, str) and key else None


def idempotent(
    ledger: Ledger | str, *, record: Record = "before", lease: timedelta | None = None
) -> Callable[[F], F]:
    """Guard an RQ job function."""
    guard = guard_for(ledger, record=record, lease=lease)

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = guard().run(current_key(), lambda: func(*args, **kwargs))
            return None if result is SKIPPED else result

        wrapper.__goatbeat_idempotent__ = True  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
