"""The Celery submitter's direct publisher sends exactly the messages ``send_task`` sends.

Each case publishes one occurrence twice to the throwaway Redis, once through the direct
publisher and once through ``app.send_task`` (the publisher told to step aside), reads both
messages back from the broker and compares them field by field (the random delivery tag aside;
relative expiries within a second). No broker and no Celery internals are mocked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from goatbeat.core.model import Occurrence, Routing
from goatbeat.submitters.celery import CelerySubmitter

celery = pytest.importorskip("celery")
kombu = pytest.importorskip("kombu")

SCHEDULED_AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _occurrence(task: str, routing: Routing | None = None, **fields: Any) -> Occurrence:
    values: dict[str, Any] = {
        "execution_id": 7,
        "schedule_id": 3,
        "schedule_name": "nightly",
        "task": task,
        "args": (1, "two", [3, 4]),
        "kwargs": {"tenant": "acme", "deep": {"a": [1, 2]}},
        "routing": routing or Routing(),
        "scheduled_at": SCHEDULED_AT,
        "idempotency_key": "nightly:2026-12-01T08:00:00Z",
        "fencing_token": 1,
    }
    values.update(fields)
    return Occurrence(**values)


def _messages(client: redis.Redis) -> dict[str, list[dict[str, Any]]]:
    """Every message waiting in a Redis list, by list; the lists are emptied."""
    found: dict[str, list[dict[str, Any]]] = {}
    for key in client.keys("*"):
        if client.type(key) != b"list":
            continue
        items = client.lrange(key, 0, -1)
        client.delete(key)
        found[key.decode()] = [json.loads(item) for item in reversed(items)]
    return found


def _normal(message: dict[str, Any]) -> dict[str, Any]:
    """A message with what legitimately differs between two sends taken out."""
    out = json.loads(json.dumps(message))
    out["properties"].pop("delivery_tag", None)
    expiration = out["properties"].pop("expiration", None)
    out["properties"]["expiration_set"] = expiration is not None
    expires = out["headers"].pop("expires", None)
    out["headers"]["expires_set"] = expires is not None
    out["_expires"] = expires
    out["_expiration"] = expiration
    out["_body"] = json.loads(base64.b64decode(out.pop("body")))
    return out


def _both(
    app: Any, occurrence: Occurrence, redis_url: str, **options: Any
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    direct = CelerySubmitter(app, **options)
    assert direct._publisher.usable(), "the direct publisher should be used for this app"
    calls: list[str] = []
    original = app.send_task

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("send_task")
        return original(*args, **kwargs)

    app.send_task = counting
    reference = CelerySubmitter(app, **options)
    try:
        assert direct.submit(occurrence) == occurrence.idempotency_key
        assert calls == [], "the direct publisher fell back to send_task"
        first = _messages(client)
        reference._publisher.usable = lambda: False  # type: ignore[method-assign]
        assert reference.submit(occurrence) == occurrence.idempotency_key
        assert calls == ["send_task"]
        second = _messages(client)
    finally:
        del app.send_task
        direct.close()
        reference.close()
        client.close()
    return first, second


def _assert_same(
    first: dict[str, list[dict[str, Any]]], second: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    assert sorted(first) == sorted(second) and len(first) == 1, (first, second)
    (queue,) = first
    assert len(first[queue]) == len(second[queue]) == 1
    a, b = _normal(first[queue][0]), _normal(second[queue][0])
    for key in ("_expires", "_expiration"):
        x, y = a.pop(key), b.pop(key)
        if x is None or y is None:
            assert x is None and y is None, (key, x, y)
        elif key == "_expires":  # an ISO instant, computed from "now" at each send
            assert abs(datetime.fromisoformat(x) - datetime.fromisoformat(y)) < timedelta(seconds=1)
        else:  # kombu's expiration: milliseconds, as text
            assert abs(float(x) - float(y)) < 1000
    assert a == b
    a["queue"] = queue
    return a


@pytest.fixture
def app(redis_url: str) -> Iterator[Any]:
    created = celery.Celery("publish", broker=redis_url, set_as_current=False)
    created.conf.task_serializer = "json"
    yield created
    created.close()


CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "plain": ({}, {}),
    "queue": ({"queue": "emails"}, {}),
    "priority": ({"priority": 5}, {}),
    "headers": ({"headers": {"x-tenant": "acme", "trace": {"id": 1}}}, {}),
    "expires from submission": ({"expires": 30.0}, {}),
    "expires from the instant": ({"expires": 3600.0 * 24 * 365 * 10}, {"scheduled": True}),
}
# Arguments whose argsrepr/kwargsrepr headers goatbeat writes itself (plain values) and others
# it leaves to Celery's saferepr (nested, quoted, escaped, too long): the same either way.
ARGUMENTS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "none": ((), {}),
    "plain": ((7, -1.5, True, None, "two words é漢", 10**30), {"when": "daily", "n": 3}),
    "nested": ((1, "two", [3, 4]), {"opts": {"a": [1]}}),
    "quotes": (("it's", 'say "hi"'), {"path": "C:\\temp"}),
    "control characters": (("line\nbreak", "tab\there"), {"k": "\r"}),
    "long": (("x" * 2000,), {"y": "z" * 2000}),
    "odd keys": ((), {"with space": 1, "naïve": None}),
    "floats": ((float("inf"), -0.0, 1e300, 0.1), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_direct_messages_equal_send_task(app: Any, redis_url: str, case: str) -> None:
    routing, extra = CASES[case]
    options = {"expires_from": "scheduled"} if extra.get("scheduled") else {}
    occurrence = _occurrence("proj.tasks.report", Routing(**routing))
    message = _assert_same(*_both(app, occurrence, redis_url, **options))
    assert message["headers"]["task"] == "proj.tasks.report"
    assert message["headers"]["id"] == occurrence.idempotency_key
    assert message["headers"]["goatbeat_idempotency_key"] == occurrence.idempotency_key
    assert message["_body"][0] == [1, "two", [3, 4]]
    if "queue" in routing:
        assert message["queue"] == "emails"


def test_task_routes_and_queues_are_followed(app: Any, redis_url: str) -> None:
    from kombu import Exchange, Queue

    app.conf.task_queues = [
        Queue("reports", Exchange("reports", type="direct"), routing_key="reports.daily"),
        Queue("celery"),
    ]
    app.conf.task_routes = {"proj.tasks.*": {"queue": "reports"}}
    message = _assert_same(*_both(app, _occurrence("proj.tasks.report"), redis_url))
    assert message["queue"] == "reports"
    # The schedule's own queue wins over the route, as with send_task.
    routing = Routing(queue="celery")
    message = _assert_same(*_both(app, _occurrence("proj.tasks.report", routing), redis_url))
    assert message["queue"] == "celery"


def test_a_registered_tasks_options_apply(app: Any, redis_url: str) -> None:
    @app.task(
        name="proj.tasks.registered",
        expires=60,
        time_limit=50,
        soft_time_limit=40,
        ignore_result=True,
        shared=False,
    )
    def registered() -> None:  # pragma: no cover - never run here
        pass

    app.finalize()  # as a project's app is once its tasks are imported
    assert "proj.tasks.registered" in app.tasks
    message = _assert_same(*_both(app, _occurrence("proj.tasks.registered"), redis_url))
    assert message["headers"]["timelimit"] == [50, 40]
    assert message["headers"]["expires_set"]
    # A schedule's own options still win over the task's.
    routing = Routing(priority=7, queue="fast", expires=5.0)
    message = _assert_same(*_both(app, _occurrence("proj.tasks.registered", routing), redis_url))
    assert message["queue"].startswith("fast")  # kombu adds a priority step
    assert message["properties"]["priority"] == 7


def test_sent_events_and_publish_signals_still_fire(app: Any, redis_url: str) -> None:
    from celery.signals import after_task_publish, before_task_publish

    app.conf.task_send_sent_event = True
    seen: list[tuple[str, str]] = []

    def before(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(("before", headers["id"]))

    def after(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(("after", headers["id"]))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    try:
        occurrence = _occurrence("proj.tasks.report")
        _assert_same(*_both(app, occurrence, redis_url))
    finally:
        before_task_publish.disconnect(before)
        after_task_publish.disconnect(after)
    key = occurrence.idempotency_key
    assert seen == [("before", key), ("after", key)] * 2


def test_a_router_function_uses_send_task(app: Any, redis_url: str) -> None:
    """A router may route by argument: nothing can be kept, so send_task does the routing."""

    def by_tenant(name: str, args: Any, kwargs: Any, options: Any, **_: Any) -> Any:
        return {"queue": f"tenant-{kwargs.get('tenant')}"}

    app.conf.task_routes = (by_tenant,)
    submitter = CelerySubmitter(app)
    try:
        assert not submitter._publisher.usable()
        client = redis.Redis.from_url(redis_url)
        submitter.submit(_occurrence("proj.tasks.report"))
        assert list(_messages(client)) == ["tenant-acme"]
        client.close()
    finally:
        submitter.close()


def test_a_batch_goes_through_the_direct_publisher(app: Any, redis_url: str) -> None:
    submitter = CelerySubmitter(app)
    occurrences = [
        _occurrence("proj.tasks.report", idempotency_key=f"nightly:{i}", args=(i,))
        for i in range(120)
    ]
    try:
        results = submitter.submit_many(occurrences)
    finally:
        submitter.close()
    assert results == [o.idempotency_key for o in occurrences]
    client = redis.Redis.from_url(redis_url)
    messages = _messages(client)["celery"]
    client.close()
    assert [m["headers"]["id"] for m in messages] == [o.idempotency_key for o in occurrences]
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in messages] == [
        [i] for i in range(120)
    ]


def test_queues_are_declared_as_send_task_declares_them(redis_url: str) -> None:
    """The first message to a queue declares it (its binding appears in Redis); later ones
    rely on kombu's record of what this connection declared, with either path alike."""
    client = redis.Redis.from_url(redis_url)
    seen: dict[bool, list[bool]] = {}
    for direct in (True, False):
        client.flushall()
        # A fresh app and queue each time: kombu remembers declared queues per connection and
        # bindings per process.
        queue = f"emails-{direct}"
        app = celery.Celery("declare", broker=redis_url, set_as_current=False)
        submitter = CelerySubmitter(app)
        if not direct:
            submitter._publisher.usable = lambda: False  # type: ignore[method-assign]
        observed = []
        try:
            for i in range(3):
                submitter.submit(
                    _occurrence("proj.tasks.report", Routing(queue=queue), idempotency_key=f"k{i}")
                )
                observed.append(bool(client.exists(f"_kombu.binding.{queue}")))
                client.delete(f"_kombu.binding.{queue}")
        finally:
            submitter.close()
            app.close()
        seen[direct] = observed
    client.close()
    assert seen[True][0] is True
    assert seen[True] == seen[False]


