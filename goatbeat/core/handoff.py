"""Where the idempotency guard hands a delivery's success to this process's completion
reporter: the reporter (:mod:`goatbeat.completion.relay`) offers a sender for its database
when it starts; the guard (:mod:`goatbeat.idempotency`) asks for one for its ledger's database
after a body succeeded, and commits the success itself when there is none or the sender
refuses (the reporter gone or stuck). Both run in the worker and sit on one floor, so the
table lives here. A forked child (a Celery pool child, an RQ work horse) inherits its
parent's senders with the pipe they write to.

An RQ work horse also hands the reporter its ``delivery_begin`` (:data:`Beginner`): the
reporter commits it and answers, so the horse opens no connection at all."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "Beginner",
    "Sender",
    "beginner_for",
    "offer",
    "offer_begin",
    "sender_for",
    "withdraw",
    "withdraw_begin",
]

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


Beginner = Callable[[str, str, float | None], "tuple[bool, str | None] | None"]
"""Asks the reporter to take a key: ``begin(key, owner, lease_seconds)`` -> ``(taken, state)``
once the reporter committed the ledger's ``delivery_begin`` (and, not taken, counted the
duplicate: ``state`` is the key's), None when it could not be asked or did not answer (then
the caller takes the key itself: the request may have been committed, with that owner)."""

_beginners: dict[str, Beginner] = {}


def offer_begin(database: str, begin: Beginner) -> None:
    """The reporter writing to ``database`` takes keys for this process's guards (an RQ work
    horse, which would otherwise open a connection of its own for it)."""
    with _lock:
        _beginners[database] = begin


def withdraw_begin(database: str, begin: Beginner) -> None:
    """``begin`` takes no more keys for ``database`` (a newer one stays)."""
    with _lock:
        if _beginners.get(database) == begin:
            del _beginners[database]


def beginner_for(database: str | None) -> Beginner | None:
    """Who takes keys for ``database`` in this process; None: the guard takes them itself."""
    if not database:
        return None
    return _beginners.get(database)
