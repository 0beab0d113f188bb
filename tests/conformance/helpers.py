"""Shared helpers for the conformance suite."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.model import LeaseGrant, Occurrence, Schedule
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger

# A fixed instant far from the test machine's clock: claims pass ``now=`` explicitly, so what is
# due never depends on when the suite runs.
T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def hourly(name: str, **kw: Any) -> Schedule:
    """An hourly schedule whose next run is T0 + 1h (the anchor is its last run)."""
    kw.setdefault("task", f"tasks.{name.replace(' ', '_')}")
    kw.setdefault("trigger", IntervalTrigger("1h"))
    kw.setdefault("last_run_at", T0)
    return Schedule(name=name, **kw)


def snapshot(store: ScheduleStore) -> tuple[Any, ...]:
    """Everything a store holds that a test can see, to prove a failed call wrote nothing."""
    return (
        store.list_schedules(),
        store.executions(limit=10_000),
        store.pending(limit=10_000),
    )


def lease(store: ScheduleStore, holder: str = "s1", name: str = "scheduler") -> LeaseGrant:
    grant = store.acquire_lease(name, holder, timedelta(minutes=5))
    assert grant is not None
    return grant


def claim_all(
    store: ScheduleStore, grant: LeaseGrant, now: datetime, *, limit: int = 100
) -> list[Occurrence]:
    """Claim in batches until nothing is due at ``now``."""
    out: list[Occurrence] = []
    while True:
        result = store.claim_due(grant, scheduler_id=grant.holder, limit=limit, now=now)
        assert not result.refused
        out.extend(result.occurrences)
        if result.schedules_seen == 0:
            return out


def keys(items: Sequence[Any]) -> list[str]:
    return [i.idempotency_key for i in items]


JSON_COLUMNS = frozenset({"trigger", "args", "kwargs", "headers"})


class SQLText(str):
    """A column value written to a SQL store exactly as this text (no JSON encoding): what
    only a text column can hold, such as JSON that does not parse."""


def write_raw(backend: Any, store: ScheduleStore, name: str, **columns: Any) -> None:
    """Overwrite columns of the stored row ``name`` behind the store's back, as a hand-written
    ``UPDATE`` would: unchecked, version unchanged. JSON columns take Python values."""
    if backend.kind == "memory":
        store.write_raw(name, **columns)  # type: ignore[attr-defined]
        return
    if backend.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(backend.url.removeprefix("sqlite:///"))
        try:
            # The schema's CHECKs are what keep a bad misfire_policy out; a hand edit can
            # switch them off, so the damage can still happen.
            conn.execute("PRAGMA ignore_check_constraints = ON")
            with conn:
                for column, value in columns.items():
                    if column in JSON_COLUMNS and not isinstance(value, SQLText):
                        value = json.dumps(value)
                    conn.execute(
                        f"UPDATE goatbeat_schedule SET {column} = ? WHERE name = ?", (value, name)
                    )
        finally:
            conn.close()
        return
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(backend.url, autocommit=True) as pg:
        for column, value in columns.items():
            if column in JSON_COLUMNS:
                value = Jsonb(value)
            pg.execute(
                f"UPDATE goatbeat_schedule SET {column} = %s WHERE name = %s",  # type: ignore[arg-type]
                (value, name),
            )


ALL = ("memory", "sqlite", "postgres")
# name -> (column, value written by hand, stores that can hold it): one way each to damage
# a row that the scheduler, the listings and the admin must survive.
DAMAGE: dict[str, tuple[str, Any, tuple[str, ...]]] = {
    "unknown-kind": ("trigger", {"kind": "nope"}, ALL),
    "unknown-zone-in-trigger": (
        "trigger",
        {"kind": "cron", "expression": "0 * * * *", "timezone": "Mars/Olympus"},
        ALL,
    ),
    "unknown-zone-column": ("timezone", "Mars/Olympus", ALL),
    "args-object": ("args", {"a": 1}, ALL),
    "kwargs-array": ("kwargs", [1], ALL),
    "headers-string": ("headers", "x", ALL),
    "catch-up-zero": ("catch_up_limit", 0, ALL),
    "grace-negative": ("misfire_grace", -5.0, ALL),
    "priority-out-of-range": ("priority", 1000, ALL),
    "expires-zero": ("expires", 0.0, ALL),
    "empty-task": ("task", "", ALL),
    # PostgreSQL's CHECK constraint keeps it out; SQLite's can be switched off by hand.
    "misfire-garbage": ("misfire_policy", "sometimes", ("memory", "sqlite")),
    # Only a text column can hold JSON that does not parse.
    "args-not-json": ("args", SQLText("[1, 2"), ("sqlite",)),
}
