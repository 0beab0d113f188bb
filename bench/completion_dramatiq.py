"""``dramatiq bench.completion_dramatiq``: the no-op actor of bench/bench_completions.py, with
completion reports when ``GB_BENCH_SETUP`` is ``reports`` or ``guard`` (and the idempotency
middleware for ``guard``)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.completion_jobs import DATABASE, REDIS_ENV, SETUP_ENV, done

broker = RedisBroker(url=os.environ.get(REDIS_ENV, "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)
_setup = os.environ.get(SETUP_ENV, "plain")
if _setup == "guard":
    from goatbeat.idempotency.dramatiq import Idempotency

    broker.add_middleware(Idempotency(DATABASE))
if _setup != "plain":
    from goatbeat.completion.dramatiq import report_completions

    report_completions(broker)


@dramatiq.actor(actor_name="bench_noop", max_retries=0)
def noop() -> None:
    done()
