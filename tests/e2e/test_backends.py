"""End to end: goatbeat schedules, real Celery / Dramatiq / RQ workers run the tasks.

Each test declares schedules on a :class:`~goatbeat.beat.Beat` (SQLite store in a temp file,
a fake clock so the occurrences fall due without waiting), runs scheduler iterations that hand
them to the real submitter, then starts real worker processes on the throwaway Redis and waits
(with a deadline) for the tasks' own side effect: each run appends what it received to a Redis
list (tests/e2e/backend_apps). Two workers per backend, one consuming only the custom queue and
one only the default queue, show the routing; a schedule with a tiny ``expires`` shows the
backend dropped the stale message.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

from goatbeat.beat import Beat
from goatbeat.core.clock import FakeClock
from goatbeat.core.model import ExecutionStatus, idempotency_key
from goatbeat.core.submit import TaskSubmitter
from goatbeat.submitters.celery import CelerySubmitter
from goatbeat.submitters.dramatiq import DramatiqSubmitter
from goatbeat.submitters.keys import derived_uuid
from goatbeat.submitters.rq import RQSubmitter, job_id_for
from tests.e2e.workers import StartWorker, wait_for_runs

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]

CELERY_TASK = "tests.e2e.backend_apps.celery_app.record_run"
DRAMATIQ_ACTOR = "goatbeat_e2e_record"
RQ_FUNC = "tests.e2e.backend_apps.rq_jobs.record_run"


# -- scheduling ----------------------------------------------------------------------------------


def dispatch(
    tmp_path: Path, submitter: TaskSubmitter, task: str, *, minutes: int, stale: bool = True
) -> tuple[Beat, dict[str, list[str]]]:
    """Declare the test schedules, then run one scheduler iteration per fake minute.

    ``report`` (default queue, args, kwargs, a header) and ``routed`` (queue ``custom``) fire
    every minute from t0+1m; ``stale`` (``expires`` of a millisecond) fires once at t0+30s, in
    an iteration of its own, so it sits ahead of the others in the default queue and a worker
    meets it first. Returns the beat and the idempotency keys each schedule was submitted with.
    """
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = FakeClock(t0)
    beat = Beat(f"sqlite:///{tmp_path / 'goatbeat.db'}", submitter=submitter, clock=clock)
    first = t0 + timedelta(minutes=1)
    beat.schedule(
        name="report",
        task=task,
        every="1m",
        start_at=first,
        args=[7, "seven"],
        kwargs={"mode": "full"},
        headers={"x-tenant": "acme"},
    )
    beat.schedule(name="routed", task=task, every="1m", start_at=first, args=["routed"],
                  queue="custom")  # fmt: skip
    if stale:
        beat.schedule(name="stale", task=task, at=t0 + timedelta(seconds=30), args=["stale"],
                      expires=0.001)  # fmt: skip
    beat.publish()
    scheduler = beat.scheduler()
    if stale:
        clock.advance(30)
        result = scheduler.run_once()
        assert (result.claimed, result.submitted, result.error) == (1, 1, None)
        clock.advance(30)
    else:
        clock.advance(60)
    keys: dict[str, list[str]] = {"report": [], "routed": []}
    for minute in range(minutes):
        result = scheduler.run_once()
        assert (result.claimed, result.submitted, result.error) == (2, 2, None), result
        for name in keys:
            keys[name].append(idempotency_key(name, first + timedelta(minutes=minute)))
        clock.advance(60)
    executions = beat.store.executions(limit=100)
    assert {e.status for e in executions} == {ExecutionStatus.SUBMITTED}
    assert len(executions) == 2 * minutes + (1 if stale else 0)
    return beat, keys


def check_runs(
    runs: list[dict[str, Any]], keys: dict[str, list[str]], *, custom: str, default: str
) -> None:
    """Each key ran exactly once, with its arguments, header and scheduled instant, on the
    worker of its queue."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_key.setdefault(run["key"], []).append(run)
    expected = keys["report"] + keys["routed"]
    assert sorted(by_key) == sorted(expected)
    assert all(len(v) == 1 for v in by_key.values()), by_key
    for key in keys["report"]:
        run = by_key[key][0]
        assert run["args"] == [7, "seven"]
        assert run["kwargs"] == {"mode": "full"}
        assert run["extra"] == {"x-tenant": "acme"}
        assert run["worker"] == default
        assert run["scheduled_at"] == key.split(":", 1)[1]
    for key in keys["routed"]:
        run = by_key[key][0]
        assert run["args"] == ["routed"]
        assert run["queue"] == "custom"
        assert run["worker"] == custom
        assert run["scheduled_at"] == key.split(":", 1)[1]


# -- the backends --------------------------------------------------------------------------------


