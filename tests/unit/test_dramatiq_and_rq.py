"""Dramatiq and RQ as their users know them: what a declaration stores, what it refuses, and
which per-schedule options reach the message or the job.

Declarations are checked without a server (a stub broker, a closed port); what reaches the
backend is read back from the throwaway Redis with the backends' own APIs.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from goatbeat.beat import Beat
from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import (
    InvalidSchedule,
    InvalidValue,
    PermanentSubmitError,
    UnsupportedOption,
    short_repr,
)
from goatbeat.core.model import Occurrence, Routing, Schedule, idempotency_key
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.inline import InlineSubmitter
from goatbeat.submitters.rq import RQSubmitter
from tests.unit import dramatiq_project as project

SCHEDULED_AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PROJECT = "tests.unit.dramatiq_project"


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def make_schedule(task: str, **routing: Any) -> Schedule:
    return Schedule(
        name="report",
        task=task,
        trigger=IntervalTrigger(every=timedelta(minutes=5)),
        routing=Routing(**routing),
    )


def make_occurrence(task: str, *, late: float = 0.0, **routing: Any) -> Occurrence:
    return Occurrence(
        execution_id=1,
        schedule_id=1,
        schedule_name="report",
        task=task,
        args=(1,),
        kwargs={},
        routing=Routing(**routing),
        scheduled_at=SCHEDULED_AT - timedelta(seconds=late),
        idempotency_key=idempotency_key("report", SCHEDULED_AT - timedelta(seconds=late)),
    )


@pytest.fixture
def project_submitter() -> Iterator[DramatiqSubmitter]:
    """A Dramatiq submitter on the project's broker, which knows the project's actors."""
    submitter = DramatiqSubmitter(project.broker)
    yield submitter
    submitter.close()


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture
def no_global_broker() -> Iterator[None]:
    """Dramatiq's global broker unset, as in a process that imported no actors."""
    import dramatiq.broker

    previous = dramatiq.broker.global_broker
    dramatiq.broker.global_broker = None
    try:
        yield
    finally:
        dramatiq.broker.global_broker = previous


# -- 1. an actor object runs: it is stored by its actor name, on its queue ------------------------


def test_an_actor_object_is_stored_by_its_actor_name_and_on_its_queue(
    project_submitter: DramatiqSubmitter,
) -> None:
    beat = Beat("memory://", submitter=project_submitter)
    schedule = beat.schedule(name="tick", task=project.tick, every="1m")
    assert schedule.task == "tick"  # Dramatiq finds actors by actor_name, not by module path
    assert schedule.routing.queue == "ticks"
    default = beat.schedule(name="report", task=project.send_report, every="1m")
    assert (default.task, default.routing.queue) == ("send_report", "default")


def test_a_schedules_queue_overrides_the_actors(project_submitter: DramatiqSubmitter) -> None:
    beat = Beat("memory://", submitter=project_submitter)
    schedule = beat.schedule(name="tick", task=project.tick, every="1m", queue="custom")
    assert (schedule.task, schedule.routing.queue) == ("tick", "custom")


def test_an_actor_object_is_stored_by_name_even_when_the_broker_knows_no_actors() -> None:
    submitter = DramatiqSubmitter(closed_port_url())
    beat = Beat("memory://", submitter=submitter)
    try:
        schedule = beat.schedule(name="tick", task=project.tick, every="1m")
    finally:
        beat.close()
    assert (schedule.task, schedule.routing.queue) == ("tick", "ticks")


def test_a_string_task_must_name_an_actor_the_broker_declares(
    project_submitter: DramatiqSubmitter,
) -> None:
    project_submitter.validate(make_schedule("tick", queue="ticks"))
    with pytest.raises(InvalidSchedule) as info:
        project_submitter.validate(make_schedule("nope"))
    assert info.value.field == "task"
    assert "'nope'" in str(info.value)
    assert "'send_report'" in str(info.value) and "'tick'" in str(info.value)


def test_a_module_path_naming_an_actor_is_refused_with_the_actor_name_to_use(
    project_submitter: DramatiqSubmitter,
) -> None:
    with pytest.raises(InvalidSchedule) as info:
        project_submitter.validate(make_schedule(f"{PROJECT}.tick"))
    assert info.value.field == "task"
    assert "actor_name" in str(info.value) and "'tick'" in str(info.value)


