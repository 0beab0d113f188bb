"""``dramatiq tests.e2e.completion_apps.dramatiq_app``: three actors that succeed, fail once
and are retried, and always fail."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

from goatbeat.completion.dramatiq import report_completions
from tests.e2e.backend_apps._record import URL_ENV

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)
report_completions(broker)  # the one line: GOATBEAT_DATABASE names goatbeat's database


@dramatiq.actor(actor_name="completions_ok", max_retries=0)
def ok() -> None:
    return None


@dramatiq.actor(actor_name="completions_flaky", max_retries=1, min_backoff=10, max_backoff=20)
def flaky() -> None:
    message = CurrentMessage.get_current_message()
    assert message is not None
    if not message.options.get("retries"):
        raise ConnectionError("first attempt lost the connection")


@dramatiq.actor(actor_name="completions_broken", max_retries=0)
def broken() -> None:
    raise RuntimeError("goatbeat e2e: this task always fails")
