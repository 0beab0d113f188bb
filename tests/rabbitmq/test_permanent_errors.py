"""Errors RabbitMQ raises that no retry can fix fail at once, on the message that caused them.

An unknown exchange (404 NOT_FOUND) and an exchange declared with another type (406
PRECONDITION_FAILED) close the publishing channel. The Celery submitter reports them as
:class:`~goatbeat.submitters.celery.BrokerRefused` (a PermanentSubmitError) naming the reply,
the exchange and the schedule, on the occurrence whose message the broker refused: with
publisher confirms that is the message being published; without them the close arrives after
later messages were written, and the round trip that ends each chunk finds it. The scheduler
then records the occurrence ``submit_failed`` at once (not missed, not submitted), and the next
occurrence of another schedule goes out on a fresh channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.model import ExecutionStatus, Occurrence, Routing, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from goatbeat.submitters.celery import BrokerRefused, CelerySubmitter

celery = pytest.importorskip("celery")
kombu = pytest.importorskip("kombu")
from kombu import Queue  # noqa: E402

pytestmark = [pytest.mark.rabbitmq, pytest.mark.timeout(120)]

NOWHERE = "goatbeat-nowhere"
CONFIRMS = pytest.mark.parametrize("confirm", [True, False], ids=["confirm_publish", "no confirms"])


def _occurrence(name: str, routing: Routing, n: int = 0) -> Occurrence:
    return Occurrence(
        execution_id=n,
        schedule_id=1,
        schedule_name=name,
        task="proj.tasks.report",
        args=(n,),
        kwargs={},
        routing=routing,
        scheduled_at=datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        idempotency_key=f"{name}:{n}",
        fencing_token=1,
    )


def _drain(url: str, queue: str) -> list[str]:
    ids = []
    with kombu.Connection(url) as conn:
        try:
            while (message := conn.default_channel.basic_get(queue, no_ack=True)) is not None:
                ids.append(message.headers["id"])
        except conn.channel_errors:  # no such queue
            pass
    return ids


def _app(url: str, confirm: bool) -> Any:
    app = celery.Celery("refused", broker=url, set_as_current=False)
    app.conf.task_serializer = "json"
    if confirm:
        app.conf.broker_transport_options = {"confirm_publish": True}
    return app


@pytest.fixture
def apps(amqp_url: str) -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for app in made:
        app.close()


def _submitter(apps: list[Any], url: str, confirm: bool, **options: Any) -> CelerySubmitter:
    app = _app(url, confirm)
    apps.append(app)
    return CelerySubmitter(app, **options)


def _declare_fine(url: str) -> None:
    """The queue the good messages go to, empty."""
    with kombu.Connection(url) as conn:
        Queue("fine")(conn.default_channel).declare()
        conn.default_channel.queue_purge("fine")


@CONFIRMS
def test_an_unknown_exchange_fails_at_once_naming_it(
    apps: list[Any], amqp_url: str, confirm: bool
) -> None:
    submitter = _submitter(apps, amqp_url, confirm)
    try:
        with pytest.raises(BrokerRefused) as caught:
            submitter.submit(_occurrence("nightly", Routing(exchange=NOWHERE, routing_key="x")))
    finally:
        submitter.close()
    refused = caught.value
    assert refused.reply_code == 404 and refused.exchange == NOWHERE
    assert refused.schedule == "nightly"
    message = str(refused)
    assert "NOT_FOUND" in message and f"'{NOWHERE}'" in message and "'nightly'" in message


@pytest.mark.parametrize("warm", [False, True], ids=["first chunk", "one write"])
@pytest.mark.parametrize("where", [0, 1, 2], ids=["first", "middle", "last"])
@CONFIRMS
def test_in_a_chunk_the_refusal_is_the_refused_messages_own(
    apps: list[Any], amqp_url: str, confirm: bool, where: int, warm: bool
) -> None:
    """Without confirms the broker's close arrives after the next message was written (and
    discarded by the broker): the refusal is still put on the message that caused it, and the
    one after it is sent again on the reopened channel, so it is reported submitted because
    it was delivered (read back from the queue)."""
    _declare_fine(amqp_url)
    submitter = _submitter(apps, amqp_url, confirm)
    fine = Routing(queue="fine")
    chunk = [_occurrence(f"fine{i}", fine) for i in range(3)]
    chunk.insert(where, _occurrence("refused", Routing(exchange=NOWHERE, routing_key="x")))
    try:
        if warm:
            # Connected: the chunk goes out in one socket write (one wait for its acks).
            assert submitter.submit_many([_occurrence("warm", fine)]) == ["warm:0"]
        first = submitter.submit_many(chunk)
        # The next chunk goes out on a fresh channel.
        second = submitter.submit_many([_occurrence("next", fine)])
    finally:
        submitter.close()
    refused = first.pop(where)
    assert isinstance(refused, BrokerRefused) and refused.schedule == "refused", refused
    assert first == ["fine0:0", "fine1:0", "fine2:0"]
    assert second == ["next:0"]
    # Exactly what was reported submitted reached the queue, once each.
    expected = ["fine0:0", "fine1:0", "fine2:0", "next:0"] + (["warm:0"] if warm else [])
    assert sorted(_drain(amqp_url, "fine")) == sorted(expected)


START = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _every_minute(name: str, routing: Routing) -> Schedule:
    return Schedule(
        name=name,
        task=f"proj.tasks.{name}",
        trigger=IntervalTrigger(60),
        routing=routing,
        misfire_grace=timedelta(seconds=600),
    )


@CONFIRMS
def test_the_scheduler_records_a_refused_occurrence_failed_and_sends_the_others(
    apps: list[Any], amqp_url: str, confirm: bool
) -> None:
    _declare_fine(amqp_url)
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish(
        [
            _every_minute("a-refused", Routing(exchange=NOWHERE, routing_key="x")),
            _every_minute("b-fine", Routing(queue="fine")),
        ]
    )
    submitter = _submitter(apps, amqp_url, confirm)
    settings = Settings(scheduler_id="s1", max_submit_retries=3)
    scheduler = Scheduler(store, submitter, settings=settings, clock=clock)
    try:
        scheduler.run_once()  # leadership
        clock.advance(60)
        scheduler.run_once()  # both due, in one chunk, the refused one first
        clock.advance(60)
        scheduler.run_once()  # the next occurrence of each
    finally:
        scheduler.close()
        submitter.close()
    refused = store.executions(name="a-refused", limit=10)
    fine = store.executions(name="b-fine", limit=10)
    assert len(refused) == 2 and len(fine) == 2
    for execution in refused:
        assert execution.status is ExecutionStatus.SUBMIT_FAILED, execution
        assert execution.attempts == 1  # at once, never retried
        assert execution.error is not None
        assert "NOT_FOUND" in execution.error and NOWHERE in execution.error
    assert store.get("a-refused").missed_count == 0
    assert [e.status for e in fine] == [ExecutionStatus.SUBMITTED] * 2
    assert sorted(_drain(amqp_url, "fine")) == sorted(e.idempotency_key for e in fine)