def test_the_broker_can_be_named_as_for_the_dramatiq_command() -> None:
    submitter = DramatiqSubmitter(f"{PROJECT}:broker")
    try:
        assert submitter.broker is project.broker
        submitter.validate(make_schedule("tick"))
        with pytest.raises(InvalidSchedule):
            submitter.validate(make_schedule("nope"))
    finally:
        submitter.close()
    for spec in (f"{PROJECT}:not_a_broker", f"{PROJECT}:missing", "tests.unit.no_such_module"):
        with pytest.raises(InvalidValue) as info:
            DramatiqSubmitter(spec)
        assert info.value.field == "broker"
        assert repr(spec) in str(info.value)


# -- 2. no message to a queue nobody consumes -----------------------------------------------------


def test_a_queue_no_actor_declares_is_refused_at_declaration(
    project_submitter: DramatiqSubmitter,
) -> None:
    beat = Beat("memory://", submitter=project_submitter)
    with pytest.raises(InvalidSchedule) as info:
        beat.schedule(name="r", task="send_report", every="1m", queue="reports")
    assert info.value.field == "queue"
    assert "'reports'" in str(info.value)
    assert "declare_queue" in str(info.value)
    assert beat.schedules == []
    # Queues the project declared, by an actor or by hand, are consumed by its workers.
    beat.schedule(name="c", task="send_report", every="1m", queue="custom")
    beat.schedule(name="t", task="send_report", every="1m", queue="ticks")


def test_a_queue_goatbeat_declared_to_send_does_not_count_as_consumed(
    project_submitter: DramatiqSubmitter,
) -> None:
    project_submitter.submit(make_occurrence("send_report", queue="elsewhere"))
    with pytest.raises(InvalidSchedule) as info:
        project_submitter.validate(make_schedule("send_report", queue="elsewhere"))
    assert info.value.field == "queue"
    project.broker.flush_all()


def test_when_the_broker_knows_no_actors_each_queue_is_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="goatbeat")
    submitter = DramatiqSubmitter(closed_port_url())
    try:
        submitter.validate(make_schedule("send_report", queue="reports"))
        submitter.validate(make_schedule("send_report", queue="reports"))
        submitter.validate(make_schedule("other"))
    finally:
        submitter.close()
    warnings = [r for r in caplog.records if r.getMessage() == "submitter.unchecked"]
    queues = [r.goatbeat["queue"] for r in warnings]  # type: ignore[attr-defined]
    assert queues == ["reports", "default"]  # once per queue
    assert all(r.levelno == logging.WARNING for r in warnings)


@pytest.mark.parametrize("queue", ["bad queue!", "a/b", "-x", "é"])
def test_rq_refuses_a_queue_name_as_dramatiq_does(queue: str) -> None:
    submitter = RQSubmitter(closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule("proj.jobs.send", queue=queue))
        assert info.value.field == "queue"
        assert repr(queue) in str(info.value)
        submitter.validate(make_schedule("proj.jobs.send", queue="high_priority.v2"))
    finally:
        submitter.close()
    with pytest.raises(InvalidValue) as bad_default:
        RQSubmitter(closed_port_url(), default_queue="bad queue!")
    assert bad_default.value.field == "default_queue"


# -- 3. no silent default broker --------------------------------------------------------------


@pytest.mark.usefixtures("no_global_broker")
def test_without_a_broker_dramatiq_fails_at_start_naming_the_setting() -> None:
    import dramatiq.broker

    with pytest.raises(InvalidValue) as info:
        DramatiqSubmitter()
    assert info.value.field == "broker"
    assert "submitter_options" in str(info.value)
    beat = Beat("memory://", submitter="dramatiq")
    with pytest.raises(InvalidValue) as declared:
        beat.schedule(name="r", task="send_report", every="1m")
    assert declared.value.field == "broker"
    # Nothing fell back to Dramatiq's default broker on localhost.
    assert dramatiq.broker.global_broker is None


@pytest.mark.usefixtures("no_global_broker")
def test_a_module_that_sets_no_broker_is_refused_too() -> None:
    with pytest.raises(InvalidValue) as info:
        DramatiqSubmitter(PROJECT)  # imports fine, but never calls dramatiq.set_broker()
    assert info.value.field == "broker"


# -- 4. the options each backend's users reach for ------------------------------------------------


