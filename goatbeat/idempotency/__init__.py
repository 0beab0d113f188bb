"""Worker-side idempotency: run a task body once per occurrence, even when its message arrives
twice.

goatbeat dispatches at least once, so a task can receive the same occurrence twice (README,
"Guarantees", says exactly when). Each message carries the occurrence's idempotency key; this
package records the key in a *ledger* (a table in goatbeat's database, ``goatbeat_delivery``)
around the task body and skips a delivery whose key is already taken. The adapters read the key
where each backend carries it and wrap the task:

- ``goatbeat.idempotency.celery.idempotent``       (the ``goatbeat_idempotency_key`` header)
- ``goatbeat.idempotency.dramatiq.Idempotency``    (middleware; the message options)
- ``goatbeat.idempotency.rq.idempotent``           (``job.meta``)
- ``goatbeat.idempotency.django_tasks.idempotent`` (the task result id the scheduler noted)

A message without a key (a task called by your own code) runs unguarded. Ledgers:
:class:`~goatbeat.idempotency.postgres.PostgresLedger`,
:class:`~goatbeat.idempotency.sqlite.SQLiteLedger` and
:class:`~goatbeat.idempotency.django.DjangoLedger`; :func:`open_ledger` picks one from a URL.

When the key is recorded decides what a duplicate does (docs/idempotency.md has the table):

``record="before"`` (default)
    The delivery takes the key *before* the body runs. A second delivery is skipped while the
    first runs and after it succeeded. If the body raises, the key is released, so the
    backend's own retry runs it again. If the worker dies mid-body, the key stays taken:
    with ``lease=None`` no later delivery runs it (at most once); with ``lease=timedelta(...)``
    a delivery arriving after that long runs it again (at least once, if the backend
    redelivers) — choose a lease longer than the body ever runs, or two runs may overlap.
``record="after"``
    The body runs on every delivery until one has *succeeded*; later deliveries are skipped.
    Nothing is lost to a crash, but duplicates that arrive before the first success (two
    workers at once, a redelivery of a crashed run) run too.

With completion reports on (:mod:`goatbeat.completion`, given the same database URL as the
ledger), a ``record="before"`` success is not committed on the task's path: it is handed to
the worker's reporter process, which writes it (the ledger's same statement) in its next batch
transaction, a fraction of a second later. Until then the key reads ``running``: a redelivery
in that window is skipped, as it is while the first delivery runs; a success lost with a
reporter killed by SIGKILL leaves the key as a delivery that died mid-body would. Taking the
key and releasing it after a failure stay synchronous, and so does the success of
``record="after"`` (which reads the ledger to decide) and of a lease with less than
:data:`HANDOFF_MARGIN` left (a delivery after the lease would take a key whose success is
still on its way). Without a reporter for the ledger's database (or with it gone or stuck),
the success is committed at once, as it always was. An RQ work horse also takes its key
through the reporter (:mod:`goatbeat.core.handoff`'s begin: the reporter commits it before it
answers), so it opens no connection; without an answer it takes the key itself, and a begin
the reporter committed for this very delivery is then still its own.

Neither makes the business effect exactly-once: a body that crashes halfway through its side
effects has done half of them. Only an effect written in the same database transaction as the
record could be; this helper records in its own statements, before or after the body.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from goatbeat.core.errors import InvalidValue
from goatbeat.core.handoff import beginner_for, sender_for
from goatbeat.core.observability import log_event
from goatbeat.core.skips import note_skip

__all__ = [
    "Delivery",
    "Guard",
    "HANDOFF_MARGIN",
    "Ledger",
    "Record",
    "Ticket",
    "SKIPPED",
    "check_options",
    "guard_for",
    "open_ledger",
    "new_owner",
]

Record = Literal["before", "after"]
T = TypeVar("T")

HANDOFF_MARGIN = 30.0
"""Seconds of lease a delivery must have left for its success to go through the reporter
(:class:`Guard`): closer to its end it is committed at once."""


class _Skipped:
    """What :meth:`Guard.run` returns for a skipped delivery (falsy, distinct from None)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED: Any = _Skipped()


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One row of the ledger: what the guarded deliveries of one occurrence did."""

    idempotency_key: str
    state: str
    """``running``, ``succeeded`` or ``failed``."""
    owner: str
    """The delivery that holds the key, or held it last (``host:pid:random``)."""
    attempts: int
    """Deliveries that ran the body."""
    duplicates: int
    """Deliveries skipped because the key was taken."""
    started_at: datetime
    expires_at: datetime | None
    finished_at: datetime | None


@runtime_checkable
class Ledger(Protocol):
    """Where the keys are recorded. Every method is one statement, committed on its own (so
    the record is visible to the other workers at once), and thread-safe. A ledger may say
    which database it writes to in a ``url`` attribute (the URL it was opened from): the
    completion reporter writing to the same URL then records its successes
    (:mod:`goatbeat.idempotency`)."""

    def begin(self, key: str, *, owner: str, lease: timedelta | None) -> bool:
        """Take ``key`` for ``owner``: True when there was no row, the last run failed, or a
        running claim expired. ``lease`` None: the claim never expires."""
        ...

    def duplicate(self, key: str) -> str | None:
        """Count a skipped delivery of ``key``; the key's state (None: no row)."""
        ...

    def succeeded(self, key: str, *, owner: str, counted: bool) -> None:
        """Record the success of ``key`` (final, whoever held it). ``counted``: :meth:`begin`
        already counted this run."""
        ...

    def failed(self, key: str, *, owner: str) -> None:
        """Release ``owner``'s running claim on ``key`` as failed, so a retry may run."""
        ...

    def read(self, key: str) -> Delivery | None: ...

    def prune(self, *, before: datetime) -> int:
        """Delete rows finished before ``before`` (and Django Tasks key notes created before
        it); the number of rows deleted. A duplicate arriving later runs again."""
        ...

    def close(self) -> None: ...


