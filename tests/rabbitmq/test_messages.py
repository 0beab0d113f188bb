"""On RabbitMQ, goatbeat's messages are stock celery beat's, read back from the broker.

Each case sends one occurrence three ways to the throwaway RabbitMQ node: through the Celery
submitter's direct publisher, through ``app.send_task`` (the publisher told to step aside) and
through celery beat's own ``Scheduler.apply_async`` for the same entry, then reads the three
messages back with ``basic_get`` and compares them field by field: headers, properties and
where the broker routed them (exchange, routing key, queue). What may differ: the delivery tag,
relative expiries (within a second), and goatbeat's own two headers, which beat never sends.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.errors import PermanentSubmitError
from goatbeat.core.model import Occurrence, Routing
from goatbeat.submitters.celery import BrokerRefused, CelerySubmitter
from goatbeat.submitters.keys import RESERVED_HEADERS

celery = pytest.importorskip("celery")
kombu = pytest.importorskip("kombu")
from celery.beat import ScheduleEntry, Scheduler  # noqa: E402
from kombu import Exchange, Queue  # noqa: E402

pytestmark = [pytest.mark.rabbitmq, pytest.mark.timeout(120)]

KEY = "nightly:2026-12-01T08:00:00Z"


def _occurrence(task: str, routing: Routing, **fields: Any) -> Occurrence:
    values: dict[str, Any] = {
        "execution_id": 7,
        "schedule_id": 3,
        "schedule_name": "nightly",
        "task": task,
        "args": (1, "two", [3, 4]),
        "kwargs": {"tenant": "acme"},
        "routing": routing,
        "scheduled_at": datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        "idempotency_key": KEY,
        "fencing_token": 1,
    }
    values.update(fields)
    return Occurrence(**values)


def _entry_options(routing: Routing) -> dict[str, Any]:
    options: dict[str, Any] = {"task_id": KEY}
    for name in ("queue", "exchange", "routing_key", "priority", "expires"):
        if getattr(routing, name) is not None:
            options[name] = getattr(routing, name)
    if routing.headers:
        options["headers"] = dict(routing.headers)
    return options


def _empty(url: str, queue: str) -> None:
    """Empty ``queue`` if it exists: what an earlier test left is not this test's."""
    with kombu.Connection(url) as conn:
        try:
            conn.default_channel.queue_purge(queue)
        except conn.channel_errors:  # no such queue yet
            pass


def _read(url: str, queue: str) -> dict[str, Any]:
    with kombu.Connection(url) as conn:
        message = conn.default_channel.basic_get(queue, no_ack=True)
        assert message is not None, f"no message in {queue!r}"
        assert conn.default_channel.basic_get(queue, no_ack=True) is None, "more than one"
    properties = dict(message.properties)
    headers = dict(properties.pop("application_headers", {}))
    properties.pop("delivery_tag", None)
    return {
        "headers": headers,
        "properties": properties,
        "exchange": message.delivery_info["exchange"],
        "routing_key": message.delivery_info["routing_key"],
        "body": json.loads(message.body),
    }


def _close(x: Any, y: Any, delta: float) -> bool:
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, str) and "T" in x:
        return abs(datetime.fromisoformat(x) - datetime.fromisoformat(y)) < timedelta(seconds=1)
    return abs(float(x) - float(y)) < delta


def _assert_same(ours: dict[str, Any], beats: dict[str, Any]) -> None:
    ours = json.loads(json.dumps(ours, default=str))
    beats = json.loads(json.dumps(beats, default=str))
    for key in RESERVED_HEADERS:
        ours["headers"].pop(key)
    assert _close(ours["headers"].pop("expires", None), beats["headers"].pop("expires", None), 0)
    x = ours["properties"].pop("expiration", None)
    assert _close(x, beats["properties"].pop("expiration", None), 1000)
    assert ours == beats


