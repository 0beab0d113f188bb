"""Rows -> Schedules on the claim path: the trusted builder gives the same Schedule as the
validating one, and a row damaged behind goatbeat's back still fails loudly, naming the schedule
and the column."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.errors import InvalidCron, InvalidSchedule
from goatbeat.core.model import MisfirePolicy, Routing, Schedule, Source
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.stores import SQLiteStore
from goatbeat.stores._common import (
    schedule_from_row,
    schedule_to_row,
    trusted_schedule_from_row,
)

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def stored_row(schedule: Schedule, **changes: Any) -> dict[str, Any]:
    row = schedule_to_row(
        schedule, source=schedule.source, enabled=schedule.enabled, next_run_at=T0
    )
    row.update(
        id=7,
        last_status=None,
        missed_count=2,
        version=3,
        created_at=T0 - timedelta(days=1),
        updated_at=T0 - timedelta(hours=1),
    )
    row.update(changes)
    return row


SCHEDULES = [
    Schedule(name="plain", task="app.tasks.ping", trigger=IntervalTrigger(every=60)),
    Schedule(
        name="full",
        task="app.tasks.report",
        trigger=CronTrigger("0 9 * * 1-5", timezone="Europe/Paris"),
        args=(1, [2, {"a": [3]}], "x"),
        kwargs={"nested": {"list": [1, 2]}, "flag": True},
        routing=Routing(
            queue="reports",
            exchange="ex",
            routing_key="rk",
            priority=5,
            expires=30,
            headers={"h": {"deep": [1]}},
        ),
        misfire=MisfirePolicy.RUN_ALL,
        misfire_grace=timedelta(seconds=90),
        catch_up_limit=7,
        start_at=T0 - timedelta(days=3),
        end_at=T0 + timedelta(days=3),
        one_off=True,
        description="weekday report",
        source=Source.ADMIN,
        last_run_at=T0 - timedelta(days=1),
        total_run_count=12,
    ),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize("json_as_text", [False, True], ids=["decoded", "text"])
def test_trusted_builder_gives_the_schedule_the_validating_one_gives(
    schedule: Schedule, json_as_text: bool
) -> None:
    row = stored_row(schedule)
    if json_as_text:
        for column in ("trigger", "args", "kwargs", "headers"):
            row[column] = json.dumps(row[column], sort_keys=True)
    trusted = trusted_schedule_from_row(row)
    assert trusted == schedule_from_row(row)
    assert trusted.definition() == schedule.definition()
    assert trusted.routing == schedule.routing
    assert (trusted.id, trusted.version, trusted.next_run_at) == (7, 3, T0)


@pytest.mark.parametrize(
    ("column", "value", "error"),
    [
        ("args", {"not": "a list"}, "args"),
        ("args", "[1, 2", "args"),
        ("kwargs", [1, 2], "kwargs"),
        ("headers", ["h"], "headers"),
        ("misfire_policy", "sometimes", "misfire_policy"),
        ("misfire_grace", "soon", "misfire_grace"),
        ("expires", "never", "expires"),
        ("source", "elsewhere", "misfire_policy"),  # checked together with misfire_policy
    ],
)
def test_a_damaged_row_names_the_schedule_and_the_column(
    column: str, value: Any, error: str
) -> None:
    row = stored_row(SCHEDULES[0], **{column: value})
    with pytest.raises(InvalidSchedule) as caught:
        trusted_schedule_from_row(row)
    assert caught.value.field == error
    assert "'plain'" in str(caught.value)


def test_a_damaged_trigger_spec_raises_the_triggers_own_error() -> None:
    row = stored_row(
        SCHEDULES[0], trigger={"kind": "cron", "expression": "61 * * * *", "timezone": "UTC"}
    )
    with pytest.raises(InvalidCron):
        trusted_schedule_from_row(row)


def test_claiming_a_hand_damaged_sqlite_row_fails_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "goatbeat.db"
    store = SQLiteStore(path)
    store.migrate()
    store.publish(
        [Schedule(name="edited-by-hand", task="app.tasks.ping", trigger=IntervalTrigger(every=1))]
    )
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE goatbeat_schedule SET args = '{\"a\": 1}'")
    conn.close()
    grant = store.acquire_lease("scheduler", "s1", timedelta(minutes=1))
    assert grant is not None
    with pytest.raises(InvalidSchedule, match="edited-by-hand") as caught:
        store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + timedelta(days=365))
    assert caught.value.field == "args"
    store.close()
