"""``dramatiq tests.e2e.lost_apps.dramatiq_app``: an actor that hangs until its worker
process is killed (kill -9), with completion reports on."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from goatbeat.completion.dramatiq import report_completions
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.lost_apps._hang import hang as _hang

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)
report_completions(broker)


@dramatiq.actor(actor_name="lost_hang", max_retries=0)
def hang() -> None:
    _hang()
