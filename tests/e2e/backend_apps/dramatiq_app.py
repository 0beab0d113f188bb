"""The Dramatiq broker and actors of the e2e tests: ``dramatiq tests.e2e.backend_apps.dramatiq_app``.

goatbeat's scheduler processes name this module as their broker (``broker=`` this module, as
for the ``dramatiq`` command), so they know the same actors and queues the workers do.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage

from tests.e2e.backend_apps._record import URL_ENV, record

broker = RedisBroker(url=os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0"))
# The key travels in the message options; an actor reads them through CurrentMessage.
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)
# A worker consumes only queues its broker declared; goatbeat may route an actor elsewhere.
broker.declare_queue("custom")


def _record(*args: Any, **kwargs: Any) -> None:
    message = CurrentMessage.get_current_message()
    assert message is not None
    options = message.options
    record(
        "dramatiq",
        args=list(args),
        kwargs=kwargs,
        actor=message.actor_name,
        message_id=message.message_id,
        key=options.get("goatbeat_idempotency_key"),
        scheduled_at=options.get("goatbeat_scheduled_at"),
        extra={k: v for k, v in options.items() if k.startswith("x-")},
        queue=message.queue_name,
        retries=options.get("retries", 0),
    )


@dramatiq.actor(actor_name="goatbeat_e2e_record", queue_name="default", max_retries=0)
def record_run(*args: Any, **kwargs: Any) -> None:
    _record(*args, **kwargs)


@dramatiq.actor(actor_name="goatbeat_e2e_elsewhere", queue_name="elsewhere", max_retries=0)
def record_elsewhere(*args: Any, **kwargs: Any) -> None:
    """An actor whose name and queue differ from its function's module path and "default"."""
    _record(*args, **kwargs)


@dramatiq.actor(actor_name="goatbeat_e2e_fail", queue_name="default", max_retries=0)
def fail_run(*args: Any, **kwargs: Any) -> None:
    """Records the attempt, then fails: a schedule's max_retries decides how often it retries."""
    _record(*args, **kwargs)
    raise RuntimeError("goatbeat e2e: this task always fails")
