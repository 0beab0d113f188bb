"""Structured logging: the JSON formatter keeps every field the scheduler logs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.model import ExecutionKind, Schedule
from goatbeat.core.observability import EVENTS, JsonFormatter, log_event, logger
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from goatbeat.submitters.inline import InlineSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def noop() -> None:
    return None


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def parsed(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_formatter_round_trips_every_field(json_lines):
    log_event(
        "occurrence.submitted",
        schedule="daily-report",
        idempotency_key="daily-report:2026-12-01T08:00:00Z",
        scheduler_id="web-1",
        fencing_token=7,
        scheduled_at=datetime(2026, 12, 1, 8, tzinfo=UTC),
        lateness=0.012,
        kind=ExecutionKind.SCHEDULED,
        retry_in=timedelta(seconds=2),
        names=["a", "b"],
        message="a field named like a LogRecord attribute is kept too",
    )
    (record,) = parsed(json_lines)
    assert record["event"] == "occurrence.submitted"
    assert record["level"] == "INFO" and record["logger"] == "goatbeat"
    assert record["ts"].endswith("Z")
    assert record["schedule"] == "daily-report"
    assert record["idempotency_key"] == "daily-report:2026-12-01T08:00:00Z"
    assert record["scheduler_id"] == "web-1"
    assert record["fencing_token"] == 7
    assert record["scheduled_at"] == "2026-12-01T08:00:00Z"
    assert record["lateness"] == 0.012
    assert record["kind"] == "scheduled"
    assert record["retry_in"] == 2.0
    assert record["names"] == ["a", "b"]
    assert record["message"].startswith("a field named")


def test_a_scheduler_iteration_logs_parseable_events_with_their_fields(json_lines):
    clock = FakeClock(START)
    store = MemoryStore(clock)
    submitter = InlineSubmitter(store)
    submitter.register("t.noop", noop)
    store.publish([Schedule(name="tick", task="t.noop", trigger=IntervalTrigger(10))])
    loop = Scheduler(store, submitter, settings=Settings(scheduler_id="web-1"), clock=clock)
    loop.run_once()
    clock.advance(13)
    loop.run_once()

    records = parsed(json_lines)
    assert {r["event"] for r in records} <= EVENTS
    acquired = next(r for r in records if r["event"] == "lease.acquired")
    assert acquired["scheduler_id"] == "web-1" and acquired["fencing_token"] == 1
    claimed = next(r for r in records if r["event"] == "occurrence.claimed")
    submitted = next(r for r in records if r["event"] == "occurrence.submitted")
    for record in (claimed, submitted):
        assert record["schedule"] == "tick"
        assert record["idempotency_key"] == "tick:2026-03-01T12:00:10Z"
        assert record["scheduler_id"] == "web-1"
        assert record["fencing_token"] == 1
        assert record["scheduled_at"] == "2026-03-01T12:00:10Z"
        assert record["lateness"] == 3.0
    assert submitted["level"] == "INFO" and claimed["level"] == "DEBUG"
    assert submitted["backend_task_id"] == "tick:2026-03-01T12:00:10Z"


def test_nothing_is_built_when_the_level_is_disabled(json_lines):
    logger.setLevel(logging.WARNING)
    log_event("occurrence.submitted", schedule="x")
    log_event("scheduler.error", level=logging.ERROR, error="boom")
    assert [r["event"] for r in parsed(json_lines)] == ["scheduler.error"]


def test_the_cli_text_formatter_keeps_the_fields_readable():
    from goatbeat.cli.logs import TextFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        log_event(
            "occurrence.submit_retry",
            schedule="s",
            scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
            error="broker down",
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    line = stream.getvalue().strip()
    assert "occurrence.submit_retry" in line
    assert "schedule=s" in line
    assert "scheduled_at=2026-01-01T00:00:00Z" in line
    assert 'error="broker down"' in line
