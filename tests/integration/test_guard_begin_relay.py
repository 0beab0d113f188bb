"""The idempotency guard takes its key through the completion reporter (RQ's work horses:
goatbeat.idempotency, goatbeat.completion.relay ``begins=True``, goatbeat.core.handoff): with
such a reporter for the ledger's database, a guarded delivery runs no statement on its own
path (the reporter commits ``delivery_begin`` before it answers, and the success after); a
redelivery is skipped and counted; the reporter writes what its pipe holds before a begin;
with the reporter gone the key is taken on the task's path; a begin the reporter committed
without answering is still this delivery's. A real reporter process on a real PostgreSQL."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from goatbeat.completion import relay as relay_module
from goatbeat.completion.relay import LedgerReporter, Relay, RelayedReporter
from goatbeat.core import handoff
from goatbeat.core.model import ExecutionStatus, Schedule
from goatbeat.core.skips import take_skip
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.idempotency import SKIPPED, Guard
from goatbeat.idempotency.postgres import PostgresLedger
from goatbeat.stores import open_store

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

GUARD = 30.0  # seconds: against a hang, not an expectation


class CountingLedger(PostgresLedger):
    """A PostgresLedger noting each statement it runs on the task's own path."""

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
    """A reporter process that also takes the guard's keys, as RQ's job class starts it."""
    made = RelayedReporter(database)
    relay = made.start_relay(begins=True)
    assert relay is not None and relay.begin_path is not None
    try:
        yield made
    finally:
        relay.close()
        if relay.process.poll() is None:
            os.kill(relay.pid, signal.SIGCONT)
        relay.process.wait(GUARD)
        made.close()


def _read(database: str, key: str) -> Any:
    reader = PostgresLedger(database)
    try:
        return reader.read(key)
    finally:
        reader.close()


def _wait_for(what: Callable[[], bool], message: str) -> None:
    deadline = time.monotonic() + GUARD
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.02)


class Body:
    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> str:
        self.runs += 1
        return "done"


