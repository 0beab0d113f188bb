"""The Celery, Dramatiq and RQ submitters without workers: validation, error mapping, ids.

Messages are published to the throwaway Redis and read back from it; no broker is mocked.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    RetryableSubmitError,
    UnsupportedOption,
)
from goatbeat.core.model import Occurrence, Routing, Schedule, idempotency_key
from goatbeat.core.submit import TaskSubmitter
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.keys import derived_uuid
from goatbeat.submitters.rq import RQSubmitter, job_id_for

SCHEDULED_AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)

TASKS = {
    CelerySubmitter: "proj.tasks.report",
    DramatiqSubmitter: "send_report",
    RQSubmitter: "proj.jobs.send_report",
}

# One value per routing option, each valid for the Routing model.
OPTION_VALUES: dict[str, Any] = {
    "queue": "emails",
    "priority": 5,
    "exchange": "reports",
    "routing_key": "reports.daily",
    "expires": 30.0,
    "headers": {"x-tenant": "acme"},
}

FLAG_FOR_OPTION = {
    "queue": "supports_queue",
    "priority": "supports_priority",
    "exchange": "supports_exchange",
    "routing_key": "supports_exchange",
    "expires": "supports_expires",
    "headers": "supports_headers",
}


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens there once the socket is closed: connections are refused at once.
    return f"redis://127.0.0.1:{port}/0"


def make_schedule(task: str, **routing: Any) -> Schedule:
    return Schedule(
        name="report",
        task=task,
        trigger=IntervalTrigger(every=timedelta(minutes=5)),
        routing=Routing(**routing),
    )


def make_occurrence(task: str, *, name: str = "report", args: tuple[Any, ...] = (1, "a"),
                    **routing: Any) -> Occurrence:  # fmt: skip
    return Occurrence(
        execution_id=1,
        schedule_id=1,
        schedule_name=name,
        task=task,
        args=args,
        kwargs={"mode": "full"},
        routing=Routing(**routing),
        scheduled_at=SCHEDULED_AT,
        idempotency_key=idempotency_key(name, SCHEDULED_AT),
    )


def build(cls: type, url: str) -> Any:
    return cls(url)


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


# -- capabilities ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CelerySubmitter, DramatiqSubmitter, RQSubmitter])
def test_submitters_satisfy_the_protocol(cls: type) -> None:
    submitter = build(cls, closed_port_url())
    try:
        assert isinstance(submitter, TaskSubmitter)
    finally:
        submitter.close()


@pytest.mark.parametrize("option", sorted(OPTION_VALUES))
@pytest.mark.parametrize("cls", [CelerySubmitter, DramatiqSubmitter, RQSubmitter])
def test_validate_accepts_exactly_the_options_the_flags_declare(cls: type, option: str) -> None:
    submitter = build(cls, closed_port_url())
    try:
        schedule = make_schedule(TASKS[cls], **{option: OPTION_VALUES[option]})
        if getattr(cls, FLAG_FOR_OPTION[option]):
            submitter.validate(schedule)
        else:
            with pytest.raises(UnsupportedOption) as info:
                submitter.validate(schedule)
            assert info.value.field == option
            assert option in str(info.value)
            assert cls.name in str(info.value)
    finally:
        submitter.close()


def test_flags_are_what_each_backend_can_honour() -> None:
    assert CelerySubmitter.supports_priority and CelerySubmitter.supports_exchange
    # Dramatiq priority is per actor, RQ has none; neither routes through AMQP exchanges.
    for cls in (DramatiqSubmitter, RQSubmitter):
        assert not cls.supports_priority
        assert not cls.supports_exchange
        assert cls.supports_queue and cls.supports_expires and cls.supports_headers


@pytest.mark.parametrize(
    ("cls", "task"),
    [
        (CelerySubmitter, "proj..report"),
        (CelerySubmitter, ".report"),
        (DramatiqSubmitter, "proj/report"),
        (DramatiqSubmitter, "1report"),
        (RQSubmitter, "send_report"),
        (RQSubmitter, "proj.jobs.send-report"),
    ],
)
def test_validate_rejects_task_names_the_backend_cannot_resolve(cls: type, task: str) -> None:
    submitter = build(cls, closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule(task))
        assert info.value.field == "task"
        assert repr(task) in str(info.value)
    finally:
        submitter.close()


@pytest.mark.parametrize(
    ("cls", "header"),
    [
        (CelerySubmitter, "task"),
        (CelerySubmitter, "goatbeat_idempotency_key"),
        (DramatiqSubmitter, "redis_message_id"),
        (DramatiqSubmitter, "goatbeat_scheduled_at"),
        (RQSubmitter, "goatbeat_idempotency_key"),
    ],
)
def test_validate_rejects_headers_that_would_overwrite_reserved_ones(
    cls: type, header: str
) -> None:
    submitter = build(cls, closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule(TASKS[cls], headers={header: "forged"}))
        assert info.value.field == "headers"
        assert repr(header) in str(info.value)
    finally:
        submitter.close()


def test_celery_rejects_a_negative_priority() -> None:
    submitter = CelerySubmitter(closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule(TASKS[CelerySubmitter], priority=-1))
        assert info.value.field == "priority"
        assert "-1" in str(info.value)
    finally:
        submitter.close()


def test_dramatiq_rejects_a_queue_name_dramatiq_refuses() -> None:
    submitter = DramatiqSubmitter(closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule("send_report", queue="bad queue!"))
        assert info.value.field == "queue"
    finally:
        submitter.close()


# -- error mapping ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CelerySubmitter, DramatiqSubmitter, RQSubmitter])
def test_broker_down_is_a_retryable_error(cls: type) -> None:
    submitter = build(cls, closed_port_url())
    try:
        with pytest.raises(RetryableSubmitError) as info:
            submitter.submit(make_occurrence(TASKS[cls]))
        assert "report:2026-12-01T08:00:00Z" in str(info.value)
    finally:
        submitter.close()


@pytest.mark.parametrize("cls", [CelerySubmitter, DramatiqSubmitter, RQSubmitter])
def test_unserialisable_arguments_are_a_permanent_error(cls: type, redis_url: str) -> None:
    submitter = build(cls, redis_url)
    try:
        # Schedules only hold JSON, but an occurrence built by other code may not.
        with pytest.raises(PermanentSubmitError) as info:
            submitter.submit(make_occurrence(TASKS[cls], args=(lambda: None,)))
        assert "report:2026-12-01T08:00:00Z" in str(info.value)
    finally:
        submitter.close()


@pytest.mark.parametrize("cls", [CelerySubmitter, DramatiqSubmitter, RQSubmitter])
def test_submit_after_close_fails_and_close_is_idempotent(cls: type, redis_url: str) -> None:
    submitter = build(cls, redis_url)
    submitter.close()
    submitter.close()
    with pytest.raises(RetryableSubmitError):
        submitter.submit(make_occurrence(TASKS[cls]))


# -- what reaches the broker --------------------------------------------------------------------


def test_celery_message_carries_the_key_as_task_id_and_header(
    redis_url: str, client: redis.Redis
) -> None:
    submitter = CelerySubmitter(redis_url)
    try:
        occurrence = make_occurrence(
            TASKS[CelerySubmitter], queue="emails", priority=4, headers={"x-tenant": "acme"}
        )
        task_id = submitter.submit(occurrence)
    finally:
        submitter.close()
    assert task_id == "report:2026-12-01T08:00:00Z"
    # kombu's Redis transport keeps one list per priority band: "emails", "emails\x06\x163"...
    lists = [k for k in client.keys("emails*") if client.type(k) == b"list"]
    assert len(lists) == 1
    raw = client.lrange(lists[0], 0, -1)
    assert len(raw) == 1
    message = json.loads(raw[0])
    headers = message["headers"]
    assert headers["id"] == task_id
    assert headers["task"] == "proj.tasks.report"
    assert headers["goatbeat_idempotency_key"] == task_id
    assert headers["goatbeat_scheduled_at"] == "2026-12-01T08:00:00Z"
    assert headers["x-tenant"] == "acme"
    assert message["properties"]["priority"] == 4


def test_celery_submitter_sends_from_several_threads_each_with_its_own_producer(
    redis_url: str, client: redis.Redis
) -> None:
    submitter = CelerySubmitter(redis_url, concurrency=4)
    assert submitter.concurrent_submits == 4
    errors: list[BaseException] = []

    def send(thread: int) -> None:
        try:
            for i in range(50):
                submitter.submit(make_occurrence(TASKS[CelerySubmitter], name=f"t{thread}-{i}"))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # At most one producer per thread that was submitting at the same moment.
        assert 1 <= len(submitter._idle) <= 4
    finally:
        submitter.close()
    assert errors == []
    ids = [json.loads(m)["headers"]["id"] for m in client.lrange("celery", 0, -1)]
    assert sorted(ids) == sorted(
        f"t{t}-{i}:2026-12-01T08:00:00Z" for t in range(4) for i in range(50)
    )
    assert submitter._idle == []


def test_celery_concurrency_must_be_positive() -> None:
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidValue, match="concurrency"):
            CelerySubmitter("redis://127.0.0.1:1", concurrency=bad)


def test_celery_app_can_be_named_by_import_path(redis_url: str, client: redis.Redis) -> None:
    submitter = CelerySubmitter("tests.e2e.backend_apps.celery_app:app")
    try:
        from tests.e2e.backend_apps.celery_app import app

        assert submitter.app is app
    finally:
        submitter.close()
    with pytest.raises(InvalidValue) as info:
        CelerySubmitter("tests.e2e.backend_apps.no_such_module:app")
    assert info.value.field == "celery_app"


def test_dramatiq_message_id_is_derived_from_the_key(redis_url: str, client: redis.Redis) -> None:
    submitter = DramatiqSubmitter(redis_url)
    try:
        occurrence = make_occurrence("send_report", expires=2.5, headers={"x-tenant": "acme"})
        first = submitter.submit(occurrence)
        again = submitter.submit(occurrence)
        other = submitter.submit(make_occurrence("send_report", name="other"))
    finally:
        submitter.close()
    assert first == again == derived_uuid("report:2026-12-01T08:00:00Z")
    assert other != first
    stored = [json.loads(v) for v in client.hvals("dramatiq:default.msgs")]
    mine = [m for m in stored if m["message_id"] == first]
    # Dramatiq does not de-duplicate; the shared id is what lets a worker recognise the repeat.
    assert len(mine) == 2
    options = mine[0]["options"]
    assert mine[0]["actor_name"] == "send_report"
    assert mine[0]["args"] == [1, "a"]
    assert options["goatbeat_idempotency_key"] == "report:2026-12-01T08:00:00Z"
    assert options["max_age"] == 2500
    assert options["x-tenant"] == "acme"


def test_rq_resubmission_returns_the_same_job_and_enqueues_it_once(
    redis_url: str, client: redis.Redis
) -> None:
    from rq import Queue
    from rq.job import Job

    submitter = RQSubmitter(redis_url)
    try:
        occurrence = make_occurrence("proj.jobs.send_report", queue="emails", expires=1.2)
        first = submitter.submit(occurrence)
        again = submitter.submit(occurrence)
    finally:
        submitter.close()
    assert first == again == job_id_for("report:2026-12-01T08:00:00Z")
    assert Queue("emails", connection=client).job_ids == [first]
    job = Job.fetch(first, connection=client)
    assert job.func_name == "proj.jobs.send_report"
    assert job.args == (1, "a")
    assert job.kwargs == {"mode": "full"}
    assert job.meta["goatbeat_idempotency_key"] == "report:2026-12-01T08:00:00Z"
    # expires -> RQ ttl in whole seconds, rounded up so a job never expires early.
    assert job.ttl == 2


def test_rq_job_ids_are_valid_for_any_key() -> None:
    from rq.job import validate_job_id

    for key in ("report:2026-12-01T08:00:00Z", "weird name/é:manual:2026-01-01T00:00:00Z"):
        job_id = job_id_for(key)
        validate_job_id(job_id)
        assert job_id == job_id_for(key)


def test_registry_builds_each_submitter_by_name(redis_url: str) -> None:
    from goatbeat.submitters import load_submitter

    for name, cls, option in (
        ("celery", CelerySubmitter, "app"),
        ("dramatiq", DramatiqSubmitter, "broker"),
        ("rq", RQSubmitter, "connection"),
    ):
        submitter = load_submitter(name, **{option: redis_url})
        try:
            assert type(submitter) is cls
        finally:
            submitter.close()


def test_celery_exchange_and_routing_key_reach_the_bound_queue(
    redis_url: str, client: redis.Redis
) -> None:
    from kombu import Connection, Exchange, Queue

    # What a worker with a custom exchange declares: queue "daily" bound to "reports.daily".
    with Connection(redis_url) as conn:
        Queue("daily", Exchange("reports", type="direct"), routing_key="reports.daily")(
            conn.default_channel
        ).declare()
    submitter = CelerySubmitter(redis_url)
    try:
        submitter.submit(
            make_occurrence(TASKS[CelerySubmitter], exchange="reports", routing_key="reports.daily")
        )
    finally:
        submitter.close()
    raw = client.lrange("daily", 0, -1)
    assert len(raw) == 1
    message = json.loads(raw[0])
    assert message["headers"]["goatbeat_idempotency_key"] == "report:2026-12-01T08:00:00Z"
    assert message["properties"]["delivery_info"]["exchange"] == "reports"
    assert message["properties"]["delivery_info"]["routing_key"] == "reports.daily"


def test_dramatiq_uses_the_queue_of_an_actor_the_broker_knows(
    redis_url: str, client: redis.Redis
) -> None:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=redis_url)
    dramatiq.actor(lambda: None, actor_name="send_report", queue_name="reports", broker=broker)
    submitter = DramatiqSubmitter(broker)
    try:
        submitter.submit(make_occurrence("send_report"))
        submitter.submit(make_occurrence("unknown_actor", name="other"))
        submitter.submit(make_occurrence("send_report", name="routed", queue="urgent"))
    finally:
        submitter.close()
        broker.close()

    def actors_in(queue: str) -> list[str]:
        return sorted(json.loads(v)["actor_name"] for v in client.hvals(f"dramatiq:{queue}.msgs"))

    assert actors_in("reports") == ["send_report"]
    assert actors_in("default") == ["unknown_actor"]
    assert actors_in("urgent") == ["send_report"]


def test_without_arguments_the_projects_own_app_and_broker_are_used(redis_url: str) -> None:
    import dramatiq
    import dramatiq.broker
    from celery import Celery, _state
    from dramatiq.brokers.redis import RedisBroker

    previous_app = getattr(_state._tls, "current_app", None)
    app = Celery("project", broker=redis_url, set_as_current=True)
    submitter = CelerySubmitter()
    try:
        assert submitter.app is app
    finally:
        submitter.close()
        app.close()
        _state._set_current_app(previous_app)

    previous = dramatiq.broker.global_broker
    broker = RedisBroker(url=redis_url)
    dramatiq.set_broker(broker)
    try:
        dramatiq_submitter = DramatiqSubmitter()
        assert dramatiq_submitter.broker is broker
        dramatiq_submitter.close()
    finally:
        dramatiq.broker.global_broker = previous
        broker.close()


# -- submit_many: one kombu publish batch per call ------------------------------------------


def count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the publish batches kombu's Redis channel opens (the real ones, not replaced)."""
    from kombu.transport import redis as kombu_redis

    opened: list[int] = []
    real = kombu_redis.Channel.create_publish_batch

    def counting(self: Any, max_size: int) -> Any:
        opened.append(max_size)
        return real(self, max_size)

    monkeypatch.setattr(kombu_redis.Channel, "create_publish_batch", counting)
    return opened


