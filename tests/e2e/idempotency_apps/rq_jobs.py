"""RQ job functions (the worker imports them by dotted path): a guarded one and a plain one.
The ledger here is a SQLite file: RQ forks a work horse per job, each opens its own."""

from __future__ import annotations

import os

from goatbeat.idempotency.rq import current_key, idempotent
from tests.e2e.backend_apps._record import record
from tests.e2e.idempotency_apps import LEDGER_ENV


@idempotent(os.environ.get(LEDGER_ENV, "sqlite:///unused.db"))
def guarded(n: int) -> None:
    record("rq-guarded", n=n, key=current_key())


def plain(n: int) -> None:
    record("rq-plain", n=n, key=current_key())
