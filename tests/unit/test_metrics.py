"""The Prometheus adapter: what a scheduler's iterations and the store's rows become, read
back with prometheus_client's own parser (MemoryStore, FakeClock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.errors import RetryableSubmitError, StoreError
from goatbeat.core.health import Outcome, StatusSnapshot
from goatbeat.core.model import MisfirePolicy, Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.metrics.prometheus import REFRESH, PrometheusObserver
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


class Submitter(AcceptingSubmitter):
    name: ClassVar[str] = "test"
    fail: ClassVar[set[str]] = set()

    def submit(self, occurrence: Occurrence) -> str | None:
        if occurrence.schedule_name in self.fail:
            raise RetryableSubmitError("down")
        return "t"


def hourly(name: str, **kw: Any) -> Schedule:
    kw.setdefault("last_run_at", START)
    return Schedule(name=name, task="tasks.x", trigger=IntervalTrigger("1h"), **kw)


def samples(observer: PrometheusObserver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(observer.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[Any, float], name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def setup(
    *schedules: Schedule, limit: int = 500
) -> tuple[Scheduler, MemoryStore, FakeClock, PrometheusObserver]:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish(list(schedules))
    sched = Scheduler(store, Submitter(), settings=Settings(scheduler_id="m1"), clock=clock)
    observer = PrometheusObserver(
        store, scheduler_id="m1", schedule_limit=limit, clock=clock, version="9.9"
    )
    sched.observe(observer)
    return sched, store, clock, observer


def test_the_process_counts_what_its_iterations_did() -> None:
    Submitter.fail = {"broken"}
    sched, store, clock, observer = setup(
        hourly("a"), hourly("b"), hourly("broken"), hourly("late", last_run_at=START - 3 * HOUR)
    )
    clock.advance(3600 + 1.5)
    sched.run_once()
    found = samples(observer)
    assert value(found, "goatbeat_lease_held") == 1.0
    assert value(found, "goatbeat_iterations_total") == 1.0
    assert value(found, "goatbeat_occurrences_claimed_total") == 4.0
    assert value(found, "goatbeat_occurrences_submitted_total") == 3.0
    assert value(found, "goatbeat_submit_failures_total", final="false") == 1.0
    assert value(found, "goatbeat_submit_failures_total", final="true") == 0.0
    assert value(found, "goatbeat_occurrences_missed_total") == 3.0
    assert value(found, "goatbeat_lateness_seconds_count") == 3.0
    # Each 1.5 s late ("late" runs its on-time instant; the three before it were dropped).
    assert value(found, "goatbeat_lateness_seconds_bucket", le="1.0") == 0.0
    assert value(found, "goatbeat_lateness_seconds_bucket", le="2.5") == 3.0
    assert value(found, "goatbeat_lateness_seconds_sum") == pytest.approx(3 * 1.5)
    assert value(found, "goatbeat_iteration_duration_seconds_count") == 1.0
    assert value(found, "goatbeat_scheduler_info", lease="scheduler", scheduler_id="m1",
                 version="9.9") == 1.0  # fmt: skip

    standby = Scheduler(store, Submitter(), settings=Settings(scheduler_id="m2"), clock=clock)
    other = PrometheusObserver(store, scheduler_id="m2", clock=clock)
    standby.observe(other)
    standby.run_once()
    assert value(samples(other), "goatbeat_lease_held") == 0.0
    Submitter.fail = set()


def test_the_database_view_has_series_only_for_schedules_with_something_to_say() -> None:
    sched, store, clock, observer = setup(
        hourly("good"),
        hourly("bad"),
        hourly("quiet", last_run_at=START + 10 * HOUR),
        hourly("skipper", misfire=MisfirePolicy.SKIP, last_run_at=START - 2 * HOUR),
    )
    clock.advance(3600)
    sched.run_once()  # reads the store after the iteration
    good, bad = (store.executions(name=n, limit=1)[0].idempotency_key for n in ("good", "bad"))
    store.record_completion(good, outcome=Outcome.SUCCEEDED)
    store.record_completion(bad, outcome=Outcome.FAILED, error="boom")
    clock.advance(REFRESH)
    sched.run_once()
    found = samples(observer)
    success = "goatbeat_schedule_last_success_timestamp_seconds"
    assert (
        value(found, success, schedule="good") == (START + HOUR + timedelta(seconds=0)).timestamp()
    )
    assert value(found, success, schedule="bad") is None
    failure = "goatbeat_schedule_last_failure_timestamp_seconds"
    assert value(found, failure, schedule="bad") == (START + HOUR).timestamp()
    assert value(found, "goatbeat_schedule_consecutive_failures", schedule="bad") == 1.0
    assert value(found, "goatbeat_schedule_missed_total", schedule="skipper") == 2.0
    assert value(found, "goatbeat_schedule_overdue", schedule="bad") == 0.0
    schedules = {dict(labels).get("schedule") for (_, labels) in found if labels}
    assert "quiet" not in schedules
    assert {"good", "bad", "skipper"} <= schedules
    assert value(found, "goatbeat_store_up") == 1.0
    assert value(found, "goatbeat_lease_valid") == 1.0
    assert value(found, "goatbeat_schedulers", role="leader") == 1.0
    assert value(found, "goatbeat_schedules_due") == 0.0
    assert value(found, "goatbeat_schedule_series_truncated") == 0.0

    clock.advance(20 * 60)  # past overdue_after (10m): "bad" has not succeeded since its run
    sched.run_once()
    assert value(samples(observer), "goatbeat_schedule_overdue", schedule="bad") == 1.0


def test_per_schedule_series_are_capped_overdue_first() -> None:
    sched, store, clock, observer = setup(
        *(hourly(f"s{i}", misfire=MisfirePolicy.SKIP, last_run_at=START - 2 * HOUR)
          for i in range(5)),
        limit=2,
    )  # fmt: skip
    clock.advance(60)
    sched.run_once()
    found = samples(observer)
    names = {dict(labels)["schedule"] for (n, labels) in found if n == "goatbeat_schedule_overdue"}
    assert names == {"s0", "s1"}
    assert value(found, "goatbeat_schedule_series_truncated") == 1.0


class DownStore(MemoryStore):
    down = False

    def status(self, **kwargs: Any) -> StatusSnapshot:
        if self.down:
            raise StoreError("connection refused")
        return super().status(**kwargs)


def test_the_store_is_read_at_most_once_per_refresh_and_a_failed_read_says_so() -> None:
    clock = FakeClock(START)
    store = DownStore(clock)
    store.publish([hourly("a")])
    sched = Scheduler(store, Submitter(), settings=Settings(scheduler_id="m1"), clock=clock)
    observer = PrometheusObserver(store, scheduler_id="m1", clock=clock, refresh=REFRESH)
    sched.observe(observer)
    sched.run_once()
    assert value(samples(observer), "goatbeat_schedules_due") == 0.0
    clock.advance(3600)
    sched.run_once()  # within the refresh: the first read still stands
    assert value(samples(observer), "goatbeat_schedules_due") == 0.0
    store.down = True
    clock.advance(REFRESH)
    sched.run_once()
    found = samples(observer)
    assert value(found, "goatbeat_store_up") == 0.0
    assert value(found, "goatbeat_iterations_total") == 3.0  # the scheduler went on
