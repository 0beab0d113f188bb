"""Rows -> Schedules on the claim path: the trusted builder gives the same Schedule as the
validating one, and a row damaged behind goatbeat's back fails loudly, naming the schedule and
the column (the claim quarantines it; reading gives a DamagedSchedule)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.errors import DamagedRow
from goatbeat.core.model import DamagedSchedule, MisfirePolicy, Routing, Schedule, Source
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.stores import SQLiteStore
from goatbeat.stores.definitions import schedule_to_row
from goatbeat.stores.rows import (
    ScheduleCache,
    read_schedule,
    schedule_from_row,
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
    trusted = trusted_schedule_from_row(row, json_text=json_as_text)
    assert trusted == schedule_from_row(row, json_text=json_as_text)
    assert trusted.definition() == schedule.definition()
    assert trusted.routing == schedule.routing
    assert (trusted.id, trusted.version, trusted.next_run_at) == (7, 3, T0)


DAMAGE: list[tuple[str, Any]] = [
    ("args", {"not": "a list"}),
    ("args", "[1, 2"),
    ("kwargs", [1, 2]),
    ("headers", ["h"]),
    ("misfire_policy", "sometimes"),
    ("misfire_grace", "soon"),
    ("misfire_grace", -1.0),
    ("misfire_grace", float("nan")),
    ("expires", "never"),
    ("expires", float("inf")),
    ("expires", -3.0),
    ("source", "elsewhere"),
    ("catch_up_limit", 0),
    ("catch_up_limit", 100_001),
    ("priority", 256),
    ("priority", "high"),
    ("queue", ""),
    ("task", "two words"),
    ("timezone", "Mars/Olympus"),
    ("timezone", "Europe/Paris"),  # a real zone, but not the trigger's
    ("trigger", {"kind": "nope"}),
    ("trigger", {"kind": "cron", "expression": "61 * * * *", "timezone": "UTC"}),
    ("trigger", {"kind": "cron", "expression": "* * * * *", "timezone": "Mars/Olympus"}),
    ("trigger", "[1"),
    ("end_at", T0 - timedelta(days=30)),
    ("next_run_at", "not an instant"),
    ("version", "x"),
]


@pytest.mark.parametrize(("column", "value"), DAMAGE)
@pytest.mark.parametrize("builder", [trusted_schedule_from_row, schedule_from_row])
def test_a_damaged_row_names_the_schedule_and_the_column(
    column: str, value: Any, builder: Any
) -> None:
    row = stored_row(SCHEDULES[0], start_at=T0 - timedelta(days=1), **{column: value})
    with pytest.raises(DamagedRow) as caught:
        builder(row)
    assert (caught.value.field, caught.value.column) == (column, column)
    assert caught.value.schedule == "plain"
    assert "stored schedule 'plain' has a damaged " + column + " column: " in str(caught.value)
    damaged = read_schedule(row)
    assert isinstance(damaged, DamagedSchedule)
    assert (damaged.name, damaged.column, damaged.id, damaged.version) == (
        "plain",
        column,
        7,
        0 if column == "version" else 3,
    )


@pytest.mark.parametrize(
    ("column", "text"),
    [("args", '"[1]"'), ("kwargs", '"{}"'), ("headers", '"x"'), ("trigger", '"{}"')],
)
def test_a_json_string_is_damage_whether_the_row_comes_as_text_or_decoded(
    column: str, text: str
) -> None:
    # A JSON string holding JSON text is not the array or object it spells.
    decoded = stored_row(SCHEDULES[0], **{column: json.loads(text)})
    as_text = stored_row(SCHEDULES[0])
    for name in ("trigger", "args", "kwargs", "headers"):
        as_text[name] = json.dumps(as_text[name])
    as_text[column] = text
    for row, json_text in ((decoded, False), (as_text, True)):
        with pytest.raises(DamagedRow) as caught:
            trusted_schedule_from_row(row, json_text=json_text)
        assert caught.value.column == column


def test_a_damaged_trigger_spec_keeps_the_triggers_own_reason() -> None:
    row = stored_row(
        SCHEDULES[0], trigger={"kind": "cron", "expression": "61 * * * *", "timezone": "UTC"}
    )
    with pytest.raises(DamagedRow) as caught:
        trusted_schedule_from_row(row)
    assert caught.value.column == "trigger"
    assert "61" in caught.value.detail and "out of range" in caught.value.detail


def test_the_full_validation_also_names_the_column_of_what_the_claim_path_trusts() -> None:
    # Deep JSON is re-checked by schedule_from_row (list, get, admin) but not on the claim path.
    row = stored_row(SCHEDULES[0], args=[float("nan")])
    assert trusted_schedule_from_row(row).args[0] != 0
    with pytest.raises(DamagedRow) as caught:
        schedule_from_row(row)
    assert caught.value.column == "args"


def test_claiming_a_hand_damaged_sqlite_row_quarantines_it_and_claims_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "goatbeat.db"
    store = SQLiteStore(path)
    store.migrate()
    store.publish(
        [
            Schedule(
                name="edited-by-hand", task="app.tasks.ping", trigger=IntervalTrigger(every=1)
            ),
            Schedule(name="good", task="app.tasks.ping", trigger=IntervalTrigger(every=1)),
        ]
    )
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE goatbeat_schedule SET args = '{\"a\": 1}' WHERE name = 'edited-by-hand'"
        )
    conn.close()
    grant = store.acquire_lease("scheduler", "s1", timedelta(minutes=1))
    assert grant is not None
    result = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + timedelta(days=365))
    assert {o.schedule_name for o in result.occurrences} == {"good"}
    [damaged] = result.quarantined
    assert (damaged.name, damaged.column, damaged.value) == ("edited-by-hand", "args", '{"a": 1}')
    store.close()


def test_a_state_column_damaged_after_the_definition_was_cached_is_quarantined_too(
    tmp_path: Path,
) -> None:
    # The claim path caches definitions by (id, version); a hand edit does not bump the version.
    path = tmp_path / "goatbeat.db"
    store = SQLiteStore(path)
    store.migrate()
    store.publish(
        [
            Schedule(
                name="edited-by-hand", task="app.tasks.ping", trigger=IntervalTrigger(every=60)
            ),
            Schedule(name="good", task="app.tasks.ping", trigger=IntervalTrigger(every=60)),
        ]
    )
    grant = store.acquire_lease("scheduler", "s1", timedelta(minutes=1))
    assert grant is not None
    first = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + timedelta(days=365))
    assert {o.schedule_name for o in first.occurrences} == {"edited-by-hand", "good"}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE goatbeat_schedule SET last_run_at = 'yesterday' WHERE name = 'edited-by-hand'"
        )
    conn.close()
    later = store.claim_due(grant, scheduler_id="s1", limit=10, now=T0 + timedelta(days=366))
    assert {o.schedule_name for o in later.occurrences} == {"good"}
    [damaged] = later.quarantined
    assert (damaged.name, damaged.column, damaged.value) == (
        "edited-by-hand",
        "last_run_at",
        "yesterday",
    )
    store.close()


def text_row(schedule: Schedule, **changes: Any) -> dict[str, Any]:
    """A row as the PostgreSQL claim reads it: the JSON columns as text."""
    row = stored_row(schedule)
    for column in ("trigger", "args", "kwargs", "headers"):
        row[column] = json.dumps(row[column], sort_keys=True)
    row.update(changes)
    return row


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
def test_the_claim_cache_decodes_a_new_row_as_the_trusted_builder_does(
    schedule: Schedule,
) -> None:
    cache = ScheduleCache()
    first = text_row(schedule)
    # Another schedule with the same shared columns: decoded with the checks made for the first.
    second = text_row(schedule, id=8, name=schedule.name + "-2", description="other")
    for row in (first, second):
        decoded = cache.from_row(row)
        expected = trusted_schedule_from_row(row, json_text=True)
        assert decoded == expected
        assert [getattr(decoded, f) for f in Schedule.__slots__] == [
            getattr(expected, f) for f in Schedule.__slots__
        ]
    a = cache.from_row(text_row(schedule, id=9, version=1))
    b = cache.from_row(text_row(schedule, id=10, version=1))
    # Nothing mutable is shared between two schedules decoded from the same shared columns.
    assert a.kwargs is not b.kwargs and a.routing.headers is not b.routing.headers
    assert a.kwargs == b.kwargs and a.routing.headers == b.routing.headers


# Not a damaged version: the cache files rows by (id, version), integer columns it reads first.
@pytest.mark.parametrize(("column", "value"), [d for d in DAMAGE if d[0] != "version"])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "after-a-good-row"])
def test_the_claim_cache_refuses_a_damaged_row_as_the_trusted_builder_does(
    column: str, value: Any, warm: bool
) -> None:
    cache = ScheduleCache()
    if warm:
        cache.from_row(text_row(SCHEDULES[0], id=99, start_at=T0 - timedelta(days=1)))
    if column == "trigger" and not isinstance(value, str):
        value = json.dumps(value)
    row = text_row(SCHEDULES[0], start_at=T0 - timedelta(days=1), **{column: value})
    with pytest.raises(DamagedRow) as expected:
        trusted_schedule_from_row(row, json_text=True)
    with pytest.raises(DamagedRow) as caught:
        cache.from_row(row)
    assert (caught.value.column, caught.value.detail, caught.value.schedule) == (
        expected.value.column,
        expected.value.detail,
        expected.value.schedule,
    )


@pytest.mark.parametrize(
    ("column", "good", "bad"),
    [("priority", 1, True), ("catch_up_limit", 7, 7.0), ("pause_on_failure", 1, True)],
)
def test_a_value_equal_to_a_checked_one_but_of_another_type_is_checked_again(
    column: str, good: Any, bad: Any
) -> None:
    # SQLite columns take any type; 1 == 1.0 == True, but only an int is a priority.
    cache = ScheduleCache()
    cache.from_row(text_row(SCHEDULES[1], **{column: good}))
    with pytest.raises(DamagedRow) as caught:
        cache.from_row(text_row(SCHEDULES[1], id=8, **{column: bad}))
    assert caught.value.column == column


def test_a_claimed_row_is_found_at_its_new_version_after_the_batch_is_advanced() -> None:
    cache = ScheduleCache(maxsize=2)
    rows = [text_row(SCHEDULES[1], id=i, name=f"s{i}", version=3) for i in (1, 2, 3)]
    built = [cache.from_row(row) for row in rows]
    cache.advanced_all(built)
    # Bounded: the least recently used entry went when the third came.
    assert sorted(cache._entries) == [(2, 4), (3, 4)]
    again = cache.from_row({**rows[2], "version": 4})
    assert again.kwargs is built[2].kwargs  # the definition built once, not decoded again
    assert again.version == 4 and again == trusted_schedule_from_row(
        {**rows[2], "version": 4}, json_text=True
    )


# Each schedule field's rule is written once (FIELD_RULES): the constructor, the declaration
# path and the row decoder accept exactly the same values of it, whatever door they come in by
# (the decoder takes the name as stored: it is the row's key).
ONE_RULE = [
    ("catch_up_limit", "catch_up_limit", lambda v: v, [0, 1, 7, 100_000, 100_001, -3]),
    ("pause_on_failure", "pause_on_failure", lambda v: v, [None, 0, 1, 1000, 1001]),
    ("task", "task", lambda v: v, ["a.b", "a", " a", "a b", "a\u00a0b", "", "a\tb"]),
    ("misfire_grace", "misfire_grace", lambda v: timedelta(seconds=v), [0, 0.5, 90, -1]),
    ("jitter", "jitter", lambda v: timedelta(seconds=v), [0, 1, 86_400, 86_401, -1]),
    ("max_runtime", "max_runtime", lambda v: timedelta(seconds=v), [0, 1, 3600, -5]),
    ("description", "description", lambda v: v, ["", "weekday report"]),
]


@pytest.mark.parametrize(("field", "column", "as_field", "values"), ONE_RULE, ids=lambda v: v)
def test_every_door_holds_a_field_to_its_one_rule(
    field: str, column: str, as_field: Any, values: list[Any]
) -> None:
    from goatbeat.core.errors import InvalidValue
    from goatbeat.core.model import FIELD_RULES

    rule = FIELD_RULES[field]
    base = SCHEDULES[0]
    extra: dict[str, Any] = {"overlap": "skip"} if field == "max_runtime" else {}
    for value in values:
        field_value = as_field(value)
        accepted = rule.check(field_value)
        try:
            built = Schedule(
                **{
                    "name": base.name,
                    "task": base.task,
                    "trigger": base.trigger,
                    field: field_value,
                },
                **extra,
            )
        except InvalidValue as exc:
            assert not accepted, (value, exc)
            assert exc.field == field
        else:
            assert accepted, value
            assert getattr(built, field) == field_value
        row = stored_row(base, **{column: value}, **({"overlap": "skip"} if extra else {}))
        try:
            decoded = trusted_schedule_from_row(row)
        except DamagedRow as exc:
            assert not accepted, (value, exc)
            assert exc.column == column
        else:
            assert accepted, value
            assert getattr(decoded, field) == field_value


# A row damaged in two columns names the one read first, through every door: the order the
# columns are read in mixes those schedules share (checked once per combination on the claim
# path) with those of each row.
TWO_DAMAGES = [
    (("args", "[1"), ("misfire_policy", "sometimes")),
    (("kwargs", "[]"), ("headers", "[]")),
    (("task", "two words"), ("args", "{}")),
    (("next_run_at", "not an instant"), ("jitter", "soon")),
    (("catch_up_limit", 0), ("missed_count", "x")),
    (("description", 3), ("pause_on_failure", 0)),
    (("max_runtime", -1.0), ("pause_note", 3)),
]


@pytest.mark.parametrize(("first", "second"), TWO_DAMAGES, ids=lambda d: d[0])
def test_a_row_damaged_twice_names_the_column_read_first(
    first: tuple[str, Any], second: tuple[str, Any]
) -> None:
    row = text_row(SCHEDULES[0], **dict([first, second]))
    for decode in (
        lambda: trusted_schedule_from_row(row, json_text=True),
        lambda: ScheduleCache().from_row(row),
        lambda: schedule_from_row(row, json_text=True),
    ):
        with pytest.raises(DamagedRow) as caught:
            decode()
        assert (caught.value.column, caught.value.value) == first


def pending_row(**changes: Any) -> dict[str, Any]:
    """A pending-execution row joined with its schedule's payload columns."""
    row: dict[str, Any] = {
        "execution_id": 41, "schedule_id": 7, "schedule_name": "plain", "scheduled_at": T0,
        "idempotency_key": "k", "kind": "scheduled", "fencing_token": 3, "attempts": 1,
        "claimed_at": T0, "task": "app.tasks.ping", "args": [1], "kwargs": {"a": 2},
        "queue": "q", "exchange": None, "routing_key": None, "priority": 5, "expires": 30.0,
        "headers": {"h": 1}, "misfire_grace": 60.0, "jitter": None,
    }  # fmt: skip
    row.update(changes)
    return row


