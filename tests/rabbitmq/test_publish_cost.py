"""What the direct publisher computes once per schedule instead of once per message
(goatbeat/submitters/_celery_publish.py), counted on an in-memory broker: no RabbitMQ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from goatbeat.submitters._celery_publish import Publisher

celery = pytest.importorskip("celery")
from celery.app import amqp as celery_amqp  # noqa: E402
from celery.utils import saferepr as celery_saferepr  # noqa: E402


@pytest.fixture
def app() -> Iterator[Any]:
    created = celery.Celery("cost", broker="memory://", set_as_current=False)
    created.conf.task_serializer = "json"
    yield created
    created.close()


def _publish_many(app: Any, n: int, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    publisher = Publisher(app)
    sent: list[Any] = []
    with app.producer_or_acquire() as producer:
        original = app.amqp.send_task_message

        def recording(producer: Any, name: str, message: Any, **options: Any) -> Any:
            sent.append(message)
            return original(producer, name, message, **options)

        app.amqp.send_task_message = recording
        for i in range(n):
            publisher.publish(
                producer,
                "proj.tasks.report",
                args=args,
                kwargs=kwargs,
                task_id=f"id-{i}",
                headers={},
                options={},
                expires=None,
                retry_policy={},
            )
    return sent


@pytest.mark.parametrize(
    "args, kwargs", [([], {}), ([1, "a"], {}), ([], {"n": 1})], ids=["both", "kwargs", "args"]
)
def test_an_empty_arguments_repr_is_celerys_computed_once(
    app: Any, monkeypatch: pytest.MonkeyPatch, args: list[Any], kwargs: dict[str, Any]
) -> None:
    calls: list[Any] = []
    original = celery_amqp.saferepr

    def counting(value: Any, *a: Any, **k: Any) -> Any:
        calls.append(value)
        return original(value, *a, **k)

    monkeypatch.setattr(celery_amqp, "saferepr", counting)
    monkeypatch.setattr(celery_saferepr, "saferepr", counting)
    sent = _publish_many(app, 20, args, kwargs)
    assert len(sent) == 20
    assert len(calls) <= 2, "once per schedule at most, not per message"
    for message in sent:
        # As send_task's: Celery makes empty arguments a tuple.
        assert message.headers["argsrepr"] == original(args or (), 1024)
        assert message.headers["kwargsrepr"] == original(kwargs, 1024)