def check_options(*, record: object, lease: object) -> None:
    """Raise ``InvalidValue`` (naming the option and the value) unless they make sense."""
    if record not in ("before", "after"):
        raise InvalidValue("record", record, f"{record!r} is not 'before' or 'after'")
    if lease is not None:
        if not isinstance(lease, timedelta) or lease <= timedelta(0):
            raise InvalidValue("lease", lease, f"{lease!r} is not a positive timedelta")
        if record == "after":
            raise InvalidValue("lease", lease, 'a lease applies to record="before" only')


def new_owner() -> str:
    """A name for one delivery: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class Ticket:
    """A delivery that took its key (:meth:`Guard.begin`); give it back to :meth:`Guard.finish`."""

    key: str
    owner: str
    began: float = field(default_factory=time.monotonic, compare=False)
    """When this delivery asked for the key (``time.monotonic()``): where its lease starts,
    at the latest."""


class Guard:
    """Run a body once per idempotency key, as :mod:`goatbeat.idempotency` explains.

    ``Guard(ledger, record="before", lease=None)``."""

    def __init__(
        self, ledger: Ledger, *, record: Record = "before", lease: timedelta | None = None
    ) -> None:
        check_options(record=record, lease=lease)
        self.ledger = ledger
        self.record: Record = record
        self.lease = lease

    def begin(self, key: str) -> Ticket | None:
        """Before the body: a ticket when this delivery runs it, None when it is a duplicate
        to skip (counted and logged as ``delivery.skipped``)."""
        owner = new_owner()
        began = time.monotonic()
        begin = beginner_for(getattr(self.ledger, "url", None))
        asked = None
        if begin is not None and self.record == "before":
            lease = None if self.lease is None else self.lease.total_seconds()
            asked = begin(key, owner, lease)
        if asked is not None:
            taken, state = asked
        elif self.record == "before":
            taken = self.ledger.begin(key, owner=owner, lease=self.lease)
            if not taken and begin is not None:
                # The reporter may have committed this delivery's begin and not answered.
                current = self.ledger.read(key)
                taken = current is not None and (current.state, current.owner) == (
                    "running",
                    owner,
                )
        else:
            current = self.ledger.read(key)
            taken = current is None or current.state != "succeeded"
        if taken:
            return Ticket(key, owner, began)
        if asked is None:
            state = self.ledger.duplicate(key)
        note_skip(key, state)
        log_event("delivery.skipped", idempotency_key=key, state=state, record=self.record)
        return None

    def finish(self, ticket: Ticket, *, succeeded: bool) -> None:
        """After the body. Never raises: the body's outcome stands whatever the ledger does
        (a failure to record is logged as ``delivery.error``)."""
        try:
            if succeeded and self._hand_off(ticket):
                return
            if succeeded:
                self.ledger.succeeded(
                    ticket.key, owner=ticket.owner, counted=self.record == "before"
                )
            elif self.record == "before":
                self.ledger.failed(ticket.key, owner=ticket.owner)
        except Exception as exc:  # noqa: BLE001 - the task's own outcome must not change
            log_event(
                "delivery.error",
                level=logging.WARNING,
                idempotency_key=ticket.key,
                succeeded=succeeded,
                error=f"{type(exc).__name__}: {exc}",
            )

    def _hand_off(self, ticket: Ticket) -> bool:
        """Send the success of ``ticket`` to this process's completion reporter for the
        ledger's database: True when it took it (it commits it in its next batch)."""
        if self.record != "before":
            return False  # "after" decides by reading the ledger: it must hold the success
        if self.lease is not None:
            left = self.lease.total_seconds() - (time.monotonic() - ticket.began)
            if left < HANDOFF_MARGIN:
                return False
        send = sender_for(getattr(self.ledger, "url", None))
        if send is None:
            return False
        return send({"event": "delivery_succeeded", "key": ticket.key, "owner": ticket.owner})

    def run(self, key: str | None, body: Callable[[], T]) -> T:
        """``body()`` unless this delivery of ``key`` is a duplicate (then :data:`SKIPPED`).
        ``key`` None (a message goatbeat did not send) runs the body unguarded."""
        if key is None:
            return body()
        ticket = self.begin(key)
        if ticket is None:
            return SKIPPED  # type: ignore[no-any-return]
        try:
            result = body()
        except BaseException:
            self.finish(ticket, succeeded=False)
            raise
        self.finish(ticket, succeeded=True)
        return result


