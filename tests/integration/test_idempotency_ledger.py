"""The idempotency guard and its ledgers (SQLite, PostgreSQL): what a duplicate delivery does
under each way of recording the key. The Django ledger runs the same SQL (PostgreSQL's); it is
exercised through a real worker in tests/django/test_idempotency_worker.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.errors import InvalidValue
from goatbeat.idempotency import SKIPPED, Guard, Ledger, guard_for, open_ledger
from goatbeat.stores import open_store

KEY = "report:2031-03-01T12:00:00Z"


@pytest.fixture
def ledger(database: str) -> Iterator[Ledger]:
    store = open_store(database)
    store.migrate()
    store.close()
    opened = open_ledger(database)
    try:
        yield opened
    finally:
        opened.close()


class Effects:
    """The side effect of the task body: a counter."""

    def __init__(self) -> None:
        self.count = 0

    def body(self) -> str:
        self.count += 1
        return "done"

    def failing(self) -> None:
        self.count += 1
        raise RuntimeError("the body broke")


def test_a_second_delivery_is_skipped_while_the_first_runs_and_after_it_succeeded(
    ledger: Ledger,
) -> None:
    guard = Guard(ledger)
    effects = Effects()
    ticket = guard.begin(KEY)  # the first delivery is running...
    assert ticket is not None
    assert guard.run(KEY, effects.body) is SKIPPED  # ...a duplicate arrives meanwhile
    guard.finish(ticket, succeeded=True)
    assert guard.run(KEY, effects.body) is SKIPPED  # and another after it succeeded
    assert effects.count == 0  # only skipped deliveries called run() here
    record = ledger.read(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.duplicates) == ("succeeded", 1, 2)
    assert record.finished_at is not None and record.expires_at is None


def test_a_failure_releases_the_key_so_the_backends_retry_runs(ledger: Ledger) -> None:
    guard = Guard(ledger)
    effects = Effects()
    with pytest.raises(RuntimeError, match="the body broke"):
        guard.run(KEY, effects.failing)
    assert ledger.read(KEY).state == "failed"  # type: ignore[union-attr]
    assert guard.run(KEY, effects.body) == "done"
    assert guard.run(KEY, effects.body) is SKIPPED
    assert effects.count == 2
    record = ledger.read(KEY)
    assert record is not None and (record.state, record.attempts) == ("succeeded", 2)


def test_without_a_lease_a_dead_workers_claim_is_never_run_again(ledger: Ledger) -> None:
    guard = Guard(ledger)
    assert guard.begin(KEY) is not None  # the worker dies here: no finish
    time.sleep(0.3)
    assert guard.begin(KEY) is None
    assert ledger.read(KEY).state == "running"  # type: ignore[union-attr]


def test_with_a_lease_a_dead_workers_claim_is_taken_over_once_it_expires(ledger: Ledger) -> None:
    guard = Guard(ledger, lease=timedelta(milliseconds=200))
    dead = guard.begin(KEY)
    assert dead is not None
    assert guard.begin(KEY) is None  # still within the lease: a duplicate
    time.sleep(0.4)
    effects = Effects()
    assert guard.run(KEY, effects.body) == "done"  # the redelivery runs it
    assert effects.count == 1
    # The presumed-dead one was only slow: its late failure does not undo the success.
    guard.finish(dead, succeeded=False)
    record = ledger.read(KEY)
    assert record is not None and (record.state, record.attempts) == ("succeeded", 2)


def test_record_after_runs_every_delivery_until_one_succeeded(ledger: Ledger) -> None:
    guard = Guard(ledger, record="after")
    effects = Effects()
    first = guard.begin(KEY)
    second = guard.begin(KEY)  # concurrent duplicate: runs too
    assert first is not None and second is not None
    with pytest.raises(RuntimeError):
        guard.run(KEY, effects.failing)  # a failure records nothing
    assert ledger.read(KEY) is None
    guard.finish(first, succeeded=True)
    guard.finish(second, succeeded=True)
    assert guard.run(KEY, effects.body) is SKIPPED
    record = ledger.read(KEY)
    assert record is not None
    assert (record.state, record.attempts, record.duplicates) == ("succeeded", 2, 1)


def test_a_message_without_a_key_runs_unguarded(ledger: Ledger) -> None:
    effects = Effects()
    guard = Guard(ledger)
    assert guard.run(None, effects.body) == "done"
    assert guard.run(None, effects.body) == "done"
    assert effects.count == 2


def test_concurrent_deliveries_run_the_body_once(database: str, ledger: Ledger) -> None:
    guard = Guard(ledger)
    effects = Effects()
    lock = threading.Lock()
    start = threading.Barrier(6)
    results: list[Any] = []

    def deliver() -> None:
        start.wait()

        def body() -> str:
            with lock:
                effects.count += 1
            time.sleep(0.05)
            return "done"

        results.append(guard.run(KEY, body))

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert effects.count == 1
    assert sorted(map(repr, results)) == ["'done'"] + ["SKIPPED"] * 5
    record = ledger.read(KEY)
    assert record is not None and (record.attempts, record.duplicates) == (1, 5)


def test_prune_deletes_finished_rows_before_the_cutoff_and_keeps_running_ones(
    ledger: Ledger,
) -> None:
    guard = Guard(ledger)
    guard.run("done:1", lambda: None)
    assert guard.begin("running:1") is not None
    time.sleep(0.05)
    record = ledger.read("done:1")
    assert record is not None and record.finished_at is not None
    assert ledger.prune(before=record.finished_at) == 0
    assert ledger.prune(before=record.finished_at + timedelta(seconds=1)) == 1
    assert ledger.read("done:1") is None
    assert ledger.read("running:1") is not None


@pytest.mark.parametrize(
    ("options", "field", "text"),
    [
        ({"record": "during"}, "record", "'during' is not 'before' or 'after'"),
        ({"lease": timedelta(0)}, "lease", "is not a positive timedelta"),
        ({"lease": 30}, "lease", "30 is not a positive timedelta"),
        ({"record": "after", "lease": timedelta(minutes=1)}, "lease", 'record="before" only'),
    ],
)
def test_bad_options_are_refused_when_the_task_is_declared(
    options: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(InvalidValue, match=text) as raised:
        guard_for(
            "sqlite:///x.db", record=options.get("record", "before"), lease=options.get("lease")
        )
    assert raised.value.field == field


def test_an_unusable_ledger_url_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidValue, match="mysql://x") as raised:
        open_ledger("mysql://x")
    assert raised.value.field == "database"
