"""The guarded probe of tests/e2e/test_guard_reporter.py, for every backend: an idempotency
guard whose ledger notes each statement it runs on the task's own path (``pid name`` lines in
the notes file), on goatbeat's database (``GOATBEAT_DATABASE``, the reporter's too)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from goatbeat.completion import DATABASE_ENV
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.idempotency.rq import idempotent
from tests.e2e.completion_apps.relay_jobs import NOTES_ENV


class NotingLedger(PostgresLedger):
    def _fetch(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with open(os.environ[NOTES_ENV], "a") as notes:
            notes.write(f"{os.getpid()} {name}\n")
        return super()._fetch(name, params)


LEDGER = NotingLedger(os.environ.get(DATABASE_ENV, "postgresql://unused"))


def body() -> None:
    with open(os.environ[NOTES_ENV], "a") as notes:
        notes.write(f"{os.getpid()} body\n")


@idempotent(LEDGER)
def probe() -> None:
    """The RQ job."""
    body()
