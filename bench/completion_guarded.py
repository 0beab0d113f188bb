"""The RQ job of bench/bench_completions.py under the idempotency guard."""

from __future__ import annotations

from bench.completion_jobs import DATABASE, done, rq_connection
from goatbeat.idempotency.rq import idempotent


@idempotent(DATABASE)
def guarded_noop() -> None:
    done(rq_connection())
