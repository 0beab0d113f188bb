"""The worker-side completion reporter: what counts as goatbeat's message, and that a report
never fails the task (the backends themselves: tests/e2e/test_completions.py)."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from goatbeat.completion import DATABASE_ENV, Reporter, error_text, looks_like_key
from goatbeat.completion.celery import task_key
from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import InvalidValue
from goatbeat.core.health import Outcome
from goatbeat.core.model import ExecutionStatus, Schedule
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_reports_reach_the_execution_with_the_workers_name() -> None:
    store = MemoryStore(FakeClock(START))
    store.publish([Schedule(name="job", task="tasks.job", trigger=IntervalTrigger("1h"))])
    key = store.request_run("job").idempotency_key
    reporter = Reporter(store)
    assert reporter.started(key)
    assert reporter.finished(key, Outcome.FAILED, error="ValueError: bad", runtime=0.5)
    [execution] = store.executions(name="job")
    assert (execution.status, execution.error, execution.runtime) == (
        ExecutionStatus.FAILED,
        "ValueError: bad",
        0.5,
    )
    assert execution.worker is not None and execution.worker.endswith(f":{os.getpid()}")
    assert not reporter.started(None)  # not goatbeat's message: nothing done
    assert not reporter.finished("", Outcome.SUCCEEDED)


def test_a_report_that_cannot_be_written_is_logged_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reporter = Reporter("postgresql://nobody@127.0.0.1:1/goatbeat?connect_timeout=1")
    with caplog.at_level(logging.WARNING, logger="goatbeat"):
        assert not reporter.finished("job:2026-03-01T12:00:00Z", Outcome.SUCCEEDED)
    [record] = caplog.records
    assert record.getMessage() == "occurrence.finished"
    assert record.goatbeat["recorded"] is False  # type: ignore[attr-defined]
    assert "StoreError" in record.goatbeat["report_error"]  # type: ignore[attr-defined]
    reporter.close()


def test_a_reporter_needs_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    with pytest.raises(InvalidValue) as info:
        Reporter()
    assert info.value.field == "database" and DATABASE_ENV in str(info.value)
    monkeypatch.setenv(DATABASE_ENV, "sqlite:///nowhere.db")
    assert Reporter().target == "sqlite:///nowhere.db"
    with pytest.raises(InvalidValue):
        Reporter(42)  # type: ignore[arg-type]


def test_only_goatbeats_celery_tasks_are_reported() -> None:
    key = "daily-report:2026-03-01T08:00:00Z"
    with_header = SimpleNamespace(
        request=SimpleNamespace(headers={"goatbeat_idempotency_key": key})
    )
    flattened = SimpleNamespace(request=SimpleNamespace(headers=None, goatbeat_idempotency_key=key))
    bare = SimpleNamespace(request=SimpleNamespace(headers=None))
    assert task_key(with_header, "x") == key
    assert task_key(flattened, "x") == key
    assert task_key(bare, key) == key  # a retry that lost its headers keeps the task id
    assert task_key(bare, "d7c6b1e2-5a1f-4f8e-9a7b-2b1e0c9d8f7a") is None
    assert looks_like_key("ping:manual:2026-03-01T08:00:00.123456Z")
    assert not looks_like_key("2026-03-01T08:00:00Z") and not looks_like_key(None)


def test_an_error_is_its_type_and_message() -> None:
    assert error_text(ValueError("bad day")) == "ValueError: bad day"
    assert error_text(KeyError()) == "KeyError"
    assert error_text(None) is None