def test_celery_workers_run_the_dispatched_occurrences_on_their_queues(
    redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    client = redis.Redis.from_url(redis_url)
    beat, keys = dispatch(tmp_path, CelerySubmitter(redis_url), CELERY_TASK, minutes=2)
    try:
        for execution in beat.store.executions(limit=100):
            assert execution.backend_task_id == execution.idempotency_key
    finally:
        beat.close()
    common = ("celery", "-A", "tests.e2e.backend_apps.celery_app", "worker", "--pool=solo",
              "-c", "1", "--without-gossip", "--without-mingle", "--without-heartbeat",
              "-l", "info")  # fmt: skip
    workers = [
        start_worker("custom-only", *common, "-Q", "custom", "-n", "custom@%h"),
        start_worker("default-only", *common, "-Q", "celery", "-n", "default@%h"),
    ]
    runs = wait_for_runs(client, "celery", 4, workers)
    check_runs(runs, keys, custom="custom-only", default="default-only")
    assert all(run["task_id"] == run["key"] for run in runs)
    # The stale message was ahead of the others in the default queue: the worker discarded it.
    assert not [run for run in runs if run["args"] == ["stale"]]
    assert "stale:" in workers[1].output()  # celery logs the expired task it revoked
    client.close()


def test_dramatiq_workers_run_the_dispatched_occurrences_on_their_queues(
    redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    client = redis.Redis.from_url(redis_url)
    beat, keys = dispatch(tmp_path, DramatiqSubmitter(redis_url), DRAMATIQ_ACTOR, minutes=2)
    try:
        for execution in beat.store.executions(limit=100):
            assert execution.backend_task_id == derived_uuid(execution.idempotency_key)
    finally:
        beat.close()
    common = ("dramatiq", "tests.e2e.backend_apps.dramatiq_app", "--processes", "1",
              "--threads", "1")  # fmt: skip
    workers = [
        start_worker("custom-only", *common, "--queues", "custom"),
        start_worker("default-only", *common, "--queues", "default"),
    ]
    runs = wait_for_runs(client, "dramatiq", 4, workers)
    check_runs(runs, keys, custom="custom-only", default="default-only")
    assert all(run["message_id"] == derived_uuid(run["key"]) for run in runs)
    # AgeLimit (max_age) dropped the stale message, which the default worker met first.
    assert not [run for run in runs if run["args"] == ["stale"]]
    client.close()


def test_rq_workers_run_the_dispatched_occurrences_on_their_queues(
    redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    client = redis.Redis.from_url(redis_url)
    # RQ's ttl has whole seconds: a stale job would need a sleep; its ttl is checked in
    # tests/unit/test_submitters.py instead.
    beat, keys = dispatch(tmp_path, RQSubmitter(redis_url), RQ_FUNC, minutes=2, stale=False)
    try:
        for execution in beat.store.executions(limit=100):
            assert execution.backend_task_id == job_id_for(execution.idempotency_key)
    finally:
        beat.close()
    common = ("rq.cli", "worker", "--url", redis_url, "--burst")
    workers = [
        start_worker("custom-only", *common, "custom"),
        start_worker("default-only", *common, "default"),
    ]
    runs = wait_for_runs(client, "rq", 4, workers, exits=True)
    check_runs(runs, keys, custom="custom-only", default="default-only")
    assert all(run["job_id"] == job_id_for(run["key"]) for run in runs)
    client.close()


# -- Dramatiq as its users know it ---------------------------------------------------------------


@pytest.fixture(scope="module")
def dramatiq_app() -> ModuleType:
    """The workers' actors module, imported here for its actor objects; Dramatiq's global broker
    is left as it was (the module sets it)."""
    import dramatiq.broker

    previous = dramatiq.broker.global_broker
    try:
        from tests.e2e.backend_apps import dramatiq_app as module
    finally:
        dramatiq.broker.global_broker = previous
    return module


def test_dramatiq_actor_objects_run_under_their_actor_name_on_their_own_queue(
    redis_url: str, tmp_path: Path, start_worker: StartWorker, dramatiq_app: ModuleType
) -> None:
    client = redis.Redis.from_url(redis_url)
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = FakeClock(t0)
    beat = Beat(
        f"sqlite:///{tmp_path / 'goatbeat.db'}", submitter=DramatiqSubmitter(redis_url), clock=clock
    )
    first = t0 + timedelta(minutes=1)
    try:
        beat.schedule(name="object", task=dramatiq_app.record_elsewhere, every="1m",
                      start_at=first, args=["object"])  # fmt: skip
        beat.schedule(name="routed", task=dramatiq_app.record_elsewhere, every="1m",
                      start_at=first, args=["routed"], queue="custom")  # fmt: skip
        beat.schedule(name="named", task="goatbeat_e2e_elsewhere", every="1m", start_at=first,
                      args=["named"])  # fmt: skip
        beat.publish()
        clock.advance(60)
        result = beat.scheduler().run_once()
        assert (result.claimed, result.submitted, result.error) == (3, 3, None), result
    finally:
        beat.close()
    worker = start_worker(
        "all-queues", "dramatiq", "tests.e2e.backend_apps.dramatiq_app", "--processes", "1",
        "--threads", "1",
    )  # fmt: skip
    runs = wait_for_runs(client, "dramatiq", 3, [worker])
    by_args = {run["args"][0]: run for run in runs}
    assert sorted(by_args) == ["named", "object", "routed"]
    assert {run["actor"] for run in runs} == {"goatbeat_e2e_elsewhere"}
    # An actor object brings its own queue, unless the schedule names another.
    assert by_args["object"]["queue"] == "elsewhere"
    assert by_args["routed"]["queue"] == "custom"
    # A string is the actor's name; this broker (a URL) knows no actors, so it cannot know the
    # actor's queue either: the default queue (test_backend_failover names the actors' module).
    assert by_args["named"]["queue"] == "default"
    client.close()
