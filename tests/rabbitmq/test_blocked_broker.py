"""A broker that blocks publishers (RabbitMQ's memory alarm) does not hold the scheduler.

With ``confirm_publish`` a blocked broker withholds the confirm; without, it stops reading the
socket. Either way the Celery submitter gives up on a publish after ``publish_timeout``, well
inside the lease's local deadline, drops the connection, logs ``submitter.publish_timeout``,
and reports the occurrence (and the rest of its chunk, untried) as retryable; once the alarm
clears the resubmission lands. Every key then reaches the queue, with the one the broker was
holding at most twice (the README's Guarantees, case 4).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import Occurrence, Routing
from goatbeat.submitters.celery import CelerySubmitter, PublishTimedOut
from tests.services import RabbitMQServer

celery = pytest.importorskip("celery")
kombu = pytest.importorskip("kombu")

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow, pytest.mark.timeout(120)]

LOCAL_DEADLINE = 20.0
"""The default lease's local deadline (lease_ttl 30 s - lease_renew_interval 10 s)."""


def _occurrence(i: int) -> Occurrence:
    return Occurrence(
        execution_id=i,
        schedule_id=1,
        schedule_name="blocked",
        task="proj.tasks.report",
        args=(i,),
        kwargs={},
        routing=Routing(queue="blocked"),
        scheduled_at=datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        idempotency_key=f"blocked:{i}",
        fencing_token=1,
    )


def _drain(url: str, queue: str) -> list[str]:
    ids = []
    with kombu.Connection(url) as conn:
        while (message := conn.default_channel.basic_get(queue, no_ack=True)) is not None:
            ids.append(message.headers["id"])
    return ids


@pytest.fixture
def alarm(rabbitmq: RabbitMQServer) -> Iterator[RabbitMQServer]:
    try:
        yield rabbitmq
    finally:
        rabbitmq.memory_alarm(False)


def _submit_within_deadline(submitter: CelerySubmitter, chunk: list[Occurrence]) -> list[Any]:
    """``submit_many`` from a thread; fails the test if it is still inside the broker call
    when the lease's local deadline would have passed."""
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.extend(submitter.submit_many(chunk)))
    thread.start()
    thread.join(LOCAL_DEADLINE)
    assert not thread.is_alive(), "the publish was still blocked at the lease's local deadline"
    return results


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm_publish", "no confirms"])
def test_a_publish_blocked_by_a_memory_alarm_gives_up_before_the_local_deadline(
    alarm: RabbitMQServer, amqp_url: str, confirm: bool, caplog: pytest.LogCaptureFixture
) -> None:
    app = celery.Celery("blocked", broker=amqp_url, set_as_current=False)
    app.conf.task_serializer = "json"
    if confirm:
        app.conf.broker_transport_options = {"confirm_publish": True}
    submitter = CelerySubmitter(app, publish_timeout=2.0)
    first = [_occurrence(0)]
    chunk = [_occurrence(i) for i in range(1, 4)]
    try:
        assert submitter.submit_many(first) == ["blocked:0"]  # the queue exists, connected
        alarm.memory_alarm(True)
        with caplog.at_level(logging.WARNING, logger="goatbeat"):
            results = _submit_within_deadline(submitter, chunk)
        if confirm:
            # The broker withholds the confirm: abandoned, the rest of the chunk not tried.
            assert isinstance(results[0], PublishTimedOut)
            assert all(isinstance(r, RetryableSubmitError) for r in results[1:])
            [logged] = [r for r in caplog.records if r.getMessage() == "submitter.publish_timeout"]
            assert logged.key == "blocked:1" and logged.timeout == 2.0
        else:
            # Without confirms the writes land in the socket's buffers, unread: reported sent.
            assert results == [o.idempotency_key for o in chunk]
        # The standby (another submitter, another connection) meets the same alarm.
        standby = CelerySubmitter(app, publish_timeout=2.0)
        try:
            others = _submit_within_deadline(standby, [_occurrence(9)])
        finally:
            standby.close()
        alarm.memory_alarm(False)
        retried = [o for o, r in zip(chunk, results, strict=True) if isinstance(r, Exception)]
        if isinstance(others[0], Exception):
            retried.append(_occurrence(9))
        assert submitter.submit_many(retried) == [o.idempotency_key for o in retried]
    finally:
        submitter.close()
        app.close()
    seen = Counter(_drain(amqp_url, "blocked"))
    keys = {f"blocked:{i}" for i in (0, 1, 2, 3, 9)}
    assert set(seen) == keys, seen  # nothing lost
    twice = {key for key, n in seen.items() if n > 1}
    # Only what a timed-out publish may have left with the broker comes twice (case 4).
    assert twice <= {"blocked:1", "blocked:9"}, seen
    assert max(seen.values()) <= 2, seen
