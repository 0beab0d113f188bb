"""Hostile input at the edges: SQL in schedule names through the CLI, and forged NOTIFY payloads.

Names like ``x'); drop table goatbeat_schedule;--`` must travel through ``goatbeat schedule
show/run`` as data (every query is parameterized), on SQLite and PostgreSQL. The NOTIFY channel
is open to anyone who can connect: a receiver treats a payload that is not one of the
identifiers it knows (``schedule:<id>``, ``run:<id>``, ``lease:<name>``) as a plain wake-up and
never uses it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

import psycopg
import pytest
from click.testing import CliRunner, Result

from goatbeat.cli import cli
from goatbeat.core.config import Settings
from goatbeat.core.model import Occurrence, Schedule, Source
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.stores import open_store
from goatbeat.stores.postgres import PostgresStore
from tests.doubles import AcceptingSubmitter

HOSTILE_NAMES = [
    "x'); drop table goatbeat_schedule;--",
    'y"; DELETE FROM goatbeat_execution; --',
    "100% %(name)s %s :name ? $1",
]
TABLES = ["goatbeat_schedule", "goatbeat_execution", "goatbeat_lease"]


@pytest.fixture
def store(database: str) -> Iterator[ScheduleStore]:
    s = open_store(database)
    s.migrate()
    try:
        yield s
    finally:
        s.close()


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def admin(name: str) -> Schedule:
    return Schedule(
        name=name,
        task="tasks.report",
        trigger=CronTrigger("0 9 * * *"),
        args=(name,),
        source=Source.ADMIN,
    )


def tables_intact(store: ScheduleStore, database: str) -> None:
    if database.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(database.removeprefix("sqlite:///"))
        try:
            found = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        finally:
            conn.close()
    else:
        with psycopg.connect(database) as conn:
            found = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                ).fetchall()
            }
    assert set(TABLES) <= found, found


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_schedule_show_and_run_treat_a_hostile_name_as_data(
    store: ScheduleStore, database: str, name: str
) -> None:
    store.create(admin(name))
    store.create(admin("bystander"))

    shown = invoke("--database", database, "schedule", "show", name, "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["name"] == name and data["args"] == [name]

    text = invoke("--database", database, "schedule", "show", name)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0].startswith(name)

    ran = invoke("--database", database, "schedule", "run", name)
    assert ran.exit_code == 0, ran.output
    assert name in ran.stdout

    tables_intact(store, database)
    assert [s.name for s in store.list_schedules()] == sorted(["bystander", name])
    runs = store.executions(name=name)
    assert [(e.schedule_name, e.kind.value) for e in runs] == [(name, "manual")]
    assert runs[0].idempotency_key.startswith(f"{name}:manual:")
    assert store.executions(name="bystander") == []


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_name_that_does_not_exist_is_a_one_line_error(
    store: ScheduleStore, database: str, name: str
) -> None:
    store.create(admin("bystander"))
    for command in ("show", "run"):
        result = invoke("--database", database, "schedule", command, name)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("goatbeat: error: schedule:"), lines
        assert repr(name) in lines[0]
    tables_intact(store, database)
    assert [s.name for s in store.list_schedules()] == ["bystander"]
    assert store.executions() == []


# -- NOTIFY --------------------------------------------------------------------------------------

HOSTILE_PAYLOADS = [
    "schedule:1; drop table goatbeat_schedule",
    "lease:'); drop table goatbeat_lease;--",
    "run:" + "9" * 40,
    "schedule:١٢",  # Arabic-Indic digits are digits to str.isdigit, not ids
    "schedule:1\n",
    "lease:" + "a" * 65,
    "",
    "x" * 7999,
    "%(name)s %s $1",
]


def notify_raw(dsn: str, payload: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_notify('goatbeat', %s)", (payload,))


@pytest.mark.postgres
@pytest.mark.parametrize("payload", HOSTILE_PAYLOADS, ids=lambda p: repr(p[:30]))
def test_a_forged_notification_is_a_plain_wake_up_and_never_used(pg_dsn: str, payload: str) -> None:
    store = PostgresStore(pg_dsn)
    try:
        store.migrate()
        store.create(admin("bystander"))
        while store.wait(0.1):  # drain the create's own notification
            pass
        store.last_payload = "stale"

        notify_raw(pg_dsn, payload)

        assert store.wait(10) is True
        assert store.last_payload is None
        # The store still works and nothing was touched.
        assert [s.name for s in store.list_schedules()] == ["bystander"]
        tables_intact(store, pg_dsn)
        notify_raw(pg_dsn, "schedule:42")
        assert store.wait(10) is True
        assert store.last_payload == "schedule:42"
    finally:
        store.close()


class CountingSubmitter(AcceptingSubmitter):
    name: ClassVar[str] = "counting"

    def __init__(self) -> None:
        self.keys: list[str] = []

    def submit(self, occurrence: Occurrence) -> str | None:
        self.keys.append(occurrence.idempotency_key)
        return occurrence.idempotency_key


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.events: list[tuple[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append((record.getMessage(), getattr(record, "goatbeat", None)))


@pytest.mark.postgres
@pytest.mark.slow
def test_a_flood_of_forged_notifications_does_not_disturb_a_running_scheduler(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.migrate()
    store.publish([Schedule(name="tick", task="t.f", trigger=IntervalTrigger("1s"))])
    submitter = CountingSubmitter()
    scheduler = Scheduler(
        store,
        submitter,
        settings=Settings(
            lease_ttl=timedelta(seconds=3),
            lease_renew_interval=timedelta(seconds=1),
            max_sleep=timedelta(seconds=1),
            scheduler_id="flooded",
        ),
    )
    errors = Errors()
    log = logging.getLogger("goatbeat")
    log.addHandler(errors)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(300):
                payload = HOSTILE_PAYLOADS[i % len(HOSTILE_PAYLOADS)]
                conn.execute("SELECT pg_notify('goatbeat', %s)", (payload,))
        before = len(submitter.keys)
        deadline = time.monotonic() + 30
        while len(submitter.keys) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
        log.removeHandler(errors)
        store.close()
    assert len(submitter.keys) >= before + 3, "the scheduler stopped claiming"
    assert len(submitter.keys) == len(set(submitter.keys))
    assert all(k.startswith("tick:") for k in submitter.keys)
    assert [e for e in errors.events if e[0] == "scheduler.error"] == []