def test_rq_job_options_reach_the_job(redis_url: str, client: redis.Redis) -> None:
    from rq import Queue
    from rq.job import Job

    submitter = RQSubmitter(redis_url)
    options = {
        "job_timeout": "2m",
        "result_ttl": 60,
        "failure_ttl": 3600,
        "retry": {"max": 2, "interval": [1, 5]},
        "x-tenant": "acme",
    }
    try:
        submitter.validate(make_schedule("proj.jobs.send", headers=options))
        plain = submitter.submit(make_occurrence("proj.jobs.plain", late=60))
        job_id = submitter.submit(make_occurrence("proj.jobs.send", headers=options))
        front = submitter.submit(
            make_occurrence("proj.jobs.urgent", late=120, headers={"at_front": True})
        )
    finally:
        submitter.close()
    job = Job.fetch(str(job_id), connection=client)
    assert job.timeout == 120
    assert job.result_ttl == 60
    assert job.failure_ttl == 3600
    assert job.retries_left == 2
    assert job.retry_intervals == [1, 5]
    # The options steer RQ; the rest of the headers stay job.meta, as before.
    assert job.meta["x-tenant"] == "acme"
    assert not {"job_timeout", "result_ttl", "failure_ttl", "retry"} & set(job.meta)
    # at_front: enqueued last, taken first, where other backends' users would set a priority.
    assert Queue("default", connection=client).job_ids == [front, plain, job_id]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("job_timeout", 0),
        ("job_timeout", "soon"),
        ("job_timeout", True),
        ("result_ttl", -2),
        ("result_ttl", "1h"),
        ("failure_ttl", 0),
        ("retry", 0),
        ("retry", {"max": 2, "interval": -1}),
        ("retry", {"max": 2, "backoff": 3}),
        ("retry", [1, 2]),
        ("at_front", "yes"),
    ],
)
def test_rq_refuses_job_options_rq_would_refuse(option: str, value: Any) -> None:
    submitter = RQSubmitter(closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule("proj.jobs.send", headers={option: value}))
    finally:
        submitter.close()
    assert info.value.field == option
    assert info.value.value == value
    assert short_repr(value) in str(info.value)


def test_rq_job_options_a_row_got_wrong_are_a_permanent_error(redis_url: str) -> None:
    submitter = RQSubmitter(redis_url)
    try:
        # What a row written around validate() could hold: it would fail on every attempt.
        with pytest.raises(PermanentSubmitError) as info:
            submitter.submit(make_occurrence("proj.jobs.send", headers={"retry": 0}))
    finally:
        submitter.close()
    assert "retry" in str(info.value) and "report:2026-12-01T08:00:00Z" in str(info.value)


def test_dramatiq_per_message_options_reach_the_message(
    redis_url: str, client: redis.Redis
) -> None:
    submitter = DramatiqSubmitter(redis_url)
    options = {"max_retries": 3, "time_limit": 30_000, "min_backoff": 100, "max_backoff": 5_000}
    try:
        submitter.validate(make_schedule("send_report", headers=options))
        message_id = submitter.submit(make_occurrence("send_report", headers=options))
    finally:
        submitter.close()
    stored = [json.loads(v) for v in client.hvals("dramatiq:default.msgs")]
    (message,) = [m for m in stored if m["message_id"] == message_id]
    assert {k: message["options"][k] for k in options} == options


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_retries", -1),
        ("max_retries", "3"),
        ("time_limit", 0),
        ("time_limit", "30s"),
        ("min_backoff", 1.5),
        ("max_backoff", True),
    ],
)
def test_dramatiq_refuses_per_message_options_dramatiq_would_misread(
    option: str, value: Any
) -> None:
    submitter = DramatiqSubmitter(closed_port_url())
    try:
        with pytest.raises(InvalidSchedule) as info:
            submitter.validate(make_schedule("send_report", headers={option: value}))
    finally:
        submitter.close()
    assert info.value.field == option
    assert repr(value) in str(info.value)


def test_beat_options_are_checked_against_the_backend_and_kept_with_the_headers() -> None:
    beat = Beat("memory://", submitter=RQSubmitter(closed_port_url()))
    try:
        schedule = beat.schedule(
            name="r",
            task="proj.jobs.send",
            every="1m",
            headers={"x-tenant": "acme"},
            options={"job_timeout": 30, "retry": 3, "at_front": True},
        )
        assert dict(schedule.routing.headers) == {
            "x-tenant": "acme",
            "job_timeout": 30,
            "retry": 3,
            "at_front": True,
        }
        with pytest.raises(UnsupportedOption) as info:
            beat.schedule(name="p", task="proj.jobs.send", every="1m", options={"max_retries": 1})
        assert info.value.field == "options"
        assert "'max_retries'" in str(info.value) and "job_timeout" in str(info.value)
        with pytest.raises(InvalidSchedule) as twice:
            beat.schedule(
                name="t",
                task="proj.jobs.send",
                every="1m",
                headers={"retry": 1},
                options={"retry": 2},
            )
        assert twice.value.field == "options"
        assert [s.name for s in beat.schedules] == ["r"]
    finally:
        beat.close()


