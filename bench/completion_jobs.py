"""The jobs of bench/bench_completions.py: a no-op, and the same under the idempotency guard."""

from __future__ import annotations

import os

from goatbeat.idempotency.rq import idempotent


def noop() -> None:
    return None


@idempotent(os.environ.get("GOATBEAT_DATABASE", "sqlite:///unused.db"))
def guarded_noop() -> None:
    return None