def test_prepare_opens_the_connection_the_first_submission_then_uses(
    app: Any, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    submitter = CelerySubmitter(app)
    try:
        submitter.prepare()
        # A producer, connected to the broker, waits for the first submission.
        [producer] = submitter._idle
        assert producer.connection.connected
        occurrence = _occurrence("proj.tasks.report")
        assert submitter.submit(occurrence) == occurrence.idempotency_key
        # The first message went out through the prepared producer, which is idle again.
        assert submitter._idle == [producer]
        assert [m["headers"]["id"] for m in _messages(client)["celery"]] == [
            occurrence.idempotency_key
        ]
    finally:
        submitter.close()
        client.close()


def test_prepare_with_the_broker_down_leaves_the_failure_to_the_first_submission() -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    submitter = CelerySubmitter(f"redis://127.0.0.1:{port}/0")
    try:
        submitter.prepare()  # does not raise
        assert submitter._idle == []
    finally:
        submitter.close()


@pytest.mark.parametrize("case", list(ARGUMENTS))
def test_argument_headers_equal_send_task(app: Any, redis_url: str, case: str) -> None:
    args, kwargs = ARGUMENTS[case]
    occurrence = _occurrence("proj.tasks.report", args=args, kwargs=kwargs)
    message = _assert_same(*_both(app, occurrence, redis_url))
    assert message["headers"]["argsrepr"] and message["headers"]["kwargsrepr"]
    assert message["_body"][0] == list(args) and message["_body"][1] == kwargs


@pytest.mark.parametrize("registered", [True, False])
def test_messages_carry_what_celery_beat_sends(app: Any, redis_url: str, registered: bool) -> None:
    """Celery 5.7's beat marks its messages ``celery_beat_task`` and, for a task it knows,
    sends that task's ``ignore_result`` and no priority unless one is set: goatbeat's equal
    beat's own, read back from Redis (goatbeat's two headers aside)."""
    from celery.beat import ScheduleEntry, Scheduler

    task = "proj.tasks.report"
    if registered:

        @app.task(name=task, shared=False)
        def report(*args: Any, **kwargs: Any) -> None:  # pragma: no cover - never run here
            pass

        app.finalize()
    occurrence = _occurrence(task, Routing(queue="emails"))
    client = redis.Redis.from_url(redis_url)
    submitter = CelerySubmitter(app)
    try:
        submitter.submit(occurrence)
        ours = _messages(client)
        entry = ScheduleEntry(
            name="nightly",
            task=task,
            schedule=60,
            args=occurrence.args,
            kwargs=occurrence.kwargs,
            options={"queue": "emails", "task_id": occurrence.idempotency_key},
            app=app,
        )
        with app.producer_or_acquire() as producer:
            Scheduler(app, lazy=True).apply_async(entry, producer=producer, advance=False)
        beats = _messages(client)
    finally:
        submitter.close()
        client.close()
    for key in ("goatbeat_idempotency_key", "goatbeat_scheduled_at"):
        ours["emails"][0]["headers"].pop(key)
    message = _assert_same(ours, beats)
    assert message["headers"]["celery_beat_task"] is True
    assert message["headers"]["ignore_result"] is (False if registered else None)


def test_the_origin_header_is_the_sending_processs_own(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``origin`` Celery writes (``gen<pid>@<host>``) is made once per process, not per
    message: a forked child writes its own pid, as Celery's per-message one would."""
    from celery.utils.nodenames import anon_nodename

    from goatbeat.submitters._celery_publish import Publisher

    publisher = Publisher(app)
    assert publisher._origin() == anon_nodename()
    monkeypatch.setattr("os.getpid", lambda: 424242)
    assert publisher._origin() == anon_nodename() == f"gen424242@{anon_nodename().split('@')[1]}"
