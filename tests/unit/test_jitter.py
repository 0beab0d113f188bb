"""Deterministic jitter: the offset is a pure function of (name, nominal instant, jitter),
the same on every replica and after a failover; submissions spread over the window while the
idempotency keys stay the nominal instants."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.errors import InvalidSchedule
from goatbeat.core.jitter import jitter_offset, jittered
from goatbeat.core.misfire import plan
from goatbeat.core.model import ExecutionStatus, Occurrence, Schedule, idempotency_key
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import CronTrigger
from goatbeat.stores.memory import MemoryStore
from tests.unit.test_scheduler import RecordingSubmitter

T = datetime(2026, 11, 1, 9, tzinfo=UTC)


def test_the_offset_is_the_documented_formula() -> None:
    # The contract (goatbeat.core.jitter): floor(h * J / 2**64) microseconds, h the first 8
    # bytes of SHA-256 of the idempotency key.
    for name in ("daily-report", "ping", "a b/ü"):
        for jitter in (timedelta(seconds=30), timedelta(hours=1), timedelta(microseconds=7)):
            h = int.from_bytes(
                hashlib.sha256(idempotency_key(name, T).encode("utf-8")).digest()[:8], "big"
            )
            micros = jitter // timedelta(microseconds=1)
            assert jitter_offset(name, T, jitter) == timedelta(microseconds=h * micros >> 64)
    # Pinned values: a change of formula would move every jittered schedule.
    assert jitter_offset("daily-report", T, timedelta(seconds=30)) == timedelta(
        seconds=2, microseconds=657697
    )
    assert jitter_offset("ping", T, timedelta(hours=1)) == timedelta(
        minutes=13, seconds=41, microseconds=88689
    )


def test_offsets_stay_in_the_window_and_no_jitter_is_no_offset() -> None:
    jitter = timedelta(seconds=30)
    for i in range(2000):
        offset = jitter_offset(f"s{i}", T + timedelta(hours=i), jitter)
        assert timedelta(0) <= offset < jitter
    assert jitter_offset("a", T, timedelta(0)) == timedelta(0)
    assert jittered("a", T, timedelta(0)) == T
    # The instant counts, not only the name: the same schedule moves around the window.
    assert len({jitter_offset("a", T + timedelta(hours=h), jitter) for h in range(50)}) == 50


def test_another_process_computes_the_same_offsets() -> None:
    """No dependence on Python's per-process hash seed: a replica computes the same."""
    code = (
        "from datetime import datetime, timedelta, UTC\n"
        "from goatbeat.core.jitter import jitter_offset\n"
        "t = datetime(2026, 11, 1, 9, tzinfo=UTC)\n"
        "print([jitter_offset(f's{i}', t, timedelta(minutes=10)).total_seconds()"
        " for i in range(50)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout
    here = [jitter_offset(f"s{i}", T, timedelta(minutes=10)).total_seconds() for i in range(50)]
    assert out.strip() == str(here)


def test_a_schedule_refuses_a_negative_or_huge_jitter() -> None:
    for bad in (timedelta(seconds=-1), timedelta(days=2), 30):
        with pytest.raises(InvalidSchedule) as caught:
            Schedule(name="a", task="t.a", trigger=CronTrigger("0 * * * *"), jitter=bad)  # type: ignore[arg-type]
        assert caught.value.field == "jitter"


def test_lateness_is_judged_with_the_jitter_added_to_the_grace() -> None:
    # Due at 09:00 + up to 10 min: a scheduler back at 09:05 still owes it (skip policy).
    s = Schedule(
        name="a",
        task="t.a",
        trigger=CronTrigger("0 * * * *"),
        jitter=timedelta(minutes=10),
        misfire="skip",  # type: ignore[arg-type]
        next_run_at=T,
    )
    assert plan(s, T + timedelta(minutes=5)).run_at == [T]
    assert plan(s, T + timedelta(minutes=12)).run_at == []


def test_a_thousand_hourly_schedules_spread_over_the_window_identically_after_a_failover() -> None:
    """1,000 schedules at ``0 * * * *`` with a 10-minute jitter: each goes out at its own
    offset, the offsets spread over the window, and a second scheduler that takes over in
    the middle sends the rest at exactly the offsets the first would have used."""
    clock = FakeClock(T - timedelta(minutes=5))
    store = MemoryStore(clock)
    jitter = timedelta(minutes=10)
    names = [f"report-{i:04d}" for i in range(1000)]
    store.publish(
        [
            Schedule(name=n, task="tasks.report", trigger=CronTrigger("0 * * * *"), jitter=jitter)
            for n in names
        ]
    )
    sent: dict[str, list[tuple[str, datetime]]] = {"a": [], "b": []}

    def scheduler(sid: str) -> Scheduler:
        submitter = RecordingSubmitter()

        def on_submit(occ: Occurrence) -> None:
            sent[sid].append((occ.idempotency_key, clock.now()))

        submitter.on_submit = on_submit
        return Scheduler(store, submitter, settings=Settings(scheduler_id=sid), clock=clock)

    def run_until(s: Scheduler, end: datetime) -> None:
        while clock.now() < end:
            result = s.run_once()
            clock.advance(max(result.sleep, 0.001))

    a, b = scheduler("a"), scheduler("b")
    run_until(a, T + timedelta(minutes=4))
    assert a.release()  # graceful stop in the middle of the window
    run_until(b, T + jitter + timedelta(seconds=1))

    keys = {idempotency_key(n, T): n for n in names}
    for sid in ("a", "b"):
        for key, at in sent[sid]:
            due = jittered(keys[key], T, jitter)
            # Sent at its jittered instant (the loop never sleeps past it), never before.
            assert timedelta(0) <= at - due < timedelta(milliseconds=20), (sid, key)
    sent_a = [k for k, _ in sent["a"]]
    sent_b = [k for k, _ in sent["b"]]
    assert sent_a and sent_b
    assert sorted(sent_a + sent_b) == sorted(keys)  # each once, under its nominal key
    assert all(at < T + timedelta(minutes=4) for _, at in sent["a"])
    # Spread: ten one-minute buckets of about a hundred each (a fixed set of names, so the
    # counts are fixed too; binomial spread around 100 is about 10).
    buckets = Counter(int(jitter_offset(n, T, jitter).total_seconds() // 60) for n in names)
    assert sorted(buckets) == list(range(10))
    assert all(70 <= count <= 130 for count in buckets.values()), buckets
    statuses = {e.status for e in store.executions(limit=2000)}
    assert statuses == {ExecutionStatus.SUBMITTED}
