"""Conformance: a publication finds unchanged declarations in bulk (PostgreSQL compares them
in the database), and still sees every change made since, whoever made it (every store)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from goatbeat.core.model import OverlapPolicy, Routing
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from tests.conformance.conftest import Backend
from tests.conformance.helpers import T0, hourly, write_raw


def declarations() -> list[Any]:
    return [
        hourly("plain"),
        hourly("routed", routing=Routing(queue="q", priority=3, expires=30.5, headers={"h": 1})),
        hourly("args", args=[1, 2.5, "x", None, True, [1, {"k": "v"}]], kwargs={"a": {"b": [1]}}),
        hourly("window", start_at=T0 - timedelta(days=1), end_at=T0 + timedelta(days=30)),
        hourly(
            "control",
            jitter=timedelta(seconds=5),
            overlap=OverlapPolicy.SKIP,
            max_runtime=timedelta(minutes=10),
            pause_on_failure=3,
        ),
        hourly("cron", trigger=CronTrigger("*/5 * * * *", timezone="Europe/Paris")),
        hourly("unicode", description="café ☕ \\ \" '", args=["é"]),
        # What COPY's text format escapes, and its NULL marker, inside JSON values.
        hourly(
            "escapes", args=["tab\there", "line\nbreak", "back\\slash", "\\N"], kwargs={"k": "\\."}
        ),
    ]


def test_new_declarations_read_back_exactly_as_declared(store: ScheduleStore) -> None:
    store.publish(declarations())
    for declared in declarations():
        stored = store.get(declared.name)
        assert (stored.args, stored.kwargs, stored.routing, stored.description) == (
            declared.args,
            declared.kwargs,
            declared.routing,
            declared.description,
        )
        assert stored.trigger == declared.trigger


def test_republishing_many_unchanged_declarations_writes_no_row(store: ScheduleStore) -> None:
    store.publish(declarations())
    before = {s.name: (s.version, s.updated_at) for s in store.list_schedules()}

    result = store.publish(declarations())

    assert sorted(result.unchanged) == sorted(before)
    assert result.created == [] and result.updated == [] and result.changes == {}
    assert {s.name: (s.version, s.updated_at) for s in store.list_schedules()} == before


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("task", "tasks.edited", "task"),
        ("args", [1, 2.5, "x", None, True, [1, {"k": "w"}]], "args"),
        ("kwargs", {"a": {"b": [2]}}, "kwargs"),
        ("trigger", {"kind": "interval", "every": 7200.0, "anchor": None}, "trigger"),
        ("expires", 31.0, "expires"),
        ("misfire_grace", 61.0, "misfire_grace"),
        ("description", "edited", "description"),
        ("jitter", 6.0, "jitter"),
        # The columns declarations share (PostgreSQL compares them as one array per row).
        ("timezone", "UTC", "timezone"),
        ("queue", "other", "queue"),
        ("exchange", "ex", "exchange"),
        ("routing_key", "rk", "routing_key"),
        ("priority", 4, "priority"),
        ("headers", {"h": 2}, "headers"),
        ("misfire_policy", "skip", "misfire_policy"),
        ("catch_up_limit", 99, "catch_up_limit"),
        ("one_off", True, "one_off"),
        ("overlap", "buffer_one", "overlap"),
        ("max_runtime", 601.0, "max_runtime"),
        ("pause_on_failure", 4, "pause_on_failure"),
    ],
)
def test_a_row_changed_behind_the_stores_back_is_rewritten_and_reported(
    backend: Backend, store: ScheduleStore, column: str, value: Any, field: str
) -> None:
    store.publish(declarations())
    target = {
        "expires": "routed",
        "queue": "routed",
        "exchange": "routed",
        "routing_key": "routed",
        "priority": "routed",
        "headers": "routed",
        "args": "args",
        "kwargs": "args",
        "jitter": "control",
        "overlap": "control",
        "max_runtime": "control",
        "pause_on_failure": "control",
        "timezone": "cron",
    }.get(column, "plain")
    write_raw(backend, store, target, **{column: value})

    result = store.publish(declarations())

    assert result.updated == [target]
    assert [c.field for c in result.changes[target]] == [field]
    assert sorted(result.unchanged) == sorted(s.name for s in declarations() if s.name != target)
    again = store.publish(declarations())  # rewritten: unchanged from now on
    assert again.updated == [] and len(again.unchanged) == len(declarations())


def test_an_edit_through_the_store_is_reverted_by_the_next_publication(
    store: ScheduleStore,
) -> None:
    store.publish(declarations())
    stored = store.get("plain")
    store.update(hourly("plain", trigger=IntervalTrigger("2h")), expected_version=stored.version)

    result = store.publish(declarations())

    assert result.updated == ["plain"]
    assert [c.field for c in result.changes["plain"]] == ["trigger"]
    assert store.get("plain").trigger == IntervalTrigger("1h")


def test_postgres_confirms_unchanged_declarations_in_the_database_without_reading_rows(
    backend: Backend, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend.kind != "postgres":
        pytest.skip("the in-database comparison is PostgreSQL's")
    store.publish(declarations())
    read: list[str] = []
    dialect = store.dialect  # type: ignore[attr-defined]
    fetch = dialect.fetch

    def spy(conn: Any, name: str, params: Any = None) -> Any:
        read.append(name)
        return fetch(conn, name, params)

    monkeypatch.setattr(dialect, "fetch", spy)

    result = store.publish(declarations())

    assert len(result.unchanged) == len(declarations())
    assert "source_has_rows" in read  # the spy sees the store's statements
    assert "schedules_by_names" not in read  # no full row was read


def test_many_declarations_sharing_their_task_and_trigger_are_each_compared_with_their_row(
    backend: Backend, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks, so the comparison spans several statements (PostgreSQL).
    monkeypatch.setattr("goatbeat.stores.store._COMPARE_CHUNK", 4)
    shared = {"task": "tasks.same", "trigger": IntervalTrigger("1h")}
    many = [
        hourly(f"n{i}", args=[i], description="odd" if i % 2 else "", **shared) for i in range(15)
    ]
    store.publish(many)
    write_raw(backend, store, "n7", task="tasks.other")
    write_raw(backend, store, "n10", description="odd")  # n9's combination, n10's row
    write_raw(backend, store, "n12", args=[13])

    result = store.publish(many)

    assert sorted(result.updated) == ["n10", "n12", "n7"]
    assert {n: [c.field for c in cs] for n, cs in result.changes.items()} == {
        "n7": ["task"],
        "n10": ["description"],
        "n12": ["args"],
    }
    assert len(result.unchanged) == 12
    assert store.publish(many).updated == []
