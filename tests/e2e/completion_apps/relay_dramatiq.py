"""``dramatiq tests.e2e.completion_apps.relay_dramatiq``: the probe of relay_jobs.py as a
Dramatiq actor, with completion reports on."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from goatbeat.completion.dramatiq import report_completions
from tests.e2e.backend_apps._record import URL_ENV
from tests.e2e.completion_apps import relay_jobs

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)
report_completions(broker)  # GOATBEAT_DATABASE names goatbeat's database


@dramatiq.actor(actor_name="relay_probe", max_retries=0)
def probe() -> None:
    relay_jobs.probe()