def open_ledger(url: str) -> Ledger:
    """A ledger for goatbeat's database URL: ``postgresql://…`` or ``sqlite:///path``."""
    if not isinstance(url, str) or not url:
        raise InvalidValue("database", url, f"{url!r} is not a database URL")
    if url.startswith(("postgresql://", "postgres://")):
        from goatbeat.idempotency.postgres import PostgresLedger

        return PostgresLedger(url)
    if url.startswith("sqlite:///"):
        from goatbeat.idempotency.sqlite import SQLiteLedger

        return SQLiteLedger(url.removeprefix("sqlite:///"))
    raise InvalidValue(
        "database", url, f"{url!r}: the ledger needs postgresql://… or sqlite:///path"
    )


def guard_for(
    ledger: Ledger | str | None,
    *,
    record: Record,
    lease: timedelta | None,
    default: Callable[[], Ledger] | None = None,
) -> Callable[[], Guard]:
    """The adapters' shared argument handling: a ledger, a URL (opened on first use, in the
    worker process), or None for ``default()``. Validates ``record``/``lease`` at once, so a
    mistake fails when the task module is imported, not at the first delivery."""
    check_options(record=record, lease=lease)
    if ledger is None and default is None:
        raise InvalidValue("ledger", ledger, "give a Ledger or a database URL")
    if ledger is not None and not isinstance(ledger, (str, Ledger)):
        raise InvalidValue("ledger", ledger, f"{ledger!r} is not a Ledger or a database URL")
    made: list[Guard] = []
    lock = threading.Lock()

    def get() -> Guard:
        if made:
            return made[0]
        with lock:
            if made:
                return made[0]
            if isinstance(ledger, str):
                chosen = open_ledger(ledger)
            elif ledger is None:
                assert default is not None
                chosen = default()
            else:
                chosen = ledger
            made.append(Guard(chosen, record=record, lease=lease))
            return made[0]

    return get
