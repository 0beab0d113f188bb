"""The idempotency guard's success through the completion reporter (goatbeat.idempotency,
goatbeat.completion.relay): with a reporter process for the ledger's database, a guarded
delivery commits once on its own path (taking the key) and the reporter records the success
in its next batch; a redelivery meanwhile finds the key running and is skipped; a reporter
killed with the success unwritten leaves the key as a delivery that died mid-body. Without a
reporter (or for a failure, ``record="after"``, a lease near its end) nothing changes. A real
reporter process on a real PostgreSQL database."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from goatbeat.completion.relay import SUCCEEDED, LedgerReporter, RelayedReporter, write
from goatbeat.core.health import Outcome
from goatbeat.core.model import ExecutionStatus, Schedule
from goatbeat.core.skips import take_skip
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.idempotency import SKIPPED, Guard
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.stores import open_store

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

GUARD = 30.0  # seconds: against a hang, not an expectation


class CountingLedger(PostgresLedger):
    """A PostgresLedger noting each statement it runs: each is one autocommit commit on the
    task's own path."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.statements: list[str] = []

    def _fetch(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.statements.append(name)
        return super()._fetch(name, params)


@pytest.fixture
def database(pg_dsn: str) -> str:
    store = open_store(pg_dsn)
    try:
        store.migrate()
        store.publish([Schedule(name="job", task="tasks.job", trigger=IntervalTrigger("1h"))])
    finally:
        store.close()
    return pg_dsn


@pytest.fixture
def keys(database: str) -> list[str]:
    store = open_store(database)
    try:
        return [store.request_run("job").idempotency_key for _ in range(3)]
    finally:
        store.close()


@pytest.fixture
def ledger(database: str) -> Iterator[CountingLedger]:
    opened = CountingLedger(database)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def reporter(database: str) -> Iterator[RelayedReporter]:
    """Completion reports on: this process's reporter process, as a worker starts it."""
    made = RelayedReporter(database)
    relay = made.start_relay()
    assert relay is not None
    try:
        yield made
    finally:
        relay.close()
        with_pid = relay.process
        if with_pid.poll() is None:
            os.kill(with_pid.pid, signal.SIGCONT)
        with_pid.wait(GUARD)
        made.close()


def _state(database: str, key: str) -> str | None:
    reader = PostgresLedger(database)
    try:
        row = reader.read(key)
        return None if row is None else row.state
    finally:
        reader.close()


def _wait_for(what: Callable[[], bool], message: str) -> None:
    deadline = time.monotonic() + GUARD
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.02)


def _status(database: str, key: str) -> ExecutionStatus:
    store = open_store(database)
    try:
        found = {e.idempotency_key: e.status for e in store.executions(name="job", limit=100)}
        return found[key]
    finally:
        store.close()


class Body:
    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> str:
        self.runs += 1
        return "done"


