"""``dramatiq tests.e2e.idempotency_apps.dramatiq_app``: the middleware guards every goatbeat
message, except for the actor that opts out (the control)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

from goatbeat.idempotency.dramatiq import Idempotency
from tests.e2e.backend_apps._record import URL_ENV, record
from tests.e2e.idempotency_apps import LEDGER_ENV

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
broker.add_middleware(CurrentMessage())
broker.add_middleware(Idempotency(os.environ.get(LEDGER_ENV, "sqlite:///unused.db")))
dramatiq.set_broker(broker)


def _key() -> str | None:
    message = CurrentMessage.get_current_message()
    return None if message is None else message.options.get("goatbeat_idempotency_key")


@dramatiq.actor(actor_name="idem_guarded", max_retries=0)
def guarded(n: int) -> None:
    record("dramatiq-guarded", n=n, key=_key())


@dramatiq.actor(actor_name="idem_plain", max_retries=0, goatbeat_idempotent=False)
def plain(n: int) -> None:
    record("dramatiq-plain", n=n, key=_key())
