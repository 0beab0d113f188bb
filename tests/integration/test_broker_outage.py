"""A real Redis stopped for 60 s under a running scheduler (#13 item 2).

The scheduler runs in a thread on PostgreSQL and submits to RQ on its own Redis (kept on disk,
so a restart is an outage, not a wipe). Two schedules fire every 5 s:

- ``long``: ``run_all`` with 600 s of grace. Every occurrence of the outage is owed for ten
  minutes, so every one reaches Redis once it is back; before, six tries in ~31 s made them
  ``submit_failed`` for good.
- ``short``: 10 s of grace. Occurrences whose grace ran out during the outage are *missed*:
  ``submit_failed`` with the reason, counted in ``missed_count`` (``schedule list`` shows it),
  logged ``occurrence.missed``; the others are submitted. Nothing is lost silently.

No timing is asserted: each wait has a deadline, and what is checked is where every occurrence
ended.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from goatbeat.beat import Beat
from goatbeat.cli import cli
from goatbeat.core.model import ExecutionStatus
from goatbeat.stores.postgres import PostgresStore
from tests.services import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]

OUTAGE = 60.0
DEADLINE = 150.0


def tick(*args: object) -> None:
    """The task (never run here: no RQ worker; what reached Redis is counted in the queue)."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {DEADLINE:g}s")
        time.sleep(0.2)


def test_a_broker_down_for_a_minute_loses_nothing_within_the_grace(
    pg_dsn: str,
    broker: RedisServer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    beat = Beat(pg_dsn, submitter="rq", submitter_options={"connection": broker.url})
    beat.schedule(
        name="long", task=tick, every="5s", misfire="run_all", misfire_grace="600s", args=["l"]
    )
    beat.schedule(name="short", task=tick, every="5s", misfire_grace="10s", args=["s"])
    beat.migrate()
    beat.publish()
    scheduler = beat.scheduler(lease_ttl="3s", lease_renew_interval="1s", max_sleep="1s")
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    store = PostgresStore(pg_dsn)
    try:

        def statuses() -> dict[str, list[str]]:
            rows = store.executions(limit=10_000)
            out: dict[str, list[str]] = {"long": [], "short": []}
            for e in rows:
                out[e.schedule_name].append(e.status.value)
            return out

        wait_for("first submissions", lambda: statuses()["long"].count("submitted") >= 2)
        broker.stop()
        down_at = time.monotonic()
        time.sleep(OUTAGE)
        waiting = {
            e.idempotency_key
            for e in store.executions(limit=10_000)
            if e.status is ExecutionStatus.CLAIMED
        }
        broker.start()
        up_at = time.monotonic()
        assert len(waiting) > 12  # the outage's occurrences of both schedules, still owed

        def settled() -> bool:
            rows = store.executions(limit=10_000)
            return not any(
                e.idempotency_key in waiting and e.status is ExecutionStatus.CLAIMED for e in rows
            )

        wait_for("every occurrence of the outage settled", settled)
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        assert up_at - down_at >= OUTAGE

        executions = store.executions(limit=10_000)
        long_rows = [e for e in executions if e.schedule_name == "long"]
        short_rows = [e for e in executions if e.schedule_name == "short"]
        # The long grace: nothing missed, each occurrence in Redis exactly once.
        settled_long = [e for e in long_rows if e.status is not ExecutionStatus.CLAIMED]
        assert {e.status for e in settled_long} == {ExecutionStatus.SUBMITTED}
        assert any(e.attempts > 6 for e in settled_long)  # retried past the old budget
        assert store.get("long").missed_count == 0
        client = redis.Redis.from_url(broker.url)
        try:
            queued = Counter(job.decode() for job in client.lrange("rq:queue:default", 0, -1))
        finally:
            client.close()
        assert all(queued[str(e.backend_task_id)] == 1 for e in settled_long)
        assert {e.idempotency_key for e in long_rows} >= {
            k for k in waiting if k.startswith("long:")
        }

        # The short grace: missed ones are counted, shown and logged; the rest went through.
        missed = [e for e in short_rows if e.status is ExecutionStatus.SUBMIT_FAILED]
        assert missed, "a 60 s outage must outlast a 10 s grace"
        assert all(e.error is not None and e.error.startswith("missed:") for e in missed)
        assert {e.status for e in short_rows} <= {
            ExecutionStatus.SUBMITTED,
            ExecutionStatus.SUBMIT_FAILED,
            ExecutionStatus.CLAIMED,  # the occurrence due as the thread stopped
        }
        assert store.get("short").missed_count == len(missed)
        logged = {
            r.goatbeat["idempotency_key"]  # type: ignore[attr-defined]
            for r in caplog.records
            if r.getMessage() == "occurrence.missed"
        }
        assert logged == {e.idempotency_key for e in missed}
        # A missed run is retried to the end of its grace, never beyond.
        for e in missed:
            assert e.attempts >= 2

        with capsys.disabled():  # the figures of docs/reliability.md; never asserted on
            print(
                f"\nbroker outage {up_at - down_at:.0f}s: {len(waiting)} occurrences owed at "
                f"the restart; long grace: {len(settled_long)} submitted, 0 missed, up to "
                f"{max(e.attempts for e in settled_long)} attempts; short grace: "
                f"{len(missed)} missed, "
                f"{sum(e.status is ExecutionStatus.SUBMITTED for e in short_rows)} submitted"
            )
        listing = CliRunner().invoke(
            cli, ["--database", pg_dsn, "schedule", "list", "--json"], catch_exceptions=False
        )
        assert listing.exit_code == 0, listing.output
        shown = {row["name"]: row for row in json.loads(listing.output)}
        assert shown["short"]["missed_count"] == len(missed)
        assert shown["long"]["missed_count"] == 0
    finally:
        stop.set()
        thread.join(30)
        store.close()
        beat.close()