def _three_ways(app: Any, url: str, task: str, routing: Routing, queue: str) -> dict[str, Any]:
    """The message of each way; asserts they are the same and returns goatbeat's."""
    _empty(url, queue)
    occurrence = _occurrence(task, routing)
    direct = CelerySubmitter(app)
    assert direct._publisher.usable()
    fallback = CelerySubmitter(app)
    fallback._publisher.usable = lambda: False  # type: ignore[method-assign]
    try:
        assert direct.submit(occurrence) == KEY
        first = _read(url, queue)
        assert fallback.submit(occurrence) == KEY
        second = _read(url, queue)
    finally:
        direct.close()
        fallback.close()
    scheduler = Scheduler(app, lazy=True)
    entry = ScheduleEntry(
        name="nightly",
        task=task,
        schedule=60,
        args=(1, "two", [3, 4]),
        kwargs={"tenant": "acme"},
        options=_entry_options(routing),
        app=app,
    )
    with app.producer_or_acquire() as producer:
        scheduler.apply_async(entry, producer=producer, advance=False)
    beats = _read(url, queue)
    _assert_same(first, beats)
    _assert_same(second, beats)
    return first


@pytest.fixture
def app(amqp_url: str) -> Iterator[Any]:
    created = celery.Celery("parity", broker=amqp_url, set_as_current=False)
    created.conf.task_serializer = "json"
    yield created
    created.close()


def _register(app: Any, name: str = "proj.tasks.registered", **options: Any) -> str:
    @app.task(name=name, shared=False, **options)
    def registered(*args: Any, **kwargs: Any) -> None:  # pragma: no cover - never run here
        pass

    app.finalize()
    return name


def _declare(app: Any) -> None:
    """Declare the app's queues (and their exchanges and bindings), as a worker would."""
    with app.connection_for_write() as conn:
        for queue in app.amqp.queues.values():
            queue(conn.default_channel).declare()


Setup = Callable[[Any], tuple[str, Routing, str]]


def _default(app: Any) -> tuple[str, Routing, str]:
    return "proj.tasks.report", Routing(), "celery"


def _named_queue(app: Any) -> tuple[str, Routing, str]:
    return "proj.tasks.report", Routing(queue="emails"), "emails"


def _registered_named_queue(app: Any) -> tuple[str, Routing, str]:
    return _register(app), Routing(queue="emails"), "emails"


def _registered_options(app: Any) -> tuple[str, Routing, str]:
    name = _register(app, expires=60, time_limit=50, soft_time_limit=40, ignore_result=True)
    return name, Routing(), "celery"


