"""What PostgreSQL's publication compares: each declaration cut into its own columns and the
columns it shares with others (validated once per distinct combination). The parts always
rebuild the definition the store would write, and a declaration damaged after its
construction is refused as the store's full validation refuses it, even when it shares a
combination already checked."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import goatbeat.stores
from goatbeat.core.errors import InvalidSchedule
from goatbeat.core.model import OverlapPolicy, Routing, Schedule
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.stores.definitions import (
    SHARED_COLUMNS,
    Comparison,
    SetFingerprint,
    validate_schedule,
)

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)
HOURLY = IntervalTrigger("1h")


def declaration(name: str, **kw: Any) -> Schedule:
    kw.setdefault("task", "tasks.run")
    kw.setdefault("trigger", HOURLY)
    return Schedule(name=name, **kw)


DECLARATIONS = [
    declaration("plain"),
    declaration("args", args=[1, 2.5, "x", None, True, [1, {"k": "v"}]], kwargs={"a": {"b": []}}),
    declaration("routed", routing=Routing(queue="q", priority=3, expires=30, headers={"h": 1})),
    declaration("window", start_at=T0 - timedelta(days=1), end_at=T0 + timedelta(days=30)),
    declaration(
        "control",
        jitter=timedelta(seconds=5),
        overlap=OverlapPolicy.SKIP,
        max_runtime=timedelta(minutes=10),
        pause_on_failure=3,
    ),
    declaration("cron", trigger=CronTrigger("*/5 * * * *", timezone="Europe/Paris")),
    declaration("deep", args=[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]),  # past the quick check
    declaration("plain-2", args=[2]),
    declaration("described", description="café"),
]


def rebuilt(comparison: Comparison, part: list[Any]) -> dict[str, Any]:
    name, args, kwargs, headers, k = part
    assert isinstance(name, str)
    return {
        **dict(zip(SHARED_COLUMNS, comparison.shared[k], strict=True)),
        "args": args,
        "kwargs": kwargs,
        "headers": headers,
    }


def test_the_parts_rebuild_the_definition_the_store_validates() -> None:
    comparison = Comparison()
    for schedule in DECLARATIONS:
        part, definition = comparison.add(schedule)
        expected = validate_schedule(schedule)
        assert part[0] == schedule.name
        assert rebuilt(comparison, part) == expected
        assert definition is None or definition == expected


def test_declarations_differing_only_in_their_own_columns_share_one_entry() -> None:
    comparison = Comparison()
    parts = [comparison.add(declaration(f"n{i}", args=[i]))[0] for i in range(50)]
    other = comparison.add(declaration("other", args=[1], description="x"))[0]
    assert {p[4] for p in parts} == {0} and other[4] == 1
    assert len(comparison.shared) == 2


def bypass(schedule: Schedule, **values: Any) -> Schedule:
    for name, value in values.items():
        object.__setattr__(schedule, name, value)
    return schedule


def damaged() -> list[tuple[str, Any]]:
    mutated = declaration("mutated", kwargs={"a": 1})
    mutated.kwargs["later"] = object()  # type: ignore[index]  # a dict is mutable after all
    nested = declaration("nested", args=[[1]])
    nested.args[0].append(float("nan"))
    headers = declaration("headers", routing=Routing(headers={"h": 1}))
    headers.routing.headers["bad"] = {1, 2}  # type: ignore[index]
    return [
        ("kwargs", mutated),
        ("args", nested),
        ("headers", headers),
        ("name", bypass(declaration("x"), name="nul\x00name")),
        ("name", bypass(declaration("y"), name="   ")),
        ("task", bypass(declaration("z"), task="tasks.nul\x00")),
        ("description", bypass(declaration("w"), description="nul\x00")),
        ("kwargs", bypass(declaration("v"), kwargs={1: "a"})),
        ("args", bypass(declaration("u"), args=("a\x00",))),
        ("schedule", {"name": "not a schedule"}),
        ("routing", bypass(declaration("t"), routing={"queue": "q"})),
    ]


@pytest.mark.parametrize(("field", "schedule"), damaged(), ids=lambda v: str(v)[:40])
def test_a_damaged_declaration_is_refused_even_after_a_valid_one_like_it(
    field: str, schedule: Schedule
) -> None:
    comparison = Comparison()
    comparison.add(declaration("first"))  # the same combination, checked in full
    with pytest.raises(InvalidSchedule) as full:
        validate_schedule(schedule)
    with pytest.raises(InvalidSchedule) as compared:
        comparison.add(schedule)
    assert full.value.field == compared.value.field == field
    assert str(compared.value) == str(full.value)


def test_the_query_compares_the_shared_columns_in_their_order() -> None:
    sql = (Path(goatbeat.stores.__file__).parent / "sql/postgres/queries.sql").read_text()
    query = sql.split("-- name: publish_unchanged")[1].split("-- name:")[0]
    listed = re.search(r"jsonb_build_array\((.*?)\)", query, re.S)
    assert listed is not None
    columns = tuple(c.strip().removeprefix("s.") for c in listed.group(1).split(","))
    assert columns == SHARED_COLUMNS


def _fingerprint_by_parts(schedules: list[Schedule]) -> str:
    """What a publication compared in the database records: each declaration as a part."""
    comparison = Comparison()
    setprint = SetFingerprint()
    setprint.comparison = comparison
    for schedule in schedules:
        part, _ = comparison.add(schedule)
        setprint.parts.append((part[0], part[1], part[2], part[3], part[4]))
    return setprint.digest()


def _fingerprint_by_definitions(schedules: list[Schedule]) -> str:
    """What a publication compared in Python (or a first one) records: full definitions."""
    setprint = SetFingerprint()
    for schedule in schedules:
        setprint.add_definition(schedule.name, validate_schedule(schedule))
    return setprint.digest()


def test_the_code_set_has_one_fingerprint_whichever_path_validated_it() -> None:
    # Shuffled and through the other path: the same code gives the same fingerprint, so a
    # restart on unchanged code is never taken for another code set.
    assert _fingerprint_by_parts(DECLARATIONS) == _fingerprint_by_definitions(DECLARATIONS[::-1])
    # A value that differs, own or shared, gives another.
    changed = [*DECLARATIONS[:-1], declaration(DECLARATIONS[-1].name, args=["other"])]
    assert _fingerprint_by_parts(changed) != _fingerprint_by_parts(DECLARATIONS)
    routed = [*DECLARATIONS[:-1], declaration(DECLARATIONS[-1].name, routing=Routing(queue="z"))]
    assert _fingerprint_by_parts(routed) != _fingerprint_by_parts(DECLARATIONS)
    assert _fingerprint_by_parts(routed) == _fingerprint_by_definitions(routed)