def test_a_delivery_takes_its_key_through_the_reporter_and_runs_no_statement_itself(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    key = keys[0]
    body = Body()
    assert Guard(ledger).run(key, body) == "done"
    assert ledger.statements == []
    assert body.runs == 1
    _wait_for(lambda: _read(database, key).state == "succeeded", "the reporter never wrote it")
    found = _read(database, key)
    assert (found.attempts, found.duplicates, found.expires_at) == (1, 0, None)


def test_the_reporter_commits_the_begin_before_it_answers(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    guard = Guard(ledger, lease=timedelta(hours=1))
    seen: list[Any] = []
    assert guard.run(keys[0], lambda: seen.append(_read(database, keys[0]))) is None
    (row,) = seen
    # In the body: the key is already running for this delivery, its lease from the begin.
    assert row is not None and row.state == "running" and row.attempts == 1
    assert row.expires_at is not None and row.expires_at > row.started_at
    assert ledger.statements == []


def test_a_redelivery_is_skipped_counted_and_sees_the_success_still_in_the_pipe(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    key = keys[0]
    guard = Guard(ledger)
    body = Body()
    assert guard.run(key, body) == "done"
    # The success went down the pipe (the reporter gathers for a while); the redelivery's
    # begin is answered after the reporter wrote it: the key reads succeeded.
    assert guard.run(key, body) is SKIPPED
    assert take_skip(key) == (True, "succeeded")
    assert body.runs == 1
    assert ledger.statements == []
    found = _read(database, key)
    assert (found.state, found.attempts, found.duplicates) == ("succeeded", 1, 1)


def test_a_failure_releases_the_key_on_the_task_path_and_the_retry_runs(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    def broken() -> None:
        raise RuntimeError("the body broke")

    guard = Guard(ledger)
    with pytest.raises(RuntimeError):
        guard.run(keys[0], broken)
    assert ledger.statements == ["delivery_failed"]
    body = Body()
    assert guard.run(keys[0], body) == "done"
    assert body.runs == 1
    _wait_for(lambda: _read(database, keys[0]).state == "succeeded", "never written")
    assert _read(database, keys[0]).attempts == 2


def test_with_the_reporter_gone_the_key_is_taken_on_the_task_path(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    relay = reporter.relay
    assert relay is not None
    os.kill(relay.pid, signal.SIGKILL)
    relay.process.wait(GUARD)
    body = Body()
    assert Guard(ledger).run(keys[0], body) == "done"
    assert body.runs == 1
    assert ledger.statements == ["delivery_begin", "delivery_succeeded"]
    assert _read(database, keys[0]).state == "succeeded"


def test_a_stuck_reporter_is_waited_for_a_bounded_time_and_then_runs_nothing_late(
    database: str,
    keys: list[str],
    ledger: CountingLedger,
    reporter: RelayedReporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_module, "BEGIN_WAIT", 0.5)
    relay = reporter.relay
    assert relay is not None
    os.kill(relay.pid, signal.SIGSTOP)
    body = Body()

    def fails() -> None:
        body()
        raise RuntimeError("the body broke")

    with pytest.raises(RuntimeError):
        Guard(ledger).run(keys[0], fails)
    assert ledger.statements == ["delivery_begin", "delivery_failed"]
    os.kill(relay.pid, signal.SIGCONT)
    # The reporter, woken, does not take the key for the delivery that gave up on it: the
    # key stays failed, so the retry runs.
    again = Body()
    assert Guard(ledger).run(keys[0], again) == "done"
    assert (body.runs, again.runs) == (1, 1)
    found = _read(database, keys[0])
    assert found.attempts == 2 and found.duplicates == 0


def test_a_begin_the_reporter_committed_without_answering_is_still_this_deliverys(
    database: str, keys: list[str], ledger: CountingLedger
) -> None:
    other = PostgresLedger(database)

    def committed_then_lost(key: str, owner: str, lease: float | None) -> None:
        other.begin(key, owner=owner, lease=None)
        return None  # the answer never came

    handoff.offer_begin(database, committed_then_lost)  # type: ignore[arg-type]
    try:
        body = Body()
        assert Guard(ledger).run(keys[0], body) == "done"
        assert body.runs == 1
        assert ledger.statements == ["delivery_begin", "delivery_read", "delivery_succeeded"]
        # Taken by someone else: skipped, as always.
        assert other.begin(keys[1], owner="w:1:other", lease=None)
        assert Guard(ledger).run(keys[1], body) is SKIPPED
        assert body.runs == 1
    finally:
        handoff.withdraw_begin(database, committed_then_lost)  # type: ignore[arg-type]
        other.close()


def test_a_relay_without_begins_takes_no_keys(database: str) -> None:
    relay = Relay(database)
    try:
        assert relay.begin_path is None
        assert relay.begin("job:2026-12-01T08:00:00Z", "w:1:a", None) is None
    finally:
        relay.close()
        relay.process.wait(GUARD)


def test_the_started_report_sent_before_the_begin_is_written_when_the_body_runs(
    database: str, keys: list[str], ledger: CountingLedger, reporter: RelayedReporter
) -> None:
    key = keys[0]
    assert reporter.started(key)
    seen: list[ExecutionStatus] = []
    assert Guard(ledger).run(key, lambda: seen.append(_status(database, key))) is None
    # The reporter wrote the pipe's report with the begin (one transaction), before it
    # answered: the body sees its run running.
    assert seen == [ExecutionStatus.RUNNING]
    assert ledger.statements == []


def test_the_reporter_asked_twice_for_one_delivery_answers_taken_twice(database: str) -> None:
    writer = LedgerReporter(database)
    store = open_store(database)
    try:
        key = store.request_run("job").idempotency_key
        assert writer.begin(key, "w:1:a", None) == (True, None)
        # Its commit landed but the answer was lost, and it is asked again: still its own.
        assert writer.begin(key, "w:1:a", None) == (True, None)
        assert writer.begin(key, "w:1:b", None) == (False, "running")
        found = _read(database, key)
        assert (found.owner, found.attempts, found.duplicates) == ("w:1:a", 1, 1)
    finally:
        store.close()
        writer.close()


def _status(database: str, key: str) -> ExecutionStatus:
    store = open_store(database)
    try:
        found = {e.idempotency_key: e.status for e in store.executions(name="job", limit=100)}
        return found[key]
    finally:
        store.close()