def test_celery_submit_many_publishes_the_lot_in_one_batch(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = count_batches(monkeypatch)
    submitter = CelerySubmitter(redis_url)
    occurrences = [
        make_occurrence(TASKS[CelerySubmitter], name=f"r{i}", queue="emails" if i % 2 else None)
        for i in range(20)
    ]
    try:
        results = submitter.submit_many(occurrences)
        single = submitter.submit(make_occurrence(TASKS[CelerySubmitter], name="alone"))
    finally:
        submitter.close()
    assert results == [o.idempotency_key for o in occurrences]
    assert len(opened) == 1  # one batch for the 20, none for submit()
    by_queue = {q: [json.loads(m) for m in client.lrange(q, 0, -1)] for q in ("celery", "emails")}
    assert [m["headers"]["id"] for m in reversed(by_queue["emails"])] == results[1::2]
    assert [m["headers"]["id"] for m in reversed(by_queue["celery"])] == [*results[::2], single]
    # A batched message is the very message submit() sends, key headers included.
    batched, alone = by_queue["celery"][-1], by_queue["celery"][0]
    assert batched["body"] == alone["body"]
    assert batched["headers"]["goatbeat_idempotency_key"] == results[0]
    assert set(batched["headers"]) == set(alone["headers"])


def test_celery_submit_many_reports_a_bad_message_and_sends_the_others(
    redis_url: str, client: redis.Redis
) -> None:
    submitter = CelerySubmitter(redis_url)
    good = [make_occurrence(TASKS[CelerySubmitter], name=f"g{i}") for i in range(3)]
    bad = make_occurrence(TASKS[CelerySubmitter], name="bad", args=(lambda: None,))
    try:
        results = submitter.submit_many([good[0], bad, good[1], good[2]])
    finally:
        submitter.close()
    assert results[0] == good[0].idempotency_key and results[2:] == [
        good[1].idempotency_key,
        good[2].idempotency_key,
    ]
    assert isinstance(results[1], PermanentSubmitError) and "bad:" in str(results[1])
    landed = {json.loads(m)["headers"]["id"] for m in client.lrange("celery", 0, -1)}
    assert landed == {o.idempotency_key for o in good}


def test_celery_submit_many_with_the_broker_down_fails_each_as_retryable() -> None:
    submitter = CelerySubmitter(closed_port_url())
    occurrences = [make_occurrence(TASKS[CelerySubmitter], name=f"d{i}") for i in range(2)]
    try:
        results = submitter.submit_many(occurrences)
    finally:
        submitter.close()
    assert all(isinstance(r, RetryableSubmitError) for r in results)
    assert [o.idempotency_key in str(r) for o, r in zip(occurrences, results, strict=True)] == [
        True,
        True,
    ]


def test_a_failed_flush_makes_every_message_of_the_batch_a_retryable_failure(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitter = CelerySubmitter(redis_url)
    submitter.submit(make_occurrence(TASKS[CelerySubmitter], name="warm"))  # producer in pool
    warm_producer = submitter._idle[0]

    def broken_execute(self: Any, raise_on_error: bool = True) -> Any:
        raise redis.ConnectionError("connection reset by peer")

    # The network fails exactly when kombu flushes its pipeline.
    monkeypatch.setattr(redis.client.Pipeline, "execute", broken_execute)
    occurrences = [make_occurrence(TASKS[CelerySubmitter], name=f"f{i}") for i in range(3)]
    try:
        results = submitter.submit_many(occurrences)
        assert all(isinstance(r, RetryableSubmitError) for r in results)
        assert all("delivery uncertain" in str(r) for r in results)
        # The producer that met the failure is not handed out again.
        assert warm_producer not in submitter._idle
    finally:
        submitter.close()
    assert client.llen("celery") == 1  # only the warm-up message


def test_celery_batch_publish_can_be_turned_off(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = count_batches(monkeypatch)
    submitter = CelerySubmitter(redis_url, batch_publish=False)
    occurrences = [make_occurrence(TASKS[CelerySubmitter], name=f"o{i}") for i in range(5)]
    try:
        results = submitter.submit_many(occurrences)
    finally:
        submitter.close()
    assert opened == []
    assert results == [o.idempotency_key for o in occurrences]
    assert client.llen("celery") == 5


# -- capabilities: declared with defaults on BaseSubmitter, not probed ---------------------------

CAPABILITIES = {
    # class: (submit_many, known_tasks, task_definition, after_bookkeeping) of its own
    "goatbeat.submitters.celery:CelerySubmitter": (True, True, False, False),
    "goatbeat.submitters.dramatiq:DramatiqSubmitter": (False, True, False, False),
    "goatbeat.submitters.rq:RQSubmitter": (False, False, True, False),
    "goatbeat.submitters.inline:InlineSubmitter": (False, False, True, True),
    "goatbeat.submitters.django_tasks:DjangoTasksSubmitter": (False, True, True, True),
    "goatbeat.django.submitter:DjangoRoutingSubmitter": (True, True, True, True),
}


@pytest.mark.parametrize("path", sorted(CAPABILITIES))
def test_each_builtin_submitter_declares_its_capabilities_on_the_base_class(path: str) -> None:
    import importlib

    from goatbeat.core.submit import BaseSubmitter

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BaseSubmitter)
    many, known, definition, hook = CAPABILITIES[path]
    assert (cls.submit_many is not None) is many
    assert (cls.known_tasks is not BaseSubmitter.known_tasks) is known
    assert (cls.task_definition is not None) is definition
    assert (cls.after_bookkeeping is not BaseSubmitter.after_bookkeeping) is hook
    assert (cls.awaits_bookkeeping is not BaseSubmitter.awaits_bookkeeping) is hook


def test_a_submitter_of_the_base_class_or_not_is_read_with_the_base_defaults() -> None:
    from goatbeat.core.submit import (
        BaseSubmitter,
        awaits_bookkeeping,
        capability,
        known_tasks,
        many_submitter,
        submit_concurrency,
        task_definition,
    )

    class Plain:  # a TaskSubmitter that declares nothing
        name = "plain"

    class Based(BaseSubmitter):
        name = "based"

    class Hooked(BaseSubmitter):
        def after_bookkeeping(self) -> None:
            pass

    class HookedPlain:
        def after_bookkeeping(self) -> None:
            pass

    for submitter in (Plain(), Based()):
        assert submit_concurrency(submitter) == 0
        assert many_submitter(submitter) is None
        assert known_tasks(submitter) is None
        assert task_definition(submitter) is None
        assert awaits_bookkeeping(submitter) is False
        assert capability(submitter, "backend_options") == frozenset()
        assert capability(submitter, "supports_queue") is False
        capability(submitter, "prepare")()
        capability(submitter, "bind")(object())
    # A hook of its own and no say on awaiting: every batch awaits it, as before.
    assert awaits_bookkeeping(Hooked()) is True
    assert awaits_bookkeeping(HookedPlain()) is True
