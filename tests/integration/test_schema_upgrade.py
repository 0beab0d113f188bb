"""Upgrading a populated older database keeps every schedule on its phase.

A release's schema is the current one minus the versions it did not have yet, so the database
is built with today's store (interval, cron and manual runs, executions in every state, one
left ``claimed`` after a failed submission), then taken back to version 1, 2 or 3 by the
reverse of each later version, exactly as those releases left it: their columns and tables,
nothing else. ``migrate()`` then applies what is missing. Nothing of the older versions
changes, and claims afterwards land on the instants the schedules' phases give, with no repeat
and no gap. Version 3 adds ``goatbeat_schedule.published_fingerprint``: rows published before
it have none, the first publish records it, and only then is an edit made in the admin told
apart from an import. Version 4 adds ``goatbeat_execution.retry_at``: a row that failed before
it has none, so it is due at once.
Version 5 (operations) adds completion columns, the scheduler heartbeats and the record of
misses: executions from before it take completion reports, and status reads them.
Version 6 adds schedule control (pause, jitter, overlap...):
every row comes out unpaused, without jitter, overlap allowed, and a fingerprint recorded
before it still matches (the new columns are hashed only when set), so no publication reports
an edit that never happened.
Version 7 sets ``fillfactor = 50`` on ``goatbeat_schedule`` (PostgreSQL; SQLite records the
version and changes nothing): no row is touched, the table's ``reloptions`` say it.
Version 8 adds ``goatbeat_publication``, the order of code publications: a database from
before it has none recorded, so the first code publication after the upgrade is generation 1
(whatever it declares), and from then on older code writes nothing.
Version 9 adds the statuses ``lost`` and ``expired``: runs submitted before it take them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from goatbeat.core.health import Outcome
from goatbeat.core.model import OverlapPolicy, Schedule, SubmitOutcome
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.stores import open_store
from goatbeat.stores.postgres import PostgresStore
from goatbeat.stores.schema import latest_version
from goatbeat.stores.sqlite import SQLiteStore
from tests.conformance.helpers import claim_all, hourly, keys

T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)

# The reverse of each version after 1, newest first (the Django app's reverse SQL says the same).
# Version 6 differs by dialect: SQLite keeps the rebuilt execution table (its wider CHECKs
# accept every older row; 0006 rebuilds it again) but drops the index on the paused column
# before the column.
_CONTROL_COLUMNS = [
    "jitter",
    "overlap",
    "max_runtime",
    "pause_on_failure",
    "paused",
    "paused_at",
    "paused_by",
    "pause_note",
    "skipped_count",
    "active_execution_id",
]
_REVERSE_6 = {
    "sqlite": [
        "DROP INDEX goatbeat_schedule_due_idx",
        "CREATE INDEX goatbeat_schedule_due_idx ON goatbeat_schedule (next_run_at) "
        "WHERE enabled AND next_run_at IS NOT NULL",
        "DROP INDEX goatbeat_execution_buffered_idx",
        *(f"ALTER TABLE goatbeat_schedule DROP COLUMN {c}" for c in _CONTROL_COLUMNS),
        "DELETE FROM goatbeat_schema_version WHERE version = 6",
    ],
    "postgres": [
        "DROP INDEX goatbeat_execution_buffered_idx",
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check",
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check "
        "CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried', "
        "'succeeded', 'failed'))",
        "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_kind_check",
        "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_kind_check "
        "CHECK (kind IN ('scheduled', 'manual'))",
        "DROP INDEX goatbeat_schedule_due_idx",
        "CREATE INDEX goatbeat_schedule_due_idx ON goatbeat_schedule (next_run_at) "
        "WHERE enabled AND next_run_at IS NOT NULL",
        "ALTER TABLE goatbeat_schedule DROP CONSTRAINT goatbeat_schedule_overlap_check, "
        + ", ".join(f"DROP COLUMN {c}" for c in _CONTROL_COLUMNS),
        "DELETE FROM goatbeat_schema_version WHERE version = 6",
    ],
}
_EXECUTION_COLUMNS = (
    "id, schedule_id, schedule_name, scheduled_at, idempotency_key, kind, status, "
    "fencing_token, scheduler_id, claimed_at, submitted_at, finished_at, attempts, "
    "backend_task_id, error, retry_at"
)
_REVERSE: dict[int, dict[str, list[str]]] = {
    # SQLite keeps the rebuilt execution table (its wider CHECK accepts every older row;
    # 0009 rebuilds it again).
    9: {
        "postgres": [
            "DROP INDEX goatbeat_execution_open_idx",
            "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check",
            "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check "
            "CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'running', 'retried', "
            "'succeeded', 'failed', 'skipped', 'buffered'))",
            "DELETE FROM goatbeat_schema_version WHERE version = 9",
        ],
        "sqlite": [
            "DROP INDEX goatbeat_execution_open_idx",
            "DELETE FROM goatbeat_schema_version WHERE version = 9",
        ],
    },
    8: {
        dialect: [
            "DROP TABLE goatbeat_publication",
            "DELETE FROM goatbeat_schema_version WHERE version = 8",
        ]
        for dialect in ("postgres", "sqlite")
    },
    7: {
        "postgres": [
            "ALTER TABLE goatbeat_schedule RESET (fillfactor)",
            "DELETE FROM goatbeat_schema_version WHERE version = 7",
        ],
        "sqlite": ["DELETE FROM goatbeat_schema_version WHERE version = 7"],
    },
    6: _REVERSE_6,
    5: {
        "postgres": [
            "DROP TABLE goatbeat_miss",
            "DROP TABLE goatbeat_scheduler",
            "ALTER TABLE goatbeat_schedule DROP COLUMN last_success_at, "
            "DROP COLUMN last_failure_at, DROP COLUMN consecutive_failures",
            "ALTER TABLE goatbeat_execution DROP CONSTRAINT goatbeat_execution_status_check",
            "ALTER TABLE goatbeat_execution ADD CONSTRAINT goatbeat_execution_status_check "
            "CHECK (status IN ('claimed', 'submitted', 'submit_failed', 'succeeded', 'failed'))",
            "ALTER TABLE goatbeat_execution DROP COLUMN started_at, DROP COLUMN runtime, "
            "DROP COLUMN worker, DROP COLUMN retries",
            "DELETE FROM goatbeat_schema_version WHERE version = 5",
        ],
        "sqlite": [
            "DROP TABLE goatbeat_miss",
            "DROP TABLE goatbeat_scheduler",
            "ALTER TABLE goatbeat_schedule DROP COLUMN last_success_at",
            "ALTER TABLE goatbeat_schedule DROP COLUMN last_failure_at",
            "ALTER TABLE goatbeat_schedule DROP COLUMN consecutive_failures",
            # Version 4's execution table: 0001_initial.sql's, with 0004's retry_at.
            """CREATE TABLE goatbeat_execution_v1 (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                schedule_id integer NULL CONSTRAINT goatbeat_execution_schedule_id_fkey
                    REFERENCES goatbeat_schedule (id) ON DELETE SET NULL
                    DEFERRABLE INITIALLY DEFERRED,
                schedule_name varchar(200) NOT NULL, scheduled_at TEXT NOT NULL,
                idempotency_key varchar(255) NOT NULL,
                kind varchar(16) NOT NULL DEFAULT 'scheduled',
                status varchar(16) NOT NULL DEFAULT 'claimed',
                fencing_token integer NULL, scheduler_id varchar(255) NULL,
                claimed_at TEXT NOT NULL, submitted_at TEXT NULL, finished_at TEXT NULL,
                attempts integer NOT NULL DEFAULT 0, backend_task_id varchar(255) NULL,
                error TEXT NULL, retry_at TEXT NULL,
                CONSTRAINT goatbeat_execution_idempotency_key_key UNIQUE (idempotency_key),
                CONSTRAINT goatbeat_execution_kind_check CHECK (kind IN ('scheduled', 'manual')),
                CONSTRAINT goatbeat_execution_status_check CHECK (status IN (
                    'claimed', 'submitted', 'submit_failed', 'succeeded', 'failed')))""",
            f"INSERT INTO goatbeat_execution_v1 ({_EXECUTION_COLUMNS}) "
            f"SELECT {_EXECUTION_COLUMNS} FROM goatbeat_execution",
            "DROP TABLE goatbeat_execution",
            "ALTER TABLE goatbeat_execution_v1 RENAME TO goatbeat_execution",
            "CREATE INDEX goatbeat_execution_pending_idx "
            "ON goatbeat_execution (claimed_at) WHERE status = 'claimed'",
            "CREATE INDEX goatbeat_execution_schedule_idx "
            "ON goatbeat_execution (schedule_id, scheduled_at DESC)",
            "CREATE INDEX goatbeat_execution_status_idx "
            "ON goatbeat_execution (status, scheduled_at DESC)",
            "CREATE INDEX goatbeat_execution_name_idx "
            "ON goatbeat_execution (schedule_name, scheduled_at DESC)",
            "DELETE FROM goatbeat_schema_version WHERE version = 5",
        ],
    },
    4: {
        dialect: [
            "ALTER TABLE goatbeat_execution DROP COLUMN retry_at",
            "DELETE FROM goatbeat_schema_version WHERE version = 4",
        ]
        for dialect in ("postgres", "sqlite")
    },
    3: {
        dialect: [
            "ALTER TABLE goatbeat_schedule DROP COLUMN published_fingerprint",
            "DELETE FROM goatbeat_schema_version WHERE version = 3",
        ]
        for dialect in ("postgres", "sqlite")
    },
    2: {
        dialect: [
            "DROP TABLE goatbeat_task_key",
            "DROP TABLE goatbeat_delivery",
            "DELETE FROM goatbeat_schema_version WHERE version = 2",
        ]
        for dialect in ("postgres", "sqlite")
    },
}


def _back_to(url: str, version: int) -> None:
    dialect = "sqlite" if url.startswith("sqlite:///") else "postgres"
    statements = [
        sql for v in sorted(_REVERSE, reverse=True) if v > version for sql in _REVERSE[v][dialect]
    ]
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            for statement in statements:
                conn.execute(statement)
        return
    with psycopg.connect(url) as conn:
        for statement in statements:
            conn.execute(statement)


def _columns(url: str) -> set[str]:
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            return {r[1] for r in conn.execute("PRAGMA table_info(goatbeat_schedule)")}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'goatbeat_schedule'"
        ).fetchall()
    return {str(r[0]) for r in rows}


def _reloptions(url: str) -> list[str] | None:
    """``goatbeat_schedule``'s storage parameters (PostgreSQL only)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'goatbeat_schedule'::regclass"
        ).fetchone()
    assert row is not None
    return None if row[0] is None else [str(option) for option in row[0]]


