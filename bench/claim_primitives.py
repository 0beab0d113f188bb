"""Where a PostgreSQL claim's time goes: ``PostgresStore.claim_due(record=...)`` in a loop over
20,000 due interval schedules (batches of 500, the outcomes of each batch written by the next
claim, as the scheduler does), with every ``PostgresTx`` primitive the claim calls, the Python
steps around them (``decode_due``, ``plan_batch``, ``occurrence_for``) and the transaction's
commit timed. No submitter: the least the claim path costs a scheduler, per batch.

``python -m bench.claim_primitives [--rounds N]``: a durable PostgreSQL of its own
(tests/services.py, as the other benches), a fresh database each round. Prints the rate and, per
step, the total, the calls and the time per call. A diagnostic, not a target: docs/benchmarks.md
(issue #29) has the figures and what they mean.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from bench._common import Servers, due_database

N = 20_000
BATCH = 500
_PRIMITIVES = ("check_lease", "due", "advance", "insert_executions", "started_runs")
_STEPS = ("decode_due", "plan_batch", "occurrence_for")

totals: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - began
            calls[name] += 1

    return timed


def _instrument() -> None:
    import goatbeat.stores.store as store_module
    from goatbeat.stores.dialects.postgres import PostgresDialect
    from goatbeat.stores.dialects.postgres_tx import PostgresTx

    for name in _PRIMITIVES:
        setattr(PostgresTx, name, _timed(name, getattr(PostgresTx, name)))
    for name in _STEPS:
        setattr(store_module, name, _timed(name, getattr(store_module, name)))
    opened = PostgresDialect.transaction

    @contextlib.contextmanager
    def transaction(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        manager = opened(self, *args, **kwargs)
        tx = manager.__enter__()
        try:
            yield tx
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
        else:
            began = time.perf_counter()
            manager.__exit__(None, None, None)
            totals["commit"] += time.perf_counter() - began
            calls["commit"] += 1

    PostgresDialect.transaction = transaction  # type: ignore[method-assign]


def _round(servers: Servers) -> None:
    from goatbeat.core.model import SubmitOutcome
    from goatbeat.stores.postgres import PostgresStore

    with due_database(servers, "claimsteps", N) as dsn:
        store = PostgresStore(dsn)
        store.now()
        grant = store.acquire_lease("scheduler", "bench-steps", timedelta(minutes=10))
        assert grant is not None
        totals.clear()
        calls.clear()
        claimed, unrecorded = 0, []
        began = time.perf_counter()
        while claimed < N:
            result = store.claim_due(
                grant, scheduler_id="bench-steps", limit=BATCH, record=unrecorded
            )
            if not result.occurrences:
                break
            unrecorded = [
                SubmitOutcome(
                    execution_id=o.execution_id,
                    idempotency_key=o.idempotency_key,
                    ok=True,
                    backend_task_id=o.idempotency_key,
                )
                for o in result.occurrences
            ]
            claimed += len(result.occurrences)
        store.record_outcomes(unrecorded)
        seconds = time.perf_counter() - began
        batches = max(1, calls["due"])
        print(f"{claimed} claimed in {seconds:.2f} s: {claimed / seconds:,.0f} claims/s, "
              f"{seconds / batches * 1000:.1f} ms a batch of {BATCH}")  # fmt: skip
        for name, total in totals.most_common():
            print(f"  {name:18s} {total * 1000:8.1f} ms  {calls[name]:6d} calls  "
                  f"{total / batches * 1000:6.2f} ms a batch")  # fmt: skip
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    _instrument()
    servers = Servers().start()
    try:
        for _ in range(args.rounds):
            _round(servers)
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
