"""The inline submitter and the submitter registry, driven through the real scheduler loop."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.errors import InvalidSchedule, InvalidValue, PermanentSubmitError
from goatbeat.core.model import ExecutionStatus, Occurrence, Routing, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.submit import TaskSubmitter
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from goatbeat.submitters import load_submitter
from goatbeat.submitters.inline import InlineSubmitter, resolve_task

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []


def record_call(*args: Any, **kwargs: Any) -> None:
    calls.append((args, kwargs))


def explode(*args: Any, **kwargs: Any) -> None:
    raise ValueError("kaboom")


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


def occurrence(task: str, key: str = "s:2026-03-01T12:00:00Z", **kw: Any) -> Occurrence:
    return Occurrence(
        execution_id=1,
        schedule_id=1,
        schedule_name="s",
        task=task,
        args=kw.pop("args", ()),
        kwargs=kw.pop("kwargs", {}),
        routing=Routing(),
        scheduled_at=START,
        idempotency_key=key,
    )


def test_resolve_task_finds_module_attributes_in_both_notations():
    import json
    import os.path

    assert resolve_task("json.dumps") is json.dumps
    assert resolve_task("os.path.join") is os.path.join
    assert resolve_task("json:JSONDecoder.decode") is json.JSONDecoder.decode


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("json.nope", "no attribute 'nope'"),
        ("nosuchmodule_xyz.func", "no module named 'nosuchmodule_xyz'"),
        # The module that exists, and the attribute missing from it, not a shorter module
        # with the rest of the path as one "attribute".
        ("os.path.joinn", "^module 'os.path' has no attribute 'joinn'$"),
        (
            "goatbeat.submitters.inline.resolve_taskk",
            "^module 'goatbeat.submitters.inline' has no attribute 'resolve_taskk'$",
        ),
        ("json.JSONDecoder.decodee", "^'json.JSONDecoder' has no attribute 'decodee'$"),
        ("json.__doc__", "not callable"),
    ],
)
def test_resolve_task_names_what_is_missing(path, fragment):
    with pytest.raises(LookupError, match=fragment):
        resolve_task(path)


def test_inline_submit_calls_the_task_and_returns_the_key():
    submitter = InlineSubmitter()
    submitter.register("t.record", record_call)
    task_id = submitter.submit(occurrence("t.record", args=(1, 2), kwargs={"x": 3}))
    assert calls == [((1, 2), {"x": 3})]
    assert task_id == "s:2026-03-01T12:00:00Z"


def test_inline_submit_of_an_unknown_task_is_a_permanent_error():
    with pytest.raises(PermanentSubmitError, match="json.nope"):
        InlineSubmitter().submit(occurrence("json.nope"))


def test_inline_validate_rejects_an_unresolvable_task_naming_the_field():
    schedule = Schedule(name="s", task="json.nope", trigger=IntervalTrigger("1m"))
    with pytest.raises(InvalidSchedule) as info:
        InlineSubmitter().validate(schedule)
    assert info.value.field == "task"


def test_inline_routing_options_are_rejected_only_when_strict():
    schedule = Schedule(
        name="s", task="json.dumps", trigger=IntervalTrigger("1m"), routing=Routing(queue="q")
    )
    InlineSubmitter().validate(schedule)
    with pytest.raises(InvalidSchedule) as info:
        InlineSubmitter(strict=True).validate(schedule)
    assert info.value.field == "queue"


def _loop(store: MemoryStore, submitter: InlineSubmitter, clock: FakeClock) -> Scheduler:
    return Scheduler(store, submitter, settings=Settings(scheduler_id="s1"), clock=clock)


def test_inline_task_completion_is_recorded_after_the_submission():
    clock = FakeClock(START)
    store = MemoryStore(clock)
    submitter = InlineSubmitter(store)
    submitter.register("t.ok", record_call)
    submitter.register("t.bad", explode)
    store.publish(
        [
            Schedule(name="ok", task="t.ok", trigger=IntervalTrigger(10), args=("hi",)),
            Schedule(name="bad", task="t.bad", trigger=IntervalTrigger(10)),
        ]
    )
    loop = _loop(store, submitter, clock)
    loop.run_once()
    clock.advance(10)
    result = loop.run_once()
    assert result.submitted == 2
    assert calls == [(("hi",), {})]
    by_name = {e.schedule_name: e for e in store.executions()}
    ok, bad = by_name["ok"], by_name["bad"]
    assert ok.status is ExecutionStatus.SUCCEEDED and ok.submitted_at is not None
    assert ok.finished_at is not None and ok.attempts == 1
    assert bad.status is ExecutionStatus.FAILED and bad.submitted_at is not None
    assert bad.error is not None and "kaboom" in bad.error
    assert store.get("ok").last_status == "succeeded"


def test_bind_gives_the_store_to_a_submitter_created_without_one():
    clock = FakeClock(START)
    store = MemoryStore(clock)
    submitter = InlineSubmitter()
    submitter.register("t.ok", record_call)
    submitter.bind(store)
    store.publish([Schedule(name="ok", task="t.ok", trigger=IntervalTrigger(10))])
    loop = _loop(store, submitter, clock)
    loop.run_once()
    clock.advance(10)
    loop.run_once()
    assert store.executions()[0].status is ExecutionStatus.SUCCEEDED


def test_load_submitter_knows_inline_and_passes_instances_through():
    inline = load_submitter("inline")
    assert isinstance(inline, InlineSubmitter)
    assert isinstance(inline, TaskSubmitter)
    assert load_submitter(inline) is inline


def test_load_submitter_loads_a_dotted_factory_with_options():
    submitter = load_submitter("goatbeat.submitters.inline:InlineSubmitter", strict=True)
    assert isinstance(submitter, InlineSubmitter) and submitter.strict


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("carrier-pigeon", "is not a submitter"),
        ("json:JSONDecoder", "is not a submitter"),
        ("nosuchmodule_xyz:Thing", "cannot import"),
        ("json:nothing_here", "no attribute"),
    ],
)
def test_load_submitter_rejects_bad_specs_naming_the_field(spec, fragment):
    with pytest.raises(InvalidValue, match=fragment) as info:
        load_submitter(spec)
    assert info.value.field == "submitter"


def test_load_submitter_reports_missing_constructor_arguments_as_a_value_error():
    # The Redis-backed submitters need a connection; without one the error says so.
    with pytest.raises(InvalidValue) as info:
        load_submitter("rq")
    assert info.value.field == "submitter"
