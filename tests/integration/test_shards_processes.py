"""Three real ``python -m goatbeat scheduler --shards 4`` processes on one PostgreSQL database.

Checked: the four shard leases are split 2/1/1; SIGTERM hands the stopped process's shards to
the others in under a second (from the signal to the lease rows); SIGKILL's are taken within
``lease_ttl``; ``goatbeat status`` names each shard's holder and ``--check`` is healthy; no
occurrence is claimed or dispatched twice and none is lost (each schedule's instants are
contiguous). Figures are printed (``-s``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from goatbeat.beat import Beat
from goatbeat.core.instance import split_instance
from goatbeat.core.shards import lease_name
from goatbeat.stores.postgres import PostgresStore
from tests.integration.test_multi_scheduler import FileRecordingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.test_shards_processes:beat"
SHARDS = 4
TTL = 3.0

beat = Beat("memory://", submitter=FileRecordingSubmitter())
for _i in range(16):
    beat.schedule(name=f"shard-tick-{_i}", task="json.dumps", every="1s", args=[_i])


class Cluster:
    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn = dsn
        self.tmp = tmp
        self.records = tmp / "records.txt"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.store = PostgresStore(dsn)
        self.store.migrate()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("GOATBEAT_APP", None)
        return subprocess.run(
            [sys.executable, "-m", "goatbeat", "--app", APP, "--database", self.dsn, *args],
            cwd=self.tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self, sid: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GB_RECORD_FILE": str(self.records),
            "GB_SCHEDULER_ID": sid,
        }
        env.pop("GOATBEAT_APP", None)
        log = open(self.tmp / f"{sid}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs[sid] = subprocess.Popen(
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
                "--shards",
                str(SHARDS),
                "--lease-ttl",
                f"{TTL:g}s",
                "--lease-renew-interval",
                "1s",
                "--max-sleep",
                "1s",
            ],
            cwd=self.tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()

    def holders(self) -> dict[str, str | None]:
        names = [lease_name(i, SHARDS) for i in range(SHARDS)]
        rows = self.store.read_leases(names)
        return {
            n: None if n not in rows or rows[n][3] else split_instance(rows[n][0])[0] for n in names
        }

    def split(self) -> list[int]:
        found = self.holders()
        if None in found.values():
            return []
        return sorted(Counter(found.values()).values())

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.store.close()


def wait_for(predicate: Any, timeout: float, step: float = 0.01) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(step)
    raise AssertionError(f"not within {timeout}s")


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(pg_dsn, tmp_path)
    try:
        yield c
    finally:
        c.shutdown()


def test_three_processes_share_four_shards_and_hand_them_over(cluster: Cluster) -> None:
    for sid in ("p-a", "p-b", "p-c"):
        cluster.start(sid)
    took = wait_for(lambda: cluster.split() == [1, 1, 2], 60)
    print(f"\n3 processes split 4 shards 2/1/1 {took:.2f}s after the start")
    time.sleep(2)

    status = cluster.run("status")
    assert status.returncode == 0, status.stderr
    for name, holder in cluster.holders().items():
        assert f"shard:      {name} held by {holder}" in status.stdout
    check = cluster.run("status", "--check")
    assert check.returncode == 0 and "hold the 4 shards" in check.stdout, check.stdout

    # SIGTERM: its shards are held by the others in under a second.
    leaving = next(s for s, n in Counter(cluster.holders().values()).items() if n == 2)
    signalled = time.monotonic()
    cluster.procs[leaving].send_signal(signal.SIGTERM)
    wait_for(lambda: leaving not in cluster.holders().values() and cluster.split() == [2, 2], 5)
    handed = time.monotonic() - signalled
    assert cluster.procs[leaving].wait(10) == 0
    print(f"SIGTERM of {leaving}: its shards held by the others {handed:.3f}s after the signal")
    assert handed < 1.0

    # SIGKILL: its shards are taken within lease_ttl.
    victim = next(s for s in ("p-a", "p-b", "p-c") if s != leaving)
    killed = time.monotonic()
    cluster.procs[victim].kill()
    cluster.procs[victim].wait()
    wait_for(
        lambda: set(cluster.holders().values()) == {"p-a", "p-b", "p-c"} - {leaving, victim},
        TTL + 3,
    )
    taken = time.monotonic() - killed
    print(f"SIGKILL of {victim}: all 4 shards held by the survivor {taken:.2f}s later")
    assert taken <= TTL + 0.5

    time.sleep(2)
    survivor = ({"p-a", "p-b", "p-c"} - {leaving, victim}).pop()
    cluster.procs[survivor].send_signal(signal.SIGTERM)
    assert cluster.procs[survivor].wait(10) == 0

    with psycopg.connect(cluster.dsn) as conn:
        rows = conn.execute(
            "SELECT schedule_name, scheduled_at, status FROM goatbeat_execution"
            " ORDER BY schedule_name, scheduled_at"
        ).fetchall()
    by_name: dict[str, list[datetime]] = defaultdict(list)
    for name, at, _status in rows:
        by_name[name].append(at)
    assert len(by_name) == 16
    for name, instants in by_name.items():
        assert len(instants) == len(set(instants)), f"{name} claimed twice"
        gaps = {b - a for a, b in zip(instants, instants[1:], strict=False)}
        assert gaps <= {timedelta(seconds=1)}, f"{name} lost an occurrence: {sorted(gaps)}"
    keys = [line.split(" ")[0] for line in cluster.records.read_text().splitlines()]
    repeated = {k: n for k, n in Counter(keys).items() if n > 1}
    # A kill between submission and bookkeeping resubmits the same key (at least once):
    # only the killed process's last batch may repeat.
    assert len(repeated) <= 16, repeated
    print(f"{len(rows)} occurrences claimed once each; {len(repeated)} resubmitted after SIGKILL")
