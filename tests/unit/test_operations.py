"""The scheduler's operations side: heartbeats, the record of misses, alerts and observers
(MemoryStore, FakeClock), and alert delivery (a callable, a real HTTP server on loopback)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from goatbeat.beat import alerter_for
from goatbeat.core.alerts import Alert, Alerter, AlertKind, webhook
from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings, parse_settings
from goatbeat.core.errors import ConfigError, InvalidValue, StoreError
from goatbeat.core.health import Outcome, Role, SchedulerBeat
from goatbeat.core.model import MisfirePolicy, Miss, Occurrence, Schedule
from goatbeat.core.scheduler import ALERT_CHECK_INTERVAL, IterationResult, Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Accepting(AcceptingSubmitter):
    name: ClassVar[str] = "accepting"

    def submit(self, occurrence: Occurrence) -> str | None:
        return f"task-{occurrence.execution_id}"


class Recorder:
    """An alert hook and a scheduler observer that remember what they were told."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self.iterations: list[tuple[IterationResult, float]] = []
        self.lateness: list[float] = []

    def __call__(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def iteration(self, result: IterationResult, duration: float) -> None:
        self.iterations.append((result, duration))

    def submitted(self, lateness: float) -> None:
        self.lateness.append(lateness)


def hourly(name: str, **kw: Any) -> Schedule:
    kw.setdefault("last_run_at", START)  # due at START + 1h
    return Schedule(name=name, task=f"tasks.{name}", trigger=IntervalTrigger("1h"), **kw)


def make(
    *schedules: Schedule, recorder: Recorder | None = None, **settings: Any
) -> tuple[Scheduler, MemoryStore, FakeClock]:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish(list(schedules))
    alerter = Alerter([recorder]) if recorder is not None else None
    sched = Scheduler(
        store,
        Accepting(),
        settings=parse_settings({"scheduler_id": "s1", **settings}),
        clock=clock,
        alerter=alerter,
    )
    return sched, store, clock


def delivered(sched: Scheduler) -> None:
    """Wait for the alerts queued so far to be handed over (close drains the queue)."""
    assert sched.alerter is not None
    sched.alerter.close()


# -- heartbeats ------------------------------------------------------------------------------


def test_the_heartbeat_names_the_leader_and_is_written_once_per_renewal() -> None:
    sched, store, clock = make(hourly("a"))
    result = sched.run_once()
    assert result.leader
    [row] = store.status().schedulers
    assert (row.name, row.role, row.fencing_token) == ("s1", Role.LEADER, 1)
    assert row.scheduler_id == sched.instance  # this process, not the id alone
    assert row.expires_at == START + timedelta(seconds=40)  # lease_ttl + renew interval

    clock.advance(5)
    sched.run_once()
    assert store.status().schedulers[0].heartbeat_at == START  # not rewritten yet
    clock.advance(5)
    sched.run_once()
    assert store.status().schedulers[0].heartbeat_at == START + timedelta(seconds=10)

    other = Scheduler(store, Accepting(), settings=Settings(scheduler_id="s2"), clock=clock)
    assert not other.run_once().leader
    roles = [(p.name, p.role) for p in store.status().schedulers]
    assert roles == [("s1", Role.LEADER), ("s2", Role.STANDBY)]

    assert sched.release()
    assert [p.name for p in store.status().schedulers] == ["s2"]


def test_a_role_change_is_written_at_once() -> None:
    sched, store, clock = make(hourly("a"))
    standby = Scheduler(store, Accepting(), settings=Settings(scheduler_id="s2"), clock=clock)
    sched.run_once()
    standby.run_once()
    sched.release()
    clock.advance(1)  # well within the renewal interval
    assert standby.run_once().leader
    [row] = store.status().schedulers
    assert (row.name, row.role, row.fencing_token) == ("s2", Role.LEADER, 2)


class NoHeartbeatStore(MemoryStore):
    """A store at an older schema: the operations tables are not there."""

    def heartbeat(self, beat: SchedulerBeat) -> None:
        raise StoreError('relation "goatbeat_scheduler" does not exist')

    def record_misses(self, misses: Any, *, scheduler_id: str) -> None:
        raise StoreError('relation "goatbeat_miss" does not exist')


def test_operations_that_fail_are_logged_and_never_stop_dispatch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(START)
    store = NoHeartbeatStore(clock)
    store.publish([hourly("a", misfire=MisfirePolicy.SKIP, last_run_at=START - 3 * HOUR)])
    sched = Scheduler(store, Accepting(), settings=Settings(scheduler_id="s1"), clock=clock)
    with caplog.at_level(logging.WARNING, logger="goatbeat"):
        result = sched.run_once()
    assert result.leader and result.missed == 2 and result.submitted == 1
    stages = {
        r.goatbeat["stage"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "scheduler.error"
    }
    assert stages == {"heartbeat", "misses"}


# -- misses ----------------------------------------------------------------------------------

HOUR = timedelta(hours=1)


def test_dropped_occurrences_are_recorded_and_alerted_once_per_claim() -> None:
    recorder = Recorder()
    sched, store, clock = make(
        hourly("skipper", misfire=MisfirePolicy.SKIP, last_run_at=START - 4 * HOUR),
        hourly("fine"),
        recorder=recorder,
    )
    result = sched.run_once()
    assert result.missed == 3
    assert store.status().missed == 3
    sched.run_once()
    delivered(sched)
    [alert] = recorder.alerts
    assert (alert.kind, alert.schedule, alert.details["missed"]) == (
        AlertKind.MISSED,
        "skipper",
        3,
    )
    assert "missed 3 run(s)" in alert.text and alert.scheduler_id == "s1"


# -- failing and overdue ---------------------------------------------------------------------


def _run_and_report(
    sched: Scheduler, store: MemoryStore, clock: FakeClock, outcome: Outcome
) -> None:
    clock.advance(HOUR.total_seconds())
    result = sched.run_once()
    assert result.claimed == 1
    [execution] = store.executions(name="job", limit=1)
    assert store.record_completion(execution.idempotency_key, outcome=outcome)


def test_failing_in_a_row_is_alerted_once_per_streak() -> None:
    recorder = Recorder()
    sched, store, clock = make(hourly("job"), recorder=recorder, alert_after_failures=2)
    _run_and_report(sched, store, clock, Outcome.FAILED)
    _run_and_report(sched, store, clock, Outcome.FAILED)  # the streak reaches 2 ...
    clock.advance(ALERT_CHECK_INTERVAL)
    sched.run_once()  # ... and the next look sees it
    _run_and_report(sched, store, clock, Outcome.FAILED)
    clock.advance(ALERT_CHECK_INTERVAL)
    sched.run_once()
    delivered(sched)
    failing = [a for a in recorder.alerts if a.kind is AlertKind.FAILING]
    assert [a.details["consecutive_failures"] for a in failing] == [2]
    assert "failed 2 time(s) in a row" in failing[0].text

    _run_and_report(sched, store, clock, Outcome.SUCCEEDED)
    clock.advance(ALERT_CHECK_INTERVAL)
    sched.run_once()  # the streak ended: forgotten
    _run_and_report(sched, store, clock, Outcome.FAILED)
    _run_and_report(sched, store, clock, Outcome.FAILED)
    clock.advance(ALERT_CHECK_INTERVAL)
    sched.run_once()
    delivered(sched)
    failing = [a for a in recorder.alerts if a.kind is AlertKind.FAILING]
    assert [a.details["consecutive_failures"] for a in failing] == [2, 2]


def test_a_run_that_does_not_succeed_in_time_is_alerted_as_overdue() -> None:
    recorder = Recorder()
    sched, store, clock = make(hourly("job"), recorder=recorder, overdue_after="10m")
    _run_and_report(sched, store, clock, Outcome.SUCCEEDED)
    _run_and_report(sched, store, clock, Outcome.RETRIED)  # still being retried ...
    clock.advance(5 * 60)
    sched.run_once()
    delivered(sched)
    assert [a.kind for a in recorder.alerts] == []
    clock.advance(6 * 60)  # ... past overdue_after (10m)
    sched.run_once()
    clock.advance(ALERT_CHECK_INTERVAL)
    sched.run_once()  # still overdue: not alerted again
    delivered(sched)
    [alert] = recorder.alerts
    assert (alert.kind, alert.schedule, alert.details["overdue"]) == (
        AlertKind.OVERDUE,
        "job",
        True,
    )
    assert "is overdue" in alert.text and "has not succeeded" in alert.text


def test_a_standby_raises_no_alerts() -> None:
    recorder = Recorder()
    sched, store, clock = make(hourly("job"), recorder=recorder, alert_after_failures=1)
    _run_and_report(sched, store, clock, Outcome.FAILED)
    standby = Scheduler(
        store,
        Accepting(),
        settings=parse_settings({"scheduler_id": "s2", "alert_after_failures": 1}),
        clock=clock,
        alerter=Alerter([recorder]),
    )
    clock.advance(1)
    assert not standby.run_once().leader
    assert standby.alerter is not None
    standby.alerter.close()
    assert recorder.alerts == []


# -- observers -------------------------------------------------------------------------------


def test_observers_see_every_iteration_and_each_submission_lateness() -> None:
    recorder = Recorder()
    sched, store, clock = make(hourly("a"), hourly("b", last_run_at=START + HOUR))
    sched.observe(recorder)
    clock.advance(3600 + 2)  # "a" is due since 2 s
    sched.run_once()
    [(result, duration)] = recorder.iterations
    assert result.leader and result.claimed == 1 and result.submitted == 1
    assert duration >= 0
    assert recorder.lateness == [2.0]


def test_a_failing_observer_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def iteration(self, result: IterationResult, duration: float) -> None:
            raise RuntimeError("observer bug")

        def submitted(self, lateness: float) -> None:
            raise RuntimeError("observer bug")

    sched, store, clock = make(hourly("a"))
    sched.observe(Broken())
    clock.advance(3600)
    with caplog.at_level(logging.ERROR, logger="goatbeat"):
        result = sched.run_once()
    assert result.submitted == 1
    assert sum("observer bug" in (r.exc_text or "") or r.exc_info is not None
               for r in caplog.records) == 2  # fmt: skip


# -- delivery --------------------------------------------------------------------------------


def _alert(name: str = "job") -> Alert:
    return Alert.missed(
        Miss(schedule_id=1, schedule_name=name, count=2), at=START, scheduler_id="s1"
    )


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 204

    def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        body["_content_type"] = self.headers["Content-Type"]
        type(self).received.append(body)
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def hook_url() -> Iterator[str]:
    _Hook.received = []
    _Hook.status = 204
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/goatbeat"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_webhook_posts_each_alert_as_json(hook_url: str) -> None:
    alerter = alerter_for(parse_settings({"alert_webhook": hook_url}))
    assert alerter is not None
    alerter.emit(_alert("one"))
    alerter.emit(_alert("two"))
    alerter.close()
    assert [(b["schedule"], b["kind"], b["event"]) for b in _Hook.received] == [
        ("one", "missed", "schedule.missed"),
        ("two", "missed", "schedule.missed"),
    ]
    body = _Hook.received[0]
    assert body["_content_type"] == "application/json"
    assert body["text"].startswith("goatbeat: schedule 'one' missed 2 run(s)")
    assert body["at"] == "2026-03-01T12:00:00Z" and body["details"]["missed"] == 2


def test_a_webhook_that_refuses_is_logged(hook_url: str, caplog: pytest.LogCaptureFixture) -> None:
    _Hook.status = 500
    alerter = Alerter([webhook(hook_url)])
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        alerter.emit(_alert())
        alerter.close()
    [record] = [r for r in caplog.records if r.getMessage().startswith("alert.")]
    assert record.getMessage() == "alert.failed" and "500" in record.goatbeat["error"]  # type: ignore[attr-defined]


def test_a_full_queue_drops_alerts_instead_of_waiting(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    seen: list[str] = []

    def slow(alert: Alert) -> None:
        seen.append(alert.schedule)
        release.wait(30)

    alerter = Alerter([slow], maxsize=1)
    with caplog.at_level(logging.WARNING, logger="goatbeat"):
        alerter.emit(_alert("first"))  # taken by the thread, which then waits
        while not seen:
            release.wait(0.01)
        assert alerter.emit(_alert("queued"))
        assert not alerter.emit(_alert("dropped"))
    release.set()
    alerter.close()
    assert seen == ["first", "queued"]
    assert [r.getMessage() for r in caplog.records] == ["alert.dropped"]


def test_the_alert_hook_is_imported_when_the_scheduler_starts() -> None:
    alerter = alerter_for(parse_settings({"alert_hook": "tests.unit.test_operations:_alert"}))
    assert alerter is not None and alerter.handlers == [_alert]
    with pytest.raises(InvalidValue) as info:
        alerter_for(parse_settings({"alert_hook": "tests.unit.nowhere:page"}))
    assert info.value.field == "alert_hook"
    with pytest.raises(InvalidValue, match="not callable"):
        alerter_for(parse_settings({"alert_hook": "tests.unit.test_operations:START"}))
    assert alerter_for(Settings()) is None


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("alert_hook", "page", "not a dotted path"),
        ("alert_hook", 42, "not a dotted path"),
        ("alert_webhook", "ftp://example.com/x", "not an http:// or https:// URL"),
        ("alert_after_failures", 0, "out of range"),
        ("overdue_after", "soon", "overdue_after"),
    ],
)
def test_alert_settings_are_checked_naming_the_key(key: str, value: object, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings({key: value})
    [line] = info.value.problems
    assert line.startswith(f"{key}:") and problem in line
