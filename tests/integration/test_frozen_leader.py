"""A leader frozen inside its claim transaction cannot stall failover.

Two real ``python -m goatbeat scheduler`` processes on the throwaway PostgreSQL. The leader
runs with the store's test hook ``GOATBEAT_FREEZE_IN_CLAIM``: it SIGSTOPs itself inside a claim
transaction, right after the compare-and-set, while its backend holds the lease row
``FOR SHARE`` and the advanced schedules' row locks. The server is left with a session "idle
in transaction" whose client will not answer, exactly as after a GC pause, a VM migration or a
lost network.

Checked: the standby dispatches within ``lease_ttl + 1 s`` of the freeze (the failover bound;
the one timed assertion, because the bound is the property); the frozen leader, resumed, finds
its transaction gone and dispatches nothing; no key is claimed or dispatched twice and no
occurrence is lost. The figures are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from goatbeat.beat import Beat
from goatbeat.core.instance import split_instance
from goatbeat.core.model import Occurrence
from goatbeat.stores.postgres import FREEZE_ENV
from tests.doubles import AcceptingSubmitter

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.test_frozen_leader:beat"
SCHEDULES = 3
TTL = 3.0
RENEW = 1.0
BOUND = TTL + 1.0
"""The failover bound the issue asks for: the standby dispatches within lease_ttl + 1 s."""


class TimedRecordingSubmitter(AcceptingSubmitter):
    """Appends ``<key> <scheduler id> <monotonic>`` per submission to ``GB_RECORD_FILE``
    (O_APPEND: lines from both processes never interleave; the monotonic clock is the host's,
    shared by both processes and the test)."""

    name: ClassVar[str] = "timed-recording"

    def submit(self, occurrence: Occurrence) -> str | None:
        path = os.environ.get("GB_RECORD_FILE")
        if path:
            sid = os.environ.get("GB_SCHEDULER_ID", "?")
            line = f"{occurrence.idempotency_key} {sid} {time.monotonic():.6f}\n".encode()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return occurrence.idempotency_key


beat = Beat("memory://", submitter=TimedRecordingSubmitter())
for _i in range(SCHEDULES):
    beat.schedule(name=f"tick-{_i}", task="json.dumps", every="1s", args=[_i])


class Pair:
    """The two scheduler processes, their logs and what they dispatched."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        from goatbeat.stores.postgres import PostgresStore

        self.dsn = dsn
        self.tmp = tmp
        self.records = tmp / "records.txt"
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
        with open(self.tmp / f"{sid}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "goatbeat", "--app", APP, "--database", self.dsn,
                 "--log-format", "json", "scheduler", "--scheduler-id", sid,
                 "--lease-ttl", f"{TTL:g}s", "--lease-renew-interval", f"{RENEW:g}s",
                 "--max-sleep", "1s"],
                cwd=self.tmp, env=environ, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        self.procs[sid] = proc
        return proc

    def events(self, sid: str) -> list[dict[str, Any]]:
        text = (self.tmp / f"{sid}.log").read_text()
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def wait_for(self, what: str, check: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            for sid, proc in self.procs.items():
                if proc.poll() is not None:
                    log = (self.tmp / f"{sid}.log").read_text()[-3000:]
                    raise AssertionError(f"{sid} exited while waiting for {what}:\n{log}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}")

    def event(self, sid: str, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events(sid) if e["event"] == name), None)

    def holder(self) -> str | None:
        lease = self.store.read_lease("scheduler")
        return None if lease is None or lease[3] else split_instance(lease[0])[0]

    def recorded(self) -> list[tuple[str, str, float]]:
        if not self.records.exists():
            return []
        lines = self.records.read_text().splitlines()
        return [(k, sid, float(t)) for k, sid, t in (line.split(" ") for line in lines)]

    def stop(self, sid: str) -> int:
        proc = self.procs[sid]
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # harmless when running; needed when stopped
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=30)

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.store.close()

    def executions(self) -> list[tuple[str, str, str | None, int | None]]:
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT idempotency_key, status, scheduler_id, fencing_token "
                "FROM goatbeat_execution"
            ).fetchall()
        return [(str(k), str(s), sid, tok) for k, s, sid, tok in rows]


@pytest.fixture
def pair(pg_dsn: str, tmp_path: Path) -> Iterator[Pair]:
    p = Pair(pg_dsn, tmp_path)
    try:
        yield p
    finally:
        p.shutdown()


