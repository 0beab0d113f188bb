"""Failover: how long dispatch stops when the leader goes away.

Two scheduler processes (``goatbeat ... scheduler``, no-op submitter, ``lease_ttl`` 10 s,
renewed every 3 s) share one PostgreSQL database holding 20 interval schedules firing every
100 ms, so there is always something due. Once the first holds the lease, the second is a
standby and the leader has been claiming for 2 s, the leader receives:

- SIGTERM (graceful): it finishes its batch, releases the lease and NOTIFYs; the standby wakes
  on the notification and takes over;
- SIGKILL (crash): nothing is released; the standby takes over when the lease expires by the
  database clock, at most ``lease_ttl`` after the leader's last renewal.

Reported: time from the signal to the first execution claimed by the standby (its
``claimed_at``, the database's ``now()`` in the claim transaction; same host clock), median
over the trials (3; 1 with ``--quick``).
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench._common import (
    Row,
    SchedulerProcess,
    Section,
    Servers,
    insert_schedules,
    migrate,
)

LEASE_TTL = 10.0
OPTIONS = ["--lease-ttl", f"{LEASE_TTL:g}s", "--lease-renew-interval", "3s"]


def _first_claim(dsn: str, scheduler_id: str, timeout: float) -> datetime:
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT min(claimed_at) FROM goatbeat_execution WHERE scheduler_id = %s",
                [scheduler_id],
            ).fetchone()
            if row and row[0] is not None:
                return row[0].astimezone(UTC)  # type: ignore[no-any-return]
            time.sleep(0.05)
    raise RuntimeError(f"{scheduler_id} claimed nothing within {timeout}s")


def trial(dsn: str, signum: int, label: str) -> dict[str, Any]:
    leader = SchedulerProcess(dsn, scheduler_id=f"{label}-leader", options=OPTIONS)
    standby: SchedulerProcess | None = None
    try:
        leader.wait_for("lease.acquired", 60)
        standby = SchedulerProcess(dsn, scheduler_id=f"{label}-standby", options=OPTIONS)
        standby.wait_for("lease.standby", 60)
        time.sleep(2.0)
        signalled = datetime.now(UTC)
        leader.signal(signum)
        claimed = _first_claim(dsn, standby.scheduler_id, LEASE_TTL * 3)
        taken_at, _ = standby.wait_for("lease.acquired", 5)
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()
    return {"seconds": (claimed - signalled).total_seconds()}


def run(servers: Servers, *, quick: bool) -> Section:
    trials = 1 if quick else 3
    dsn = servers.new_database("failover")
    results: dict[str, list[float]] = {"SIGTERM": [], "SIGKILL": []}
    try:
        migrate(dsn)
        soon = datetime.now(UTC)
        # Every 100 ms, so the first claim after a takeover comes at once (opted in: goatbeat
        # refuses intervals below 1 s unless they say allow_subsecond).
        spec = {"kind": "interval", "every": 0.1, "anchor": None, "allow_subsecond": True}
        insert_schedules(
            dsn, [f"fast-{i}" for i in range(20)], [spec] * 20, [soon] * 20, misfire_grace=60.0
        )
        for i in range(trials):
            for name, signum in (("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL)):
                out = trial(dsn, signum, f"{name.lower()}-{i}")
                print(f"  failover {name}: {out['seconds'] * 1000:.0f} ms", file=sys.stderr)
                results[name].append(out["seconds"])
    finally:
        servers.drop_database(dsn)
    term = statistics.median(results["SIGTERM"])
    kill = statistics.median(results["SIGKILL"])
    section = Section("Failover between two schedulers")
    section.rows = [
        Row(section.name, "SIGTERM of the leader -> first claim by the standby", term * 1000,
            "ms", target="< 1 s", met=term < 1.0),
        Row(section.name, f"SIGKILL of the leader -> first claim (lease_ttl {LEASE_TTL:g} s)",
            kill * 1000, "ms", target=f"<= lease_ttl ({LEASE_TTL:g} s)", met=kill <= LEASE_TTL),
    ]  # fmt: skip
    rows = "\n".join(
        f"| {name} | {', '.join(f'{v * 1000:.0f} ms' for v in values)} | "
        f"{statistics.median(values) * 1000:.0f} ms |"
        for name, values in results.items()
    )
    section.details = (
        f"lease_ttl {LEASE_TTL:g} s, renewal every 3 s; {trials} trial(s) each.\n\n"
        "| signal | trials | median |\n|---|---|---:|\n" + rows + "\n"
    )
    section.chart = {"SIGTERM": term, "SIGKILL": kill, "lease_ttl": LEASE_TTL}
    return section