PENDING_DAMAGE = [
    ("task", "two words", "'two words' is not a task name"),
    ("args", {"a": 1}, "{'a': 1} is not a JSON array"),
    ("kwargs", [1], "[1] is not a JSON object"),
    ("headers", "{}", "'{}' is not a JSON object"),  # decoded: a string is not an object
    ("queue", "", "'' must be a non-empty string or NULL"),
    ("routing_key", 5, "5 must be a non-empty string or NULL"),
    ("priority", True, "True is not an integer in -100..255"),
    ("expires", -1, "-1 must be a finite number of seconds > 0"),
]


@pytest.mark.parametrize(("column", "value", "detail"), PENDING_DAMAGE)
def test_a_pending_row_with_a_damaged_payload_fails_naming_the_column(
    column: str, value: Any, detail: str
) -> None:
    from goatbeat.stores.rows import decode_pending

    good, failed = decode_pending([pending_row(execution_id=40), pending_row(**{column: value})])
    assert [o.execution_id for o in good] == [40]
    assert good[0].routing == Routing(queue="q", priority=5, expires=30.0, headers={"h": 1}) and (
        good[0].args,
        good[0].kwargs,
    ) == ((1,), {"a": 2})
    [(execution_id, error)] = failed
    assert execution_id == 41
    assert error == f"{column}: stored schedule 'plain' has a damaged {column} column: {detail}"