def is_stopped(pid: int) -> bool:
    """The process is stopped by a signal (state ``T`` in /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def assert_nothing_lost(keys: list[str]) -> None:
    by_schedule: dict[str, set[datetime]] = {}
    for key in keys:
        name, _, stamp = key.partition(":")
        by_schedule.setdefault(name, set()).add(
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        )
    assert sorted(by_schedule) == [f"tick-{i}" for i in range(SCHEDULES)]
    for name, values in by_schedule.items():
        ordered = sorted(values)
        gaps = [
            (a, b)
            for a, b in zip(ordered, ordered[1:], strict=False)
            if b - a > timedelta(seconds=1)
        ]
        assert not gaps, f"{name} lost occurrences between {gaps}"


def test_a_leader_frozen_inside_its_claim_transaction_cannot_stall_failover(pair: Pair) -> None:
    # The 5th claim that advances something freezes (about 4 s in): by then "frozen" has led
    # and dispatched for a while, and the standby is up and standing by.
    frozen = pair.start("frozen", **{FREEZE_ENV: "5"})
    pair.wait_for("frozen to lead", lambda: pair.holder() == "frozen")
    pair.start("standby")
    pair.wait_for("the standby", lambda: pair.event("standby", "lease.standby"))

    freeze = pair.wait_for("the freeze", lambda: pair.event("frozen", "store.frozen"))
    pair.wait_for("the SIGSTOP", lambda: is_stopped(frozen.pid), timeout=5)
    froze_at = float(freeze["monotonic"])
    token = int(freeze["fencing_token"])

    def standby_dispatched() -> float | None:
        times = [t for _, sid, t in pair.recorded() if sid == "standby"]
        return min(times) if times else None

    # Bounded well past the bound, so a failure says by how much it was missed.
    first = pair.wait_for("the standby's first dispatch", standby_dispatched, timeout=3 * BOUND)
    takeover = first - froze_at
    print(
        f"\nfrozen leader: the standby dispatched {takeover:.3f}s after the freeze (ttl {TTL:g}s)"
    )
    assert takeover <= BOUND, f"the standby dispatched {takeover:.3f}s after the freeze"

    # Resume the frozen leader: its transaction is gone, it must dispatch nothing.
    resumed_at = time.monotonic()
    frozen.send_signal(signal.SIGCONT)
    pair.wait_for(
        "the resumed leader to stand down",
        lambda: [e for e in pair.events("frozen") if e["event"] == "lease.standby"],
    )
    print(f"resumed leader stood down {time.monotonic() - resumed_at:.3f}s after SIGCONT")
    standby_count = sum(1 for _, sid, _ in pair.recorded() if sid == "standby")
    pair.wait_for(
        "more dispatches by the standby",
        lambda: (
            sum(1 for _, sid, _ in pair.recorded() if sid == "standby")
            >= standby_count + 2 * SCHEDULES
        ),
    )
    assert pair.stop("frozen") == 0
    assert pair.stop("standby") == 0

    recorded = pair.recorded()
    late = [(k, t) for k, sid, t in recorded if sid == "frozen" and t >= froze_at]
    assert not late, f"the frozen leader dispatched after its freeze: {late}"
    keys = [k for k, _, _ in recorded]
    assert [k for k, n in Counter(keys).items() if n > 1] == []
    assert_nothing_lost(keys)
    rows = pair.executions()
    assert {s for _, s, _, _ in rows} == {"submitted"}
    assert {k for k, *_ in rows} == set(keys)
    # The frozen claim was rolled back: the frozen leader's rows are exactly what it dispatched
    # before the freeze, under its one token; every later occurrence is the standby's.
    assert {k for k, _, sid, _ in rows if sid == "frozen"} == {
        k for k, sid, _ in recorded if sid == "frozen"
    }
    assert {tok for _, _, sid, tok in rows if sid == "frozen"} == {token}
    failed = [e for e in pair.events("frozen") if e["event"] == "scheduler.error"]
    assert failed and failed[0]["stage"] == "claim", failed
    assert "idle-in-transaction timeout" in failed[0]["error"]


def test_a_claim_frozen_in_its_transaction_is_rolled_back_and_its_token_refused(
    pg_dsn: str,
) -> None:
    """The same guarantee in-process, deterministic: the claim blocks inside its transaction
    (in the planner, after the lease check took the lease row FOR SHARE)."""
    from goatbeat.stores.postgres import PostgresStore
    from tests.integration.frozen_claim import TTL, run_frozen_claim

    standby = PostgresStore(pg_dsn)
    standby.migrate()
    try:
        outcome = run_frozen_claim(lambda planner: PostgresStore(pg_dsn, planner=planner), standby)
    finally:
        standby.close()
    print(f"\nfrozen claim: the standby got the lease {outcome.takeover:.3f}s after the freeze")
    assert outcome.takeover <= TTL.total_seconds() + 1.0
    assert "idle-in-transaction timeout" in str(outcome.frozen_error)
    assert outcome.stale_refused
    assert outcome.frozen_keys == []
    assert outcome.standby_keys  # what the frozen claim had planned, claimed by the standby


def test_the_claims_cap_ends_with_its_transaction_and_stays_out_of_a_callers(pg_dsn: str) -> None:
    from goatbeat.core.model import Schedule
    from goatbeat.core.triggers import IntervalTrigger
    from goatbeat.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn)
    store.migrate()
    try:
        store.create(Schedule(name="cap", task="tasks.tick", trigger=IntervalTrigger("1s")))
        grant = store.acquire_lease("scheduler", "me", timedelta(seconds=30))
        assert grant is not None
        conn = store.provider.get()
        settings = (
            "SELECT current_setting('statement_timeout'), "
            "current_setting('idle_in_transaction_session_timeout')"
        )
        later = store.now() + timedelta(seconds=5)
        seen: list[tuple[str, str]] = []

        def spying(schedule: Any, now: datetime) -> Any:
            from goatbeat.core.misfire import plan

            seen.append(conn.execute(settings).fetchone())
            return plan(schedule, now)

        store.planner = spying
        assert store.claim_due(grant, scheduler_id="me", limit=10, now=later).occurrences
        # Inside its own transaction the claim is capped at what is left of the lease (~30 s)...
        statement, idle = seen[-1]
        # PostgreSQL shows 30 s as "30s", and 29.999 s as "29999ms".
        seconds = int(statement[:-2]) / 1000 if statement.endswith("ms") else int(statement[:-1])
        assert statement == idle and statement.endswith("s") and 25 <= seconds <= 30
        # ...and the cap ends with it.
        assert conn.execute(settings).fetchone() == ("0", "0")
        # Nested in a caller's transaction (a savepoint), nothing is set: it would outlive it.
        with conn.transaction():
            store.claim_due(grant, scheduler_id="me", limit=10, now=later + timedelta(seconds=5))
            assert seen[-1] == ("0", "0")
            assert conn.execute(settings).fetchone() == ("0", "0")
    finally:
        store.close()
