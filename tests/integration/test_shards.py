"""Shards on a real PostgreSQL: several scheduler objects (threads, each with its own store and
connection) share the shard leases of one database.

Checked: PostgreSQL computes the shard exactly as Python does; a claim under a shard's lease
touches only that shard; a stale shard lease claims nothing (fencing); three schedulers split
four shards 2/1/1; a graceful stop hands its shards over in under a second; a crashed one's
shards are taken within lease_ttl; schedulers of different shard counts running together (a
rolling change of ``shards``) never claim an occurrence twice and lose none.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest

from goatbeat.beat import Beat
from goatbeat.core.errors import InvalidValue
from goatbeat.core.instance import split_instance
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.shards import Shard, lease_name, shard_hash, shard_of
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.postgres import PostgresStore
from tests.doubles import AcceptingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(120)]

TTL = 3.0
RENEW = 1.0


class Recording(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.lock = threading.Lock()

    def submit(self, occurrence: Occurrence) -> str | None:
        with self.lock:
            self.keys.append(occurrence.idempotency_key)
        return occurrence.idempotency_key


class Member:
    """One scheduler on its own connection, run by a thread. ``crash()`` stops the thread
    without releasing anything, as a killed process would."""

    def __init__(self, dsn: str, sid: str, submitter: Recording, shards: int = 4) -> None:
        self.beat = Beat(dsn, submitter=submitter)
        self.scheduler: Scheduler = self.beat.scheduler(
            scheduler_id=sid,
            shards=shards,
            lease_ttl=f"{TTL}s",
            lease_renew_interval=f"{RENEW}s",
            max_sleep="1s",
            allowed_tasks=["json.dumps"],
        )
        self.stop = threading.Event()
        self.crashed = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sch = self.scheduler
        while not self.stop.is_set():
            result = sch.run_once()
            sch._sleep(min(result.sleep, 0.2))
        if not self.crashed.is_set():
            sch.release()
        sch.close()

    def leave(self) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        self.thread.join(10)
        self.beat.close()

    def crash(self) -> None:
        self.crashed.set()
        self.stop.set()
        self.thread.join(10)
        self.beat.close()


def holders(store: PostgresStore, shards: int) -> dict[int, str | None]:
    names = [lease_name(i, shards) for i in range(shards)]
    rows = store.read_leases(names)
    found: dict[int, str | None] = {}
    for i, name in enumerate(names):
        row = rows.get(name)
        found[i] = None if row is None or row[3] else split_instance(row[0])[0]
    return found


def wait_for(predicate: Any, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn)
    s.migrate()
    try:
        yield s
    finally:
        s.close()


def test_postgres_computes_the_shard_as_python_does(store: PostgresStore, pg_dsn: str) -> None:
    names = ["a", "report", "tick-17", "é-accent", "日本語", "x" * 200, "space here", "ʕ•ᴥ•ʔ"]
    names += [f"sched-{i}" for i in range(200)]
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT n, ('x' || left(encode(sha256(convert_to(n, 'UTF8')), 'hex'), 8))"
            "::bit(32)::bigint FROM unnest(%s::text[]) AS n",
            (names,),
        ).fetchall()
    assert {n: int(h) for n, h in rows} == {n: shard_hash(n) for n in names}


def _due_schedules(store: PostgresStore, count: int) -> list[str]:
    names = [f"due-{i}" for i in range(count)]
    for name in names:
        store.create(
            Schedule(
                name=name, task="json.dumps", trigger=IntervalTrigger(every=timedelta(hours=1))
            )
        )
    with store._session() as conn:  # make every one due now
        conn.execute("UPDATE goatbeat_schedule SET next_run_at = now() - interval '1 second'")
    return names


def test_a_claim_under_a_shard_lease_takes_only_that_shards_schedules(
    store: PostgresStore,
) -> None:
    names = _due_schedules(store, 40)
    seen: dict[int, set[str]] = {}
    for index in range(4):
        shard = Shard(index=index, count=4)
        grant = store.acquire_lease(shard.lease, "me", timedelta(seconds=30))
        assert grant is not None
        assert store.next_due_at(shard=shard) is not None
        result = store.claim_due(grant, scheduler_id="me", limit=100)
        seen[index] = {o.schedule_name for o in result.occurrences}
        assert all(shard_of(n, 4) == index for n in seen[index])
        assert {o.schedule_name for o in store.pending(limit=100, shard=shard)} == seen[index]
    assert set().union(*seen.values()) == set(names)
    assert all(seen.values()), "40 names leave no shard of 4 empty"


def test_run_now_requests_and_backfills_belong_to_their_schedules_shard(
    store: PostgresStore,
) -> None:
    names = _due_schedules(store, 8)
    for name in names:
        store.request_run(name)
    for index in range(4):
        shard = Shard(index=index, count=4)
        pending = store.pending(limit=100, shard=shard)
        assert {o.schedule_name for o in pending} == {n for n in names if shard_of(n, 4) == index}
        grant = store.acquire_lease(shard.lease, "me", timedelta(seconds=30))
        assert grant is not None
        ids = [o.execution_id for o in pending]
        other = store.acquire_lease(
            Shard(index=(index + 1) % 4, count=4).lease, "me", timedelta(seconds=30)
        )
        assert other is not None
        assert store.claim_manual_runs(other, scheduler_id="me", execution_ids=ids) == []
        assert sorted(
            store.claim_manual_runs(grant, scheduler_id="me", execution_ids=ids)
        ) == sorted(ids)


def test_a_stale_shard_lease_claims_nothing(store: PostgresStore) -> None:
    _due_schedules(store, 20)
    shard = Shard(index=1, count=4)
    old = store.acquire_lease(shard.lease, "old", timedelta(milliseconds=200))
    assert old is not None
    time.sleep(0.3)
    new = store.acquire_lease(shard.lease, "new", timedelta(seconds=30))
    assert new is not None and new.token == old.token + 1
    assert store.claim_due(old, scheduler_id="old", limit=100).refused
    # Another shard's lease is no use for this one's schedules either.
    other = store.acquire_lease(Shard(index=2, count=4).lease, "old", timedelta(seconds=30))
    assert other is not None
    claimed = store.claim_due(other, scheduler_id="old", limit=100).occurrences
    assert all(shard_of(o.schedule_name, 4) == 2 for o in claimed)


def test_sqlite_and_memory_refuse_more_than_one_shard(tmp_path: Any) -> None:
    for url in ("memory://", f"sqlite:///{tmp_path}/g.db"):
        beat = Beat(url, submitter=Recording())
        try:
            with pytest.raises(InvalidValue, match="shards"):
                beat.scheduler(shards=4)
            beat.scheduler(shards=1)
        finally:
            beat.close()


def test_three_schedulers_split_four_shards_and_rebalance(
    store: PostgresStore, pg_dsn: str
) -> None:
    sub = Recording()
    members = {sid: Member(pg_dsn, sid, sub) for sid in ("s-a", "s-b", "s-c")}
    try:

        def split() -> list[int]:
            found = holders(store, 4)
            if None in found.values():
                return []
            return sorted(Counter(found.values()).values())

        took = wait_for(lambda: split() == [1, 1, 2], 15)
        print(f"\n3 schedulers split 4 shards 2/1/1 after {took:.2f}s")

        # Graceful stop: its shards are held by the others in under a second.
        leaving = next(sid for sid, n in Counter(holders(store, 4).values()).items() if n == 2)
        members.pop(leaving).leave()
        handed = wait_for(
            lambda: leaving not in holders(store, 4).values() and split() == [2, 2], 5
        )
        print(f"graceful stop of {leaving}: shards held 2/2 by the others after {handed:.3f}s")
        assert handed < 1.0

        # A newcomer gets its share.
        members["s-d"] = Member(pg_dsn, "s-d", sub)
        joined = wait_for(lambda: split() == [1, 1, 2], 10)
        print(f"newcomer: 2/1/1 again after {joined:.2f}s")

        # A crash: its shards are taken within lease_ttl of its last renewal.
        victim = next(s for s in members if s in holders(store, 4).values())
        crashed_at = time.monotonic()
        members.pop(victim).crash()
        taken = wait_for(
            lambda: (
                victim not in holders(store, 4).values() and None not in holders(store, 4).values()
            ),
            TTL + 5,
        )
        print(f"crash of {victim}: shards taken after {taken:.2f}s (lease_ttl {TTL}s)")
        assert time.monotonic() - crashed_at <= TTL + 0.5
        wait_for(lambda: split() == [2, 2], 5)
    finally:
        for m in members.values():
            m.leave()


def test_schedulers_of_different_shard_counts_never_claim_twice(
    store: PostgresStore, pg_dsn: str
) -> None:
    """A rolling change of ``shards`` (1 -> 4 -> 2) while occurrences fall due every second."""
    seconds = timedelta(seconds=1)
    names = [f"t-{i}" for i in range(12)]
    for name in names:
        store.create(Schedule(name=name, task="json.dumps", trigger=IntervalTrigger(every=seconds)))
    sub = Recording()
    members = [Member(pg_dsn, "one", sub, shards=1)]
    time.sleep(2)
    members += [Member(pg_dsn, f"four-{i}", sub, shards=4) for i in range(2)]
    time.sleep(2)
    members.pop(0).leave()
    members.append(Member(pg_dsn, "two", sub, shards=2))
    time.sleep(2)
    for m in members[:2]:
        m.leave()
    time.sleep(2)
    members[-1].leave()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT schedule_name, scheduled_at, status FROM goatbeat_execution"
            " WHERE kind = 'scheduled' ORDER BY schedule_name, scheduled_at"
        ).fetchall()
    by_name: dict[str, list[Any]] = {}
    for name, at, _status in rows:
        by_name.setdefault(name, []).append(at)
    for name in names:
        instants = by_name[name]
        assert len(instants) == len(set(instants)), f"{name} claimed twice"
        gaps = {b - a for a, b in zip(instants, instants[1:], strict=False)}
        assert gaps <= {seconds}, f"{name} lost an occurrence: {sorted(gaps)}"
        assert len(instants) >= 5
    with psycopg.connect(pg_dsn) as conn:
        tokens = dict(conn.execute("SELECT name, token FROM goatbeat_lease").fetchall())
    print(f"\nlease tokens at the end: {tokens}")
    # Members of one count ignore the schedulers of another (their heartbeats say which count
    # they run): a shard changes hands when its generation's membership changes, not over and
    # over while the two generations overlap.
    assert max(tokens.values()) <= 4, tokens
    resubmitted = sum(n - 1 for n in Counter(sub.keys).values() if n > 1)
    print(f"\n{len(rows)} occurrences, each claimed once; {resubmitted} resubmitted")
    assert {status for _n, _a, status in rows} == {"submitted"}
    # Each generation leaves the other's claimed rows alone while it is alive; a newcomer
    # writes its heartbeat row before its first claim (see the test below).
    assert resubmitted == 0


@pytest.mark.parametrize(("old", "new"), [(1, 2), (2, 1)], ids=["1-then-2", "2-then-1"])
def test_a_newcomers_first_claims_are_not_sent_again_by_the_other_generation(
    store: PostgresStore, pg_dsn: str, old: int, new: int
) -> None:
    """The window the rolling-change test above once fell into (CI: 4 resubmitted where 3
    were allowed): a newcomer of another shard count claims in its first iteration, and the
    running scheduler's pending() ran before the newcomer's first heartbeat row, took its
    ``claimed`` rows for a dead leader's and sent them again. The newcomer now writes its
    row before it claims anything; here the old generation runs an iteration exactly inside
    that window (between the newcomer's claim and its submission)."""
    for i in range(8):
        store.create(
            Schedule(name=f"w-{i}", task="json.dumps", trigger=IntervalTrigger(every=timedelta(seconds=1)))
        )  # fmt: skip
    old_sub, new_sub = Recording(), Recording()
    beats = [Beat(pg_dsn, submitter=old_sub), Beat(pg_dsn, submitter=new_sub)]
    knobs: dict[str, Any] = {
        "lease_ttl": f"{TTL}s", "lease_renew_interval": f"{RENEW}s", "allowed_tasks": ["json.dumps"]
    }  # fmt: skip
    try:
        running = beats[0].scheduler(scheduler_id="old", shards=old, **knobs)
        assert running.run_once().leader
        newcomer = beats[1].scheduler(scheduler_id="new", shards=new, **knobs)
        claim_due = newcomer.store.claim_due
        inside: list[int] = []

        def claim_then_let_the_old_one_run(*args: Any, **kwargs: Any) -> Any:
            result = claim_due(*args, **kwargs)
            if result.occurrences and not inside:
                inside.append(len(result.occurrences))
                running.run_once()
            return result

        newcomer.store.claim_due = claim_then_let_the_old_one_run  # type: ignore[method-assign]
        time.sleep(1.2)  # every schedule falls due again; only the newcomer claims this time
        newcomer.run_once()
        assert inside, "the newcomer claimed nothing: the window was not exercised"
        sent_twice = set(old_sub.keys) & set(new_sub.keys)
        assert not sent_twice, f"sent by both generations: {sorted(sent_twice)}"
        assert len(new_sub.keys) >= inside[0]  # its claims, each sent once by the newcomer
        assert len(new_sub.keys) == len(set(new_sub.keys))
    finally:
        for beat in beats:
            beat.close()


def test_the_cli_refuses_shards_on_sqlite_in_one_line(tmp_path: Any) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("GOATBEAT_APP", None)
    for value, says in (
        ("4", "goatbeat: error: shards: 4 needs PostgreSQL: SQLiteStore runs a single shard"),
        ("0", "shards: 0 is out of range 1..256"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "goatbeat", "--app", "tests.integration.test_multi_scheduler:beat",
             "--database", f"sqlite:///{tmp_path}/g.db", "scheduler", "--shards", value, "--once"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert says in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def _sharded(pg_dsn: str, sid: str, **settings: Any) -> tuple[Beat, Scheduler]:
    beat = Beat(pg_dsn, submitter=Recording())
    scheduler = beat.scheduler(
        scheduler_id=sid,
        shards=4,
        lease_ttl=f"{TTL}s",
        lease_renew_interval=f"{RENEW}s",
        max_sleep="1s",
        allowed_tasks=["json.dumps"],
        **settings,
    )
    return beat, scheduler


def _every_second(store: PostgresStore, prefix: str, count: int) -> None:
    every = IntervalTrigger(every=timedelta(seconds=1))
    for i in range(count):
        store.create(Schedule(name=f"{prefix}-{i}", task="json.dumps", trigger=every))


def _logged(caplog: pytest.LogCaptureFixture, name: str, sid: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.getMessage() == name and getattr(r, "scheduler_id", None) == sid
    ]


def test_a_sharded_start_beside_a_live_twin_warns_naming_both(
    store: PostgresStore, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    _every_second(store, "w", 8)
    first, a = _sharded(pg_dsn, "web-1")
    second, b = _sharded(pg_dsn, "web-1")
    try:
        assert a.run_once().leader  # alone: it holds all four shards
        assert not _logged(caplog, "scheduler.duplicate_id", "web-1")
        b.run_once()
        [warning] = _logged(caplog, "scheduler.duplicate_id", "web-1")
        assert warning.instance == b.instance  # type: ignore[attr-defined]
        assert [o.split(" ")[0] for o in warning.others] == [a.instance]  # type: ignore[attr-defined]
    finally:
        for sch, beat in ((a, first), (b, second)):
            sch.release()
            sch.close()
            beat.close()


def test_an_unexpected_error_in_a_sharded_loop_drops_every_shard_lease(
    store: PostgresStore, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Single lease or shards alike: after a bug (not an outage) the loop trusts no lease it
    # holds, since it cannot know what the failed iteration did under them.
    caplog.set_level(logging.INFO, logger="goatbeat")
    _every_second(store, "e", 8)
    beat, sch = _sharded(pg_dsn, "buggy")
    try:
        assert sch.run_once().leader
        held = sorted(r.lease for r in _logged(caplog, "lease.acquired", "buggy"))  # type: ignore[attr-defined]
        assert held == [lease_name(i, 4) for i in range(4)]
        claim_due = sch.store.claim_due
        failed = threading.Event()
        stop = threading.Event()

        def broken(*args: Any, **kwargs: Any) -> Any:
            if not failed.is_set():
                failed.set()
                raise RuntimeError("bug in a store")
            stop.set()
            return claim_due(*args, **kwargs)

        sch.store.claim_due = broken  # type: ignore[method-assign]
        thread = threading.Thread(target=sch.run, kwargs={"stop": stop})
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive() and failed.is_set()
        lost = sorted(r.lease for r in _logged(caplog, "lease.lost", "buggy"))  # type: ignore[attr-defined]
        assert lost == held
    finally:
        sch.close()
        beat.close()
