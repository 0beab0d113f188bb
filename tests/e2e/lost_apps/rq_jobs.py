"""An RQ job that hangs until its work horse is killed (kill -9)."""

from __future__ import annotations

import os

from goatbeat.completion import DATABASE_ENV
from goatbeat.idempotency.rq import idempotent
from tests.e2e.lost_apps._hang import hang as _hang


def hang() -> None:
    _hang()


@idempotent(os.environ.get(DATABASE_ENV, "sqlite:///unused.db"))
def guarded() -> None:
    _hang()  # the first delivery hangs and is killed; RQ's retry is skipped by the guard
