"""Dramatiq: the ``Idempotency`` middleware runs each goatbeat occurrence once.

::

    from goatbeat.idempotency.dramatiq import Idempotency

    broker.add_middleware(Idempotency("postgresql://…/goatbeat"))   # or a Ledger

Every message carrying ``goatbeat_idempotency_key`` in its options (what goatbeat sends) is
guarded; others pass through. A duplicate is skipped (``SkipMessage``: acknowledged, the actor
does not run). An actor that raises releases the key, so the Retries middleware's next attempt
runs. Add it after the middleware that may skip or fail a message first (AgeLimit, TimeLimit
are added by default, so ``add_middleware`` appends after them). An actor whose every delivery
must run opts out with ``@dramatiq.actor(goatbeat_idempotent=False)``.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import dramatiq
from dramatiq.middleware import SkipMessage

from goatbeat.idempotency import Ledger, Record, Ticket, guard_for
from goatbeat.submitters.keys import KEY_HEADER

__all__ = ["Idempotency"]


class Idempotency(dramatiq.Middleware):
    @property
    def actor_options(self) -> set[str]:
        """The actor option this middleware reads (declared so Dramatiq accepts it)."""
        return {"goatbeat_idempotent"}

    def __init__(
        self, ledger: Ledger | str, *, record: Record = "before", lease: timedelta | None = None
    ) -> None:
        self._guard = guard_for(ledger, record=record, lease=lease)
        # The delivery being processed on this worker thread, from before_ to after_.
        self._current = threading.local()

    def before_process_message(self, broker: Any, message: Any) -> None:
        self._current.ticket = None
        key = (message.options or {}).get(KEY_HEADER)
        if not isinstance(key, str) or not key:
            return
        try:
            options = broker.get_actor(message.actor_name).options
        except Exception:  # noqa: BLE001 - an unknown actor fails in the worker, not here
            options = {}
        if not options.get("goatbeat_idempotent", True):
            return
        ticket = self._guard().begin(key)
        if ticket is None:
            raise SkipMessage(f"goatbeat occurrence {key} already ran or is running")
        self._current.ticket = ticket

    def _take(self) -> Ticket | None:
        ticket: Ticket | None = getattr(self._current, "ticket", None)
        self._current.ticket = None
        return ticket

    def after_process_message(
        self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
    ) -> None:
        ticket = self._take()
        if ticket is not None:
            # A message failed by another middleware did not run the actor either.
            ok = exception is None and not message.failed
            self._guard().finish(ticket, succeeded=ok)

    def after_skip_message(self, broker: Any, message: Any) -> None:
        # Skipped by a middleware after this one: the body never ran, release the key.
        ticket = self._take()
        if ticket is not None:
            self._guard().finish(ticket, succeeded=False)