def test_a_routing_submitter_takes_the_options_of_the_tasks_backend() -> None:
    from goatbeat.django.submitter import DjangoRoutingSubmitter

    router = DjangoRoutingSubmitter(pinned="rq", options={"rq": {"connection": closed_port_url()}})
    beat = Beat("memory://", submitter=router)
    try:
        schedule = beat.schedule(
            name="r", task="proj.jobs.send", every="1m", options={"job_timeout": 30}
        )
        assert schedule.routing.headers["job_timeout"] == 30
        with pytest.raises(UnsupportedOption) as info:
            beat.schedule(name="d", task="proj.jobs.send", every="1m", options={"max_retries": 1})
        assert info.value.field == "options" and "rq" in str(info.value)
    finally:
        beat.close()


def test_backends_without_per_schedule_options_refuse_them() -> None:
    celery = Beat("memory://", submitter=CelerySubmitter(closed_port_url()))
    try:
        with pytest.raises(UnsupportedOption) as info:
            celery.schedule(name="c", task="proj.tasks.x", every="1m", options={"retry": 1})
        assert info.value.field == "options"
        assert "celery" in str(info.value)
    finally:
        celery.close()
    # The inline submitter stands in for the production backend during development.
    inline = Beat("memory://", submitter=InlineSubmitter())
    inline.schedule(name="i", task="json.dumps", every="1m", options={"job_timeout": 30})
    strict = Beat("memory://", submitter=InlineSubmitter(strict=True))
    with pytest.raises(UnsupportedOption):
        strict.schedule(name="i", task="json.dumps", every="1m", options={"job_timeout": 30})


# -- 4. expires: from submission, or from the scheduled instant ------------------------------------


def test_expires_counts_from_submission_by_default(redis_url: str, client: redis.Redis) -> None:
    from rq.job import Job

    clock = FakeClock(SCHEDULED_AT + timedelta(seconds=40))
    submitter = RQSubmitter(redis_url, clock=clock)
    try:
        job_id = submitter.submit(make_occurrence("proj.jobs.send", expires=30.0))
    finally:
        submitter.close()
    assert Job.fetch(str(job_id), connection=client).ttl == 30


@pytest.mark.parametrize("cls", [RQSubmitter, DramatiqSubmitter, CelerySubmitter])
def test_expires_can_count_from_the_scheduled_instant(
    cls: type, redis_url: str, client: redis.Redis
) -> None:
    clock = FakeClock(SCHEDULED_AT + timedelta(seconds=10))
    submitter = cls(redis_url, expires_from="scheduled", clock=clock)
    try:
        submitter.submit(make_occurrence("proj.jobs.send", expires=30.0))
        clock.advance(25)
        # 35 s after its instant, with expires=30 s: too late to be worth running.
        with pytest.raises(PermanentSubmitError) as info:
            submitter.submit(make_occurrence("proj.jobs.send", expires=30.0, late=-1))
        assert "expires" in str(info.value)
    finally:
        submitter.close()
    if cls is RQSubmitter:
        from rq import Queue

        (job,) = Queue("default", connection=client).jobs
        assert job.ttl == 20
    elif cls is DramatiqSubmitter:
        (raw,) = client.hvals("dramatiq:default.msgs")
        assert json.loads(raw)["options"]["max_age"] == 20_000
    else:
        (raw,) = client.lrange("celery", 0, -1)
        expires = json.loads(raw)["headers"]["expires"]
        assert datetime.fromisoformat(expires) == SCHEDULED_AT + timedelta(seconds=30)


@pytest.mark.parametrize("cls", [RQSubmitter, DramatiqSubmitter, CelerySubmitter])
def test_expires_from_must_be_submission_or_scheduled(cls: type) -> None:
    with pytest.raises(InvalidValue) as info:
        cls(closed_port_url(), expires_from="claimed")
    assert info.value.field == "expires_from"
    assert "'claimed'" in str(info.value)
