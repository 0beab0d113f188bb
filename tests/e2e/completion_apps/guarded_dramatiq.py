"""``dramatiq tests.e2e.completion_apps.guarded_dramatiq``: guarded.py's probe as a Dramatiq
actor under the idempotency middleware, with completion reports on."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from goatbeat.completion.dramatiq import report_completions
from goatbeat.idempotency.dramatiq import Idempotency
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.completion_apps import guarded

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)
broker.add_middleware(Idempotency(guarded.LEDGER))
report_completions(broker)  # GOATBEAT_DATABASE names goatbeat's database


@dramatiq.actor(actor_name="guarded_probe", max_retries=0)
def probe() -> None:
    guarded.body()
