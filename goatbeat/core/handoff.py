"""Where the idempotency guard hands a delivery's success to this process's completion
reporter: the reporter (:mod:`goatbeat.completion.relay`) offers a sender for its database
when it starts; the guard (:mod:`goatbeat.idempotency`) asks for one for its ledger's database
after a body succeeded, and commits the success itself when there is none or the sender
refuses (the reporter gone or stuck). Both run in the worker and sit on one floor, so the
table lives here. A forked child (a Celery pool child, an RQ work horse) inherits its
parent's senders with the pipe they write to."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Sender", "offer", "sender_for", "withdraw"]

Sender = Callable[[dict[str, Any]], bool]
"""Sends one record to the reporter; False when it could not (then the caller writes it)."""

_senders: dict[str, Sender] = {}
_lock = threading.Lock()


def offer(database: str, send: Sender) -> None:
    """The reporter writing to ``database`` (its URL) takes records through ``send``."""
    with _lock:
        _senders[database] = send


def withdraw(database: str, send: Sender) -> None:
    """``send`` takes no more records for ``database`` (a newer sender stays)."""
    with _lock:
        if _senders.get(database) == send:
            del _senders[database]


def sender_for(database: str | None) -> Sender | None:
    """The sender of the reporter writing to ``database``; None: no reporter for it here."""
    if not database:
        return None
    return _senders.get(database)