def test_with_a_reporter_the_task_path_commits_once_and_the_reporter_records_the_success(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    key = keys[0]
    guard = Guard(ledger)
    body = Body()
    assert reporter.started(key)
    assert guard.run(key, body) == "done"
    assert reporter.finished(key, Outcome.SUCCEEDED, runtime=0.01)
    assert ledger.statements == ["delivery_begin"]  # not delivery_succeeded too
    _wait_for(lambda: _state(database, key) == "succeeded", "the reporter never wrote it")
    row = PostgresLedger(database)
    try:
        found = row.read(key)
    finally:
        row.close()
    assert found is not None
    assert (found.attempts, found.duplicates, found.expires_at) == (1, 0, None)
    assert found.finished_at is not None
    _wait_for(lambda: _status(database, key) is ExecutionStatus.SUCCEEDED, "no report written")
    assert body.runs == 1


def test_without_a_reporter_the_success_is_committed_on_the_task_path(
    database: str, keys: list[str], ledger: CountingLedger
) -> None:
    guard = Guard(ledger)
    assert guard.run(keys[0], Body()) == "done"
    assert ledger.statements == ["delivery_begin", "delivery_succeeded"]
    assert _state(database, keys[0]) == "succeeded"  # at once


def test_a_reporter_for_another_database_url_is_not_given_the_success(
    database: str, keys: list[str], reporter: RelayedReporter
) -> None:
    # The same server under another URL: the reporter would write elsewhere, for all the
    # guard can tell. It commits the success itself.
    other = CountingLedger(database + ("&" if "?" in database else "?") + "connect_timeout=9")
    try:
        assert Guard(other).run(keys[0], Body()) == "done"
        assert other.statements == ["delivery_begin", "delivery_succeeded"]
    finally:
        other.close()
    assert _state(database, keys[0]) == "succeeded"


def test_with_a_reporter_a_failure_record_after_and_a_short_lease_stay_synchronous(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    def broken() -> None:
        raise RuntimeError("the body broke")

    with pytest.raises(RuntimeError):
        Guard(ledger).run(keys[0], broken)
    assert ledger.statements == ["delivery_begin", "delivery_failed"]
    assert _state(database, keys[0]) == "failed"  # at once: the backend's retry may run

    ledger.statements.clear()
    assert Guard(ledger, record="after").run(keys[1], Body()) == "done"
    assert ledger.statements == ["delivery_read", "delivery_succeeded"]

    ledger.statements.clear()
    assert Guard(ledger, lease=timedelta(seconds=20)).run(keys[2], Body()) == "done"
    assert ledger.statements == ["delivery_begin", "delivery_succeeded"]  # < HANDOFF_MARGIN


def test_a_long_lease_hands_the_success_to_the_reporter(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    assert Guard(ledger, lease=timedelta(hours=1)).run(keys[0], Body()) == "done"
    assert ledger.statements == ["delivery_begin"]
    _wait_for(lambda: _state(database, keys[0]) == "succeeded", "the reporter never wrote it")


def test_a_redelivery_while_the_success_is_pending_is_skipped_not_run_again(
    database: str,
    keys: list[str],
    ledger: CountingLedger,
    reporter: RelayedReporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = keys[0]
    assert reporter.relay is not None
    os.kill(reporter.relay.pid, signal.SIGSTOP)  # the success stays in the pipe
    guard = Guard(ledger)
    body = Body()
    assert guard.run(key, body) == "done"
    assert reporter.finished(key, Outcome.SUCCEEDED, runtime=0.01)
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        assert guard.run(key, body) is SKIPPED  # the redelivery
        # Its completion report: not a success of its own (nothing sent), the skip logged.
        assert reporter.skipped_success(key)
    assert body.runs == 1
    # The skip reads as today's skip of a key held by a running delivery.
    skips = [r for r in caplog.records if r.getMessage() == "delivery.skipped"]
    assert [getattr(r, "state", None) for r in skips] == ["running"], caplog.records
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "occurrence.skipped"
    ]
    found = ledger.read(key)
    assert found is not None and (found.state, found.duplicates) == ("running", 1)
    os.kill(reporter.relay.pid, signal.SIGCONT)
    _wait_for(lambda: _state(database, key) == "succeeded", "the reporter never wrote it")
    _wait_for(lambda: _status(database, key) is ExecutionStatus.SUCCEEDED, "no report written")
    assert guard.run(key, body) is SKIPPED
    assert take_skip(key) == (True, "succeeded")
    assert body.runs == 1


def test_a_reporter_killed_with_the_success_unwritten_leaves_the_key_running(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    relay = reporter.relay
    assert relay is not None
    os.kill(relay.pid, signal.SIGSTOP)
    guard = Guard(ledger)
    body = Body()
    assert guard.run(keys[0], body) == "done"
    os.kill(relay.pid, signal.SIGKILL)
    relay.process.wait(GUARD)
    # As a delivery that died mid-body: running, and without a lease never run again.
    assert _state(database, keys[0]) == "running"
    assert guard.run(keys[0], body) is SKIPPED
    assert body.runs == 1
    # With its reporter gone, the next success is committed on the task path again.
    ledger.statements.clear()
    assert guard.run(keys[1], body) == "done"
    assert ledger.statements == ["delivery_begin", "delivery_succeeded"]
    assert _state(database, keys[1]) == "succeeded"
    assert relay.gone


def _line(report: dict[str, Any]) -> bytes:
    import json

    return json.dumps(report).encode()


def test_the_reporter_writes_a_success_in_the_batchs_transaction_with_the_reports(
    database: str, keys: list[str]
) -> None:
    held = PostgresLedger(database)
    writer = LedgerReporter(database)
    try:
        assert held.begin(keys[0], owner="w:1:a", lease=None)
        assert held.begin(keys[1], owner="w:1:b", lease=None)
        success = {"event": SUCCEEDED, "key": keys[0], "owner": "w:1:a"}
        before = _status(database, keys[0])
        # In the transaction: rolled back with it.
        with pytest.raises(RuntimeError), writer.transaction() as record:
            writer.store().record_reports([{"event": "started", "key": keys[0], "worker": "w:1"}])  # type: ignore[attr-defined]
            record(success)
            raise RuntimeError("rolled back")
        assert _state(database, keys[0]) == "running"
        assert _status(database, keys[0]) is before is not ExecutionStatus.RUNNING
        # A batch: reports and successes, one commit.
        write(
            writer,
            [
                _line({"event": "started", "key": keys[0], "worker": "w:1"}),
                _line(success),
                _line({"event": "finished", "key": keys[0], "outcome": "succeeded",
                       "error": None, "runtime": 0.1, "worker": "w:1"}),
            ],
        )  # fmt: skip
        assert _state(database, keys[0]) == "succeeded"
        assert _status(database, keys[0]) is ExecutionStatus.SUCCEEDED
        # A batch the store refuses (a bad outcome) is written one by one: the success too.
        write(
            writer,
            [
                _line({"event": "finished", "key": keys[1], "outcome": "nonsense",
                       "error": None, "runtime": 0.1, "worker": "w:1"}),
                _line({"event": SUCCEEDED, "key": keys[1], "owner": "w:1:b"}),
            ],
        )  # fmt: skip
        assert _state(database, keys[1]) == "succeeded"
    finally:
        writer.close()
        held.close()
