"""Which backend the Django router picks, and that it never invents a Dramatiq broker (#21).

- A plain string actor name (an admin schedule's task, no object declared in code) is looked
  up in the configured broker's actors, so it routes to Dramatiq.
- With no broker configured, the router does not fall back to ``dramatiq.get_broker()`` (which
  creates Dramatiq's default broker on localhost): the Dramatiq submitter refuses, naming the
  setting, and Dramatiq's global broker stays unset.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from goatbeat.core.errors import InvalidValue, PermanentSubmitError
from goatbeat.core.model import Occurrence, Routing, Schedule, idempotency_key
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.django.submitter import DjangoRoutingSubmitter

AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SETTING = "GOATBEAT['submitter_options']['dramatiq']['broker']"


@pytest.fixture
def no_global_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import dramatiq.broker

    monkeypatch.setattr(dramatiq.broker, "global_broker", None)
    yield
    assert dramatiq.broker.global_broker is None, "a Dramatiq broker was created behind our back"


@pytest.fixture
def stub_broker() -> Any:
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    broker = StubBroker()
    broker.emit_after("process_boot")

    def send_digest(user_id: int) -> None:
        return None

    dramatiq.actor(send_digest, broker=broker, actor_name="send_digest", queue_name="mail")
    yield broker
    broker.close()


def schedule(task: str) -> Schedule:
    return Schedule(name="digest", task=task, trigger=IntervalTrigger("1h"))


def test_a_plain_actor_name_routes_to_the_configured_brokers_dramatiq(
    stub_broker: Any, no_global_broker: None
) -> None:
    router = DjangoRoutingSubmitter(options={"dramatiq": {"broker": stub_broker}})
    try:
        assert router.backend_for("send_digest") == "dramatiq"
        router.validate(schedule("send_digest"))
        occurrence = Occurrence(
            execution_id=1,
            schedule_id=1,
            schedule_name="digest",
            task="send_digest",
            args=(7,),
            kwargs={},
            routing=Routing(),
            scheduled_at=AT,
            idempotency_key=idempotency_key("digest", AT),
        )
        assert router.submit(occurrence)
        (message,) = stub_broker.queues["mail"].queue
        del message
    finally:
        router.close()


def test_an_unknown_plain_name_still_cannot_be_routed(
    stub_broker: Any, no_global_broker: None
) -> None:
    router = DjangoRoutingSubmitter(options={"dramatiq": {"broker": stub_broker}})
    try:
        with pytest.raises(LookupError):
            router.backend_for("no_such_actor")
    finally:
        router.close()


def test_without_a_broker_the_dramatiq_backend_fails_naming_the_setting(
    no_global_broker: None,
) -> None:
    router = DjangoRoutingSubmitter(pinned="dramatiq")
    try:
        with pytest.raises(InvalidValue, match=r"broker") as caught:
            router.submitter_for("dramatiq")
        assert SETTING in str(caught.value)
        with pytest.raises(InvalidValue, match=r"broker"):
            router.validate(schedule("send_digest"))
        occurrence = Occurrence(
            execution_id=1,
            schedule_id=1,
            schedule_name="digest",
            task="send_digest",
            args=(),
            kwargs={},
            routing=Routing(),
            scheduled_at=AT,
            idempotency_key=idempotency_key("digest", AT),
        )
        # A configuration error is not an outage: retrying cannot help.
        with pytest.raises(PermanentSubmitError, match=r"broker"):
            router.submit(occurrence)
    finally:
        router.close()