def _direct_exchange(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_queues = [
        Queue("reports", Exchange("reports", type="direct"), routing_key="reports.daily"),
        Queue("celery"),
    ]
    _declare(app)
    return "proj.tasks.report", Routing(exchange="reports", routing_key="reports.daily"), "reports"


def _topic_exchange(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_queues = [
        Queue("billing", Exchange("jobs", type="topic"), routing_key="billing.#"),
        Queue("celery"),
    ]
    _declare(app)
    return "proj.tasks.report", Routing(exchange="jobs", routing_key="billing.monthly"), "billing"


def _priority_queue(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_queues = [Queue("urgent", queue_arguments={"x-max-priority": 10})]
    _declare(app)
    return "proj.tasks.report", Routing(queue="urgent", priority=7), "urgent"


def _expires(app: Any) -> tuple[str, Routing, str]:
    return "proj.tasks.report", Routing(expires=30.0, headers={"x-tenant": "acme"}), "celery"


def _task_routes(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_routes = {"proj.tasks.*": {"queue": "routed"}}
    return "proj.tasks.report", Routing(), "routed"


def _quorum_queue(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_queues = [Queue("quorum", queue_arguments={"x-queue-type": "quorum"})]
    app.conf.task_default_queue = "quorum"
    return "proj.tasks.report", Routing(), "quorum"


def _no_missing_queues(app: Any) -> tuple[str, Routing, str]:
    app.conf.task_queues = [Queue("known"), Queue("celery")]
    app.conf.task_create_missing_queues = False
    return _register(app), Routing(queue="known"), "known"


CASES: dict[str, Setup] = {
    "default queue": _default,
    "named queue": _named_queue,
    "registered task, named queue": _registered_named_queue,
    "registered task's options": _registered_options,
    "direct exchange, routing key": _direct_exchange,
    "topic exchange, routing key": _topic_exchange,
    "priority on an x-max-priority queue": _priority_queue,
    "expires and headers": _expires,
    "task_routes": _task_routes,
    "quorum queue": _quorum_queue,
    "task_create_missing_queues off, known queue": _no_missing_queues,
}


@pytest.mark.parametrize("case", list(CASES))
def test_messages_equal_stock_beats(app: Any, amqp_url: str, case: str) -> None:
    task, routing, queue = CASES[case](app)
    message = _three_ways(app, amqp_url, task, routing, queue)
    assert message["headers"]["celery_beat_task"] is True
    assert message["headers"]["id"] == KEY
    assert message["headers"]["goatbeat_idempotency_key"] == KEY
    assert message["body"][0] == [1, "two", [3, 4]]


def test_a_registered_tasks_ignore_result_and_unset_priority_are_beats(
    app: Any, amqp_url: str
) -> None:
    name = _register(app)
    message = _three_ways(app, amqp_url, name, Routing(queue="emails"), "emails")
    assert message["headers"]["ignore_result"] is False
    assert "priority" not in message["properties"]


def test_a_router_function_is_followed_as_beat_follows_it(app: Any, amqp_url: str) -> None:
    def by_tenant(name: str, args: Any, kwargs: Any, options: Any, **_: Any) -> Any:
        return {"queue": f"tenant-{kwargs['tenant']}"}

    app.conf.task_routes = (by_tenant,)
    occurrence = _occurrence("proj.tasks.report", Routing())
    submitter = CelerySubmitter(app)
    try:
        assert not submitter._publisher.usable()
        _empty(amqp_url, "tenant-acme")
        submitter.submit(occurrence)
    finally:
        submitter.close()
    assert _read(amqp_url, "tenant-acme")["headers"]["celery_beat_task"] is True


def test_the_rpc_reply_queue_is_declared_as_send_task_declares_it(amqp_url: str) -> None:
    app = celery.Celery("rpc", broker=amqp_url, backend="rpc://", set_as_current=False)
    submitter = CelerySubmitter(app)
    _empty(amqp_url, "celery")
    try:
        submitter.submit(_occurrence("proj.tasks.report", Routing()))
        with kombu.Connection(amqp_url) as conn:
            # passive: fails unless the queue exists
            name, _, _ = conn.default_channel.queue_declare(app.thread_oid, passive=True)
        assert name == app.thread_oid
        assert _read(amqp_url, "celery")["properties"]["reply_to"] == app.thread_oid
    finally:
        submitter.close()
        app.close()


@pytest.mark.parametrize("direct", [True, False])
def test_a_queue_missing_from_task_queues_is_refused_at_publish(
    app: Any, amqp_url: str, direct: bool
) -> None:
    app.conf.task_queues = [Queue("celery")]
    app.conf.task_create_missing_queues = False
    submitter = CelerySubmitter(app)
    if not direct:
        submitter._publisher.usable = lambda: False  # type: ignore[method-assign]
    try:
        with pytest.raises(PermanentSubmitError) as caught:
            submitter.submit(_occurrence("proj.tasks.report", Routing(queue="nowhere")))
        [result] = submitter.submit_many(
            [_occurrence("proj.tasks.report", Routing(queue="nowhere"))]
        )
    finally:
        submitter.close()
    message = str(caught.value)
    assert "'nowhere'" in message and "'nightly'" in message and "task_queues" in message
    assert isinstance(result, PermanentSubmitError)


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm_publish", "no confirms"])
def test_an_exchange_of_another_type_fails_at_once_naming_precondition_failed(
    app: Any, amqp_url: str, confirm: bool
) -> None:
    """The workers declared ``mismatch`` as a topic exchange; the scheduler's app says direct:
    RabbitMQ refuses the declaration (406 PRECONDITION_FAILED), which no retry would pass:
    goatbeat reports it at once (BrokerRefused, a PermanentSubmitError) with the broker's
    text, the exchange and the schedule (tests/rabbitmq/test_permanent_errors.py has the
    rest)."""
    with kombu.Connection(amqp_url) as conn:
        Exchange("mismatch", type="topic")(conn.default_channel).declare()
    app.conf.task_queues = [Queue("mismatch", Exchange("mismatch", type="direct"))]
    if confirm:
        app.conf.broker_transport_options = {"confirm_publish": True}
    submitter = CelerySubmitter(app)
    try:
        with pytest.raises(BrokerRefused) as caught:
            submitter.submit(_occurrence("proj.tasks.report", Routing(queue="mismatch")))
    finally:
        submitter.close()
    refused = caught.value
    assert refused.reply_code == 406 and refused.exchange == "mismatch"
    assert refused.schedule == "nightly"
    message = str(refused)
    assert "PRECONDITION_FAILED" in message and "'mismatch'" in message and "'nightly'" in message


def _publishes(writes: list[bytes]) -> list[bytes]:
    """The ``basic.publish`` frames (method, header, body) in what was written, in order."""
    stream = b"".join(writes)
    frames, offset = [], 0
    while offset < len(stream):
        kind, _, size = struct.unpack_from(">BHI", stream, offset)
        frames.append((kind, stream[offset : offset + 8 + size]))
        offset += 8 + size
    out, taking = [], False
    for kind, frame in frames:
        if kind == 1:
            taking = frame[7:11] == struct.pack(">HH", 60, 40)
        if taking:
            out.append(frame)
    return out


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm_publish", "no confirms"])
def test_a_chunk_in_one_socket_write_is_the_bytes_kombu_writes(
    app: Any, amqp_url: str, confirm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connected submitter writes a chunk's messages in one socket write (and with confirms
    waits once for all the acks); the frames are byte for byte what kombu and py-amqp write
    publishing them one by one (``batch_publish=False``)."""
    import amqp.transport

    writes: list[bytes] = []
    original = amqp.transport._AbstractTransport.write

    def recording(self: Any, data: Any) -> None:
        writes.append(bytes(data))
        original(self, data)

    monkeypatch.setattr(amqp.transport._AbstractTransport, "write", recording)
    if confirm:
        app.conf.broker_transport_options = {"confirm_publish": True}
    app.conf.task_queues = [Queue("celery"), Queue("emails"), Queue("urgent", max_priority=10)]
    chunk = [
        _occurrence("proj.tasks.report", Routing(), idempotency_key=f"{KEY}:0"),
        _occurrence("proj.tasks.report", Routing(queue="emails"), idempotency_key=f"{KEY}:1"),
        _occurrence(
            "proj.tasks.report",
            Routing(queue="urgent", priority=7, headers={"x-tenant": "acme"}),
            idempotency_key=f"{KEY}:2",
            kwargs={"tenant": "acme", "n": [1, 2.5, None, True]},
        ),
    ]
    ensured: list[Any] = []
    original_ensure = kombu.Connection.ensure

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        ensured.append(args[1])
        return original_ensure(self, *args, **kwargs)

    monkeypatch.setattr(kombu.Connection, "ensure", counting)
    frames = {}
    for framed in (False, True):
        submitter = CelerySubmitter(app, batch_publish=framed)
        try:
            # The first chunk connects (and declares); the second is the one compared.
            assert submitter.submit_many(chunk) == [o.idempotency_key for o in chunk]
            writes.clear()
            ensured.clear()
            assert submitter.submit_many(chunk) == [o.idempotency_key for o in chunk]
        finally:
            submitter.close()
        frames[framed] = _publishes(writes)
        # Framed, every queue declared, no message goes through kombu's retry wrapper (a
        # buffer append has nothing to retry); one by one, each does.
        publishes = [f for f in ensured if getattr(f, "__name__", "") == "_publish"]
        assert len(publishes) == (0 if framed else 3)
        carrying = [w for w in writes if _publishes([w])]
        assert len(carrying) == (1 if framed else 3), "one write for the chunk, or one each"
    assert len(frames[True]) == 3 * 3  # method, header, body, for each
    assert frames[True] == frames[False]
    for queue in ("celery", "emails", "urgent"):
        _empty(amqp_url, queue)
