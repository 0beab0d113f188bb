"""``dramatiq tests.e2e.lost_apps.dramatiq_app``: actors that hang until their worker process
is killed (kill -9), with completion reports on, and the idempotency guard for
``lost_guarded``.

``GB_TEST_DRAMATIQ_HEARTBEAT_MS`` shortens the broker's heartbeat timeout (and makes every
command run its maintenance), so a message a killed worker held is redelivered to another
worker within seconds rather than a minute."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker

from goatbeat.completion import DATABASE_ENV
from goatbeat.completion.dramatiq import report_completions
from goatbeat.idempotency.dramatiq import Idempotency
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.lost_apps._hang import hang as _hang

HEARTBEAT_ENV = "GB_TEST_DRAMATIQ_HEARTBEAT_MS"

_fast = os.environ.get(HEARTBEAT_ENV)
broker = RedisBroker(
    url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"),
    **({"heartbeat_timeout": int(_fast), "maintenance_chance": MAINTENANCE_SCALE} if _fast else {}),
)
dramatiq.set_broker(broker)
report_completions(broker)
if os.environ.get(DATABASE_ENV):
    broker.add_middleware(Idempotency(os.environ[DATABASE_ENV]))


@dramatiq.actor(actor_name="lost_hang", max_retries=0, goatbeat_idempotent=False)
def hang() -> None:
    _hang()


@dramatiq.actor(actor_name="lost_guarded", max_retries=0)
def guarded() -> None:
    _hang()  # the first delivery hangs and is killed; the redelivery is skipped by the guard
