"""Several real ``python -m goatbeat scheduler`` processes on one PostgreSQL database.

Each process runs this module's ``beat`` with a submitter that appends every submission
(``key scheduler_id``) to a shared file, so the test sees exactly what was dispatched, by whom.
Checked: one scheduler dispatches at a time; no occurrence is lost (every schedule's instants
are contiguous); nothing is claimed twice (the executions table); graceful handover on SIGTERM,
crash failover within ``lease_ttl`` on SIGKILL, and a crash between submission and bookkeeping
resubmits the same key. Handover times are printed (``-s``), never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from goatbeat.beat import Beat
from goatbeat.core.instance import split_instance
from goatbeat.core.model import Occurrence
from tests.doubles import AcceptingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.test_multi_scheduler:beat"
SCHEDULES = 3
TTL = "3s"
RENEW = "1s"


class FileRecordingSubmitter(AcceptingSubmitter):
    """Appends ``<key> <scheduler id>`` per submission to ``GB_RECORD_FILE`` (O_APPEND: lines
    from several processes never interleave)."""

    name: ClassVar[str] = "file-recording"

    def __init__(self) -> None:
        self.path = os.environ.get("GB_RECORD_FILE")
        self.scheduler_id = os.environ.get("GB_SCHEDULER_ID", "?")

    def submit(self, occurrence: Occurrence) -> str | None:
        if self.path:
            line = f"{occurrence.idempotency_key} {self.scheduler_id}\n".encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return occurrence.idempotency_key


beat = Beat("memory://", submitter=FileRecordingSubmitter())
for _i in range(SCHEDULES):
    beat.schedule(name=f"tick-{_i}", task="json.dumps", every="1s", args=[_i])


# -- harness -----------------------------------------------------------------------------------


class Cluster:
    def __init__(self, dsn: str, tmp_path: Path) -> None:
        from goatbeat.stores.postgres import PostgresStore

        self.dsn = dsn
        self.tmp = tmp_path
        self.records = tmp_path / "records.txt"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.store = PostgresStore(dsn)
        self.store.migrate()

    def start(self, sid: str, **env: str) -> subprocess.Popen[bytes]:
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GB_RECORD_FILE": str(self.records),
            "GB_SCHEDULER_ID": sid,
            **env,
        }
        environ.pop("GOATBEAT_APP", None)
        log = open(self.tmp / f"{sid}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "goatbeat",
                "--app",
                APP,
                "--database",
                self.dsn,
                "--log-format",
                "json",
                "scheduler",
                "--scheduler-id",
                sid,
                "--lease-ttl",
                TTL,
                "--lease-renew-interval",
                RENEW,
                "--max-sleep",
                "1s",
            ],
            cwd=self.tmp,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        self.procs[sid] = proc
        return proc

    def events(self, sid: str) -> list[dict[str, Any]]:
        path = self.tmp / f"{sid}.log"
        out = []
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def wait_for_event(self, sid: str, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e["event"] == event for e in self.events(sid)):
                return
            if self.procs[sid].poll() is not None:
                raise AssertionError(f"{sid} exited: {(self.tmp / f'{sid}.log').read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"{sid} never logged {event}")

    def holder(self) -> str | None:
        lease = self.store.read_lease("scheduler")
        if lease is None or lease[3]:
            return None
        return split_instance(lease[0])[0]

    def wait_for_holder(self, wanted: set[str], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            holder = self.holder()
            if holder in wanted:
                return holder
            time.sleep(0.02)
        raise AssertionError(f"none of {wanted} took the lease; holder is {self.holder()}")

    def recorded(self) -> list[tuple[str, str]]:
        if not self.records.exists():
            return []
        return [
            (key, sid)
            for key, sid in (line.split(" ") for line in self.records.read_text().splitlines())
        ]

    def wait_for_records(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.recorded()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(self.recorded())} submissions recorded")
            time.sleep(0.05)

    def stop(self, sid: str, sig: int = signal.SIGTERM) -> int:
        proc = self.procs[sid]
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout=30)

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.store.close()

    def executions(self) -> list[tuple[str, str, str | None]]:
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT idempotency_key, status, scheduler_id FROM goatbeat_execution"
            ).fetchall()
        return [(str(k), str(s), None if sid is None else str(sid)) for k, s, sid in rows]


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(pg_dsn, tmp_path)
    try:
        yield c
    finally:
        c.shutdown()


def instants(keys: list[str]) -> dict[str, list[datetime]]:
    by_schedule: dict[str, list[datetime]] = defaultdict(list)
    for key in keys:
        name, _, stamp = key.partition(":")
        by_schedule[name].append(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    return {name: sorted(set(values)) for name, values in by_schedule.items()}


def assert_nothing_lost(keys: list[str]) -> None:
    """Every schedule fires each second: its recorded instants have no gap."""
    by_schedule = instants(keys)
    assert sorted(by_schedule) == [f"tick-{i}" for i in range(SCHEDULES)]
    for name, values in by_schedule.items():
        gaps = [
            (a, b)
            for a, b in zip(values, values[1:], strict=False)
            if b - a != timedelta(seconds=1)
        ]
        assert not gaps, f"{name} lost occurrences between {gaps}"


def assert_claimed_once_and_all_submitted(cluster: Cluster) -> None:
    rows = cluster.executions()
    keys = [k for k, _, _ in rows]
    assert len(keys) == len(set(keys))
    assert {s for _, s, _ in rows} == {"submitted"}, rows
    assert set(keys) == {k for k, _ in cluster.recorded()}


# -- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 3])
def test_exactly_one_of_several_schedulers_dispatches(cluster, count):
    sids = [f"node-{i}" for i in range(count)]
    for sid in sids:
        cluster.start(sid)
    leader = cluster.wait_for_holder(set(sids))
    for sid in sids:
        if sid != leader:
            cluster.wait_for_event(sid, "lease.standby")
    cluster.wait_for_records(4 * SCHEDULES)
    # Standbys first: stopping the leader first would (rightly) hand over to one of them.
    for sid in sorted(sids, key=lambda s: s == leader):
        assert cluster.stop(sid) == 0

    recorded = cluster.recorded()
    keys = [k for k, _ in recorded]
    assert len(keys) == len(set(keys)), "a key was dispatched twice"
    assert {sid for _, sid in recorded} == {leader}
    assert_nothing_lost(keys)
    assert_claimed_once_and_all_submitted(cluster)
    assert {sid for _, _, sid in cluster.executions()} == {leader}


def test_sigterm_of_the_leader_hands_over_to_the_standby(cluster):
    cluster.start("first")
    cluster.wait_for_holder({"first"})
    cluster.start("second")
    cluster.wait_for_event("second", "lease.standby")
    cluster.wait_for_records(2 * SCHEDULES)

    began = time.monotonic()
    cluster.procs["first"].send_signal(signal.SIGTERM)
    cluster.wait_for_holder({"second"})
    handover = time.monotonic() - began
    print(f"\ngraceful handover (SIGTERM -> standby holds the lease): {handover:.3f}s")
    assert cluster.procs["first"].wait(timeout=30) == 0

    before = len(cluster.recorded())
    cluster.wait_for_records(before + 2 * SCHEDULES)
    assert cluster.stop("second") == 0

    recorded = cluster.recorded()
    keys = [k for k, _ in recorded]
    assert len(keys) == len(set(keys)), "a key was dispatched twice"
    assert {sid for _, sid in recorded} == {"first", "second"}
    # Once the standby took over, the old leader dispatched nothing more.
    first_of_second = next(i for i, (_, sid) in enumerate(recorded) if sid == "second")
    assert all(sid == "second" for _, sid in recorded[first_of_second:])
    assert_nothing_lost(keys)
    assert_claimed_once_and_all_submitted(cluster)


def test_sigkill_of_the_leader_fails_over_within_the_lease_ttl(cluster):
    cluster.start("victim")
    cluster.wait_for_holder({"victim"})
    cluster.start("survivor")
    cluster.wait_for_event("survivor", "lease.standby")
    cluster.wait_for_records(2 * SCHEDULES)

    began = time.monotonic()
    assert cluster.stop("victim", signal.SIGKILL) == -signal.SIGKILL
    cluster.wait_for_holder({"survivor"})
    failover = time.monotonic() - began
    print(f"\ncrash failover (SIGKILL -> standby holds the lease): {failover:.3f}s (ttl {TTL})")

    before = len(cluster.recorded())
    cluster.wait_for_records(before + 2 * SCHEDULES)
    assert cluster.stop("survivor") == 0

    recorded = cluster.recorded()
    keys = [k for k, _ in recorded]
    # A kill between a submission and its bookkeeping may resubmit that key (at least once),
    # but only the survivor may repeat what the victim sent.
    counts: dict[str, list[str]] = defaultdict(list)
    for key, sid in recorded:
        counts[key].append(sid)
    assert all(
        sids in (["victim"], ["survivor"], ["victim", "survivor"]) for sids in counts.values()
    )
    assert_nothing_lost(keys)
    assert_claimed_once_and_all_submitted(cluster)


def test_crash_between_submission_and_bookkeeping_resubmits_the_same_key(cluster):
    crasher = cluster.start("crasher", GOATBEAT_CRASH_AFTER_SUBMIT="7")
    cluster.wait_for_holder({"crasher"})
    cluster.start("rescuer")  # before or after the crash: either way it must recover the key
    assert crasher.wait(timeout=60) == 137
    crashed = [k for k, sid in cluster.recorded() if sid == "crasher"]
    assert len(crashed) == 7
    # The 7th submission reached the backend but was never recorded as submitted.
    lost_bookkeeping = crashed[-1]

    cluster.wait_for_holder({"rescuer"})
    deadline = time.monotonic() + 30
    while lost_bookkeeping not in {k for k, sid in cluster.recorded() if sid == "rescuer"}:
        assert time.monotonic() < deadline, "the rescuer never resubmitted the crashed key"
        time.sleep(0.05)
    before = len(cluster.recorded())
    cluster.wait_for_records(before + SCHEDULES)
    assert cluster.stop("rescuer") == 0

    recorded = cluster.recorded()
    keys = [k for k, _ in recorded]
    assert keys.count(lost_bookkeeping) == 2  # dispatched at least once: here exactly twice
    events = cluster.events("rescuer")
    resubmitted = [e for e in events if e["event"] == "occurrence.resubmitted"]
    assert lost_bookkeeping in {e["idempotency_key"] for e in resubmitted}
    assert_nothing_lost(keys)
    assert_claimed_once_and_all_submitted(cluster)
    row = next(r for r in cluster.executions() if r[0] == lost_bookkeeping)
    assert row[1] == "submitted"