def _everything(store: ScheduleStore) -> tuple[Any, ...]:
    return (store.list_schedules(), store.executions(limit=1000), store.pending(limit=1000))


def _tables(store: ScheduleStore) -> set[str]:
    if isinstance(store, SQLiteStore):
        with closing(sqlite3.connect(store.path)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    else:
        assert isinstance(store, PostgresStore) and store.dsn is not None
        with psycopg.connect(store.dsn) as conn:
            rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            rows = rows.fetchall()
    return {str(name) for (name,) in rows if str(name).startswith("goatbeat_")}


@pytest.mark.parametrize("previous", [1, 2, 3, 4, 5, 6, 7, 8])
def test_a_populated_older_database_upgrades_and_keeps_every_phase(
    database: str, previous: int
) -> None:
    store = open_store(database)
    try:
        store.migrate()
        store.publish(
            [
                hourly("hourly"),
                hourly("every-7m", trigger=IntervalTrigger("7m")),
                hourly("quarter", trigger=CronTrigger("*/15 * * * *")),
            ]
        )
        grant = store.acquire_lease("scheduler", "old", timedelta(minutes=5))
        assert grant is not None
        first = _claim_minute_by_minute(store, grant, T0, T0 + timedelta(hours=1))
        assert first  # executions exist: some submitted, one failed for good, one left claimed
        store.record_outcomes(
            [SubmitOutcome(execution_id=o.execution_id, ok=True) for o in first[:-3]]
            + [SubmitOutcome(execution_id=first[-3].execution_id, ok=False, error="down")]
            + [SubmitOutcome(execution_id=first[-2].execution_id, ok=False, error="x", final=True)]
        )
        store.request_run("hourly", now=T0 + timedelta(minutes=61))
        before = _everything(store)
        assert store.release_lease("scheduler", "old", grant.token)
    finally:
        store.close()
    _back_to(database, previous)
    assert ("consecutive_failures" in _columns(database)) == (previous >= 5)
    assert ("published_fingerprint" in _columns(database)) == (previous >= 3)
    postgres = not database.startswith("sqlite:")
    if postgres:
        assert _reloptions(database) == (["fillfactor=50"] if previous >= 7 else None)

    store = open_store(database)
    try:
        assert store.info()["schema_version"] == previous
        store.migrate()

        assert store.info()["schema_version"] == latest_version(
            "postgres" if postgres else "sqlite"
        )
        if postgres:
            # Version 7: half of each page of goatbeat_schedule is left free from now on.
            assert "fillfactor=50" in (_reloptions(database) or [])
        assert _tables(store) >= {
            "goatbeat_delivery",
            "goatbeat_task_key",
            "goatbeat_scheduler",
            "goatbeat_miss",
            "goatbeat_publication",
        }
        assert {"published_fingerprint", "consecutive_failures"} <= _columns(database)
        assert set(_CONTROL_COLUMNS) <= _columns(database)
        assert _everything(store) == before
        for stored in store.list_schedules():
            assert isinstance(stored, Schedule)
            assert not stored.paused and stored.skipped_count == 0 and not stored.jitter
            assert stored.overlap is OverlapPolicy.ALLOW and stored.max_runtime is None
        # Fingerprints recorded before version 6 still match: nothing reads as edited.
        assert store.edited_since_publish(["hourly", "every-7m", "quarter"]) == set()
        # The row that failed before the upgrade is due at once; nothing is backing off.
        assert first[-3].execution_id in {p.execution_id for p in store.pending(limit=100)}
        assert store.next_retry_at() is None
        if previous < 3:
            # Rows published before version 3 carry no fingerprint: no edit can be claimed yet.
            assert store.edited_since_publish(["hourly", "every-7m", "quarter"]) == set()
        grant = store.acquire_lease("scheduler", "new", timedelta(minutes=5))
        assert grant is not None
        later = _claim_minute_by_minute(
            store, grant, T0 + timedelta(hours=1), T0 + timedelta(hours=2)
        )
        # The next publish of the same definitions records their fingerprints without
        # touching them; an admin edit after that is told apart.
        untouched = store.list_schedules()
        result = store.publish(
            [
                hourly("hourly"),
                hourly("every-7m", trigger=IntervalTrigger("7m")),
                hourly("quarter", trigger=CronTrigger("*/15 * * * *")),
            ]
        )
        assert sorted(result.unchanged) == ["every-7m", "hourly", "quarter"]
        assert store.list_schedules() == untouched
        # Version 8: the first code publication since is generation 1; the code of before
        # (here, the same schedules less one) is older from now on and writes nothing.
        assert (result.generation, result.superseded) == (1, False)
        assert store.publish([hourly("hourly")]).generation == 2
        stale = store.publish(
            [
                hourly("hourly"),
                hourly("every-7m", trigger=IntervalTrigger("7m")),
                hourly("quarter", trigger=CronTrigger("*/15 * * * *")),
            ]
        )
        assert stale.superseded and store.list_schedules() == untouched
        store.update(hourly("quarter", trigger=CronTrigger("*/20 * * * *")))
        assert store.edited_since_publish(["hourly", "every-7m", "quarter"]) == {"quarter"}
        # An execution submitted before the upgrade takes its worker's report.
        submitted = first[0]
        assert store.record_started(submitted.idempotency_key, worker="w")
        assert store.record_completion(submitted.idempotency_key, outcome=Outcome.FAILED)
        [reported] = [e for e in store.executions(limit=1000) if e.id == submitted.execution_id]
        assert (reported.status.value, reported.worker) == ("failed", "w")
        # Version 9: a run submitted before the upgrade can end lost, another expired.
        for occurrence, outcome in ((first[1], Outcome.LOST), (first[2], Outcome.EXPIRED)):
            assert store.record_completion(occurrence.idempotency_key, outcome=outcome)
            [ended] = [e for e in store.executions(limit=1000) if e.id == occurrence.execution_id]
            assert ended.status.value == outcome.value
        assert store.end_lost_runs(lost_after=timedelta(hours=1)) == []
        assert store.status(now=T0 + timedelta(hours=2)).lease is not None
    finally:
        store.close()

    triggers = {"hourly": IntervalTrigger("1h"), "every-7m": IntervalTrigger("7m"),
                "quarter": CronTrigger("*/15 * * * *")}  # fmt: skip
    for name, trigger in triggers.items():
        before_upgrade = [o.scheduled_at for o in first if o.schedule_name == name]
        after_upgrade = [o.scheduled_at for o in later if o.schedule_name == name]
        # The phase continues: every instant of the trigger after the last one claimed before
        # the upgrade, up to the end of the second hour, once each.
        expected = []
        instant = trigger.next_after(before_upgrade[-1])
        while instant is not None and instant <= T0 + timedelta(hours=2):
            expected.append(instant)
            instant = trigger.next_after(instant)
        assert after_upgrade == expected, name
        assert after_upgrade, name
    assert not set(keys(first)) & set(keys(later))


def _claim_minute_by_minute(
    store: ScheduleStore, grant: Any, start: datetime, end: datetime
) -> list[Any]:
    """Claim as a scheduler would, a minute at a time (nothing gets late enough to misfire)."""
    claimed = []
    at = start
    while at < end:
        at += timedelta(minutes=1)
        claimed.extend(claim_all(store, grant, at))
    return claimed


def test_the_sqlite_rebuild_of_executions_keeps_every_earlier_column(tmp_path: Path) -> None:
    """SQLite cannot widen a CHECK in place, so versions 5 and 6 rebuild goatbeat_execution,
    naming its columns. A column an earlier version added and a rebuild forgot would be lost
    with its data: this fails first, version by version."""
    from goatbeat.stores.schema import migration_versions, split_statements, sqlite_migration_sql

    def columns(conn: sqlite3.Connection) -> list[str]:
        return [r[1] for r in conn.execute("PRAGMA table_info(goatbeat_execution)")]

    with closing(sqlite3.connect(tmp_path / "gb.db")) as conn:
        before: list[str] = []
        for version in migration_versions("sqlite"):
            for statement in split_statements(sqlite_migration_sql(version)):
                conn.execute(statement)
            after = columns(conn)
            assert set(before) <= set(after), (version, sorted(set(before) - set(after)))
            before = after
