"""Conformance: notify/wait wake-ups (every store)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from goatbeat.core.errors import InvalidValue
from goatbeat.core.store import ScheduleStore
from tests.conformance.conftest import Backend
from tests.conformance.helpers import hourly


def _drain(store: ScheduleStore) -> None:
    while store.wait(0.05):
        pass


def _waiter_and_notifier(backend: Backend) -> tuple[ScheduleStore, ScheduleStore]:
    waiter = backend.make()
    waiter.migrate()  # also opens its connection, so it is listening from here on
    notifier = backend.make()
    _drain(waiter)
    return waiter, notifier


def _wait_in_thread(store: ScheduleStore, timeout: float) -> tuple[threading.Thread, list[float]]:
    """Start ``store.wait(timeout)`` in a thread; the list gets the monotonic instant it woke
    (only if it woke before the timeout)."""
    out: list[float] = []

    def run() -> None:
        if store.wait(timeout):
            out.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_notify_wakes_a_waiter_before_its_timeout(backend: Backend) -> None:
    waiter, notifier = _waiter_and_notifier(backend)
    notifier.now()  # connected already, so the latency below is the notification's own
    thread, woke = _wait_in_thread(waiter, 20.0)
    time.sleep(0.2)

    sent = time.monotonic()
    notifier.notify("schedule:42")

    thread.join(25)
    assert woke, "wait() reached its timeout"
    print(f"\n{backend.kind}: woke {(woke[0] - sent) * 1000:.1f} ms after notify()")


def test_wait_times_out_when_nothing_happens(backend: Backend) -> None:
    waiter, _ = _waiter_and_notifier(backend)
    started = time.monotonic()
    assert waiter.wait(0.3) is False
    assert time.monotonic() - started >= 0.25


def test_a_notification_sent_before_wait_is_not_lost(backend: Backend) -> None:
    waiter, notifier = _waiter_and_notifier(backend)
    notifier.notify("run:7")
    assert waiter.wait(5.0) is True


ACTIONS: dict[str, Callable[[ScheduleStore], object]] = {
    "publish": lambda s: s.publish([hourly("new-one")]),
    "set_enabled": lambda s: s.set_enabled("existing", False),
    "request_run": lambda s: s.request_run("existing"),
    "release_lease": lambda s: s.release_lease(
        "scheduler",
        "me",
        s.acquire_lease("scheduler", "me", timedelta(seconds=30)).token,  # type: ignore[union-attr]
    ),
    "delete": lambda s: s.delete("existing"),
    "prune": lambda s: s.prune([]),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_changes_a_scheduler_must_see_wake_it(backend: Backend, action: str) -> None:
    waiter, notifier = _waiter_and_notifier(backend)
    notifier.publish([hourly("existing")])
    _drain(waiter)

    ACTIONS[action](notifier)

    assert waiter.wait(5.0) is True


@pytest.mark.parametrize(
    "payload", ["hello", "schedule:", "schedule:1; drop table x", "lease:" + "x" * 65, "", "run:-1"]
)
def test_notify_refuses_payloads_that_are_not_identifiers(
    store: ScheduleStore, payload: str
) -> None:
    with pytest.raises(InvalidValue) as excinfo:
        store.notify(payload)
    assert excinfo.value.field == "payload"


@pytest.mark.parametrize("payload", ["schedule:1", "run:123456", "lease:scheduler"])
def test_notify_accepts_identifiers(store: ScheduleStore, payload: str) -> None:
    store.wait(0)  # a store hears notifications from its first wait() on
    store.notify(payload)
    assert store.wait(5.0) is True
