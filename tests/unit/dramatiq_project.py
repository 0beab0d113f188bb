"""A Dramatiq project the unit tests load by name, as ``dramatiq tests.unit.dramatiq_project:broker``
would: a stub broker (no server), two actors and one queue declared by hand. It never calls
``dramatiq.set_broker``, so importing it leaves Dramatiq's global broker alone."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.stub import StubBroker

broker = StubBroker()
# What a project does so that its workers also consume a queue no actor is declared on.
broker.declare_queue("custom")


@dramatiq.actor(broker=broker, actor_name="tick", queue_name="ticks", max_retries=0)
def tick(n: int = 0) -> None:
    """An actor whose name and queue are not its function's."""


@dramatiq.actor(broker=broker)
def send_report() -> None:
    """An actor with Dramatiq's defaults: named after its function, on queue "default"."""


not_a_broker = "redis://127.0.0.1:1"
