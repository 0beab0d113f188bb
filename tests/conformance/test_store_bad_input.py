"""Conformance: bad input is refused with the field named, and nothing is written (every store).

Schedule's constructor validates most fields; these cases get past it (a foreign trigger
object, a frozen dataclass poked from outside, values wider than the columns), so the store's
own validation is what is tested.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.errors import InvalidCron, InvalidTimezone, InvalidValue
from goatbeat.core.model import Routing, Schedule, Source
from goatbeat.core.store import ScheduleStore
from tests.conformance.helpers import HOUR, T0, claim_all, hourly, keys, lease, snapshot


class SpecTrigger:
    """A trigger object that is not one of ours: it claims whatever spec it is given."""

    kind: ClassVar[str] = "custom"

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    def next_after(self, instant: datetime) -> datetime | None:
        return instant + timedelta(hours=1)

    def to_spec(self) -> dict[str, Any]:
        return dict(self.spec)

    def describe(self) -> str:
        return "custom"


def _poked(name: str, **fields: Any) -> Schedule:
    schedule = hourly(name)
    for key, value in fields.items():
        object.__setattr__(schedule, key, value)  # what a careless caller can do to a dataclass
    return schedule


BAD: dict[str, tuple[Callable[[str], Schedule], str, type[InvalidValue]]] = {
    "unknown trigger kind": (
        lambda n: hourly(n, trigger=SpecTrigger({"kind": "lunar", "phase": "full"})),
        "trigger.kind",
        InvalidValue,
    ),
    "unknown zone in the trigger spec": (
        lambda n: hourly(
            n,
            trigger=SpecTrigger(
                {"kind": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus_Mons"}
            ),
        ),
        "timezone",
        InvalidTimezone,
    ),
    "bad cron in the trigger spec": (
        lambda n: hourly(
            n, trigger=SpecTrigger({"kind": "cron", "expression": "0 9 * * 8", "timezone": "UTC"})
        ),
        "cron",
        InvalidCron,
    ),
    "args that are not JSON": (lambda n: _poked(n, args=(object(),)), "args", InvalidValue),
    "kwargs with NaN": (lambda n: _poked(n, kwargs={"x": float("nan")}), "kwargs", InvalidValue),
    "NUL in the task name": (lambda n: hourly(n, task="tasks.a\x00b"), "task", InvalidValue),
    "NUL inside args": (lambda n: hourly(n, args=["a\x00"]), "args", InvalidValue),
    "task wider than its column": (
        lambda n: hourly(n, task="t." + "x" * 300),
        "task",
        InvalidValue,
    ),
    "queue wider than its column": (
        lambda n: hourly(n, routing=Routing(queue="q" * 201)),
        "queue",
        InvalidValue,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_schedule_is_refused_by_publish_and_nothing_is_written(
    store: ScheduleStore, case: str
) -> None:
    make, field, error = BAD[case]
    store.publish([hourly("existing")])
    before = snapshot(store)

    with pytest.raises(error) as excinfo:
        store.publish([hourly("existing", task="tasks.changed"), hourly("good"), make("bad")])

    assert excinfo.value.field == field
    assert snapshot(store) == before


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_schedule_is_refused_by_create_and_update(store: ScheduleStore, case: str) -> None:
    make, field, error = BAD[case]
    store.create(hourly("existing", source=Source.ADMIN))
    before = snapshot(store)

    with pytest.raises(error) as created:
        store.create(make("bad"))
    with pytest.raises(error) as updated:
        store.update(make("existing"))

    assert created.value.field == field and updated.value.field == field
    assert snapshot(store) == before


def test_bad_limits_are_refused(store: ScheduleStore) -> None:
    grant = lease(store)
    for bad in (0, -1):
        with pytest.raises(InvalidValue):
            store.claim_due(grant, scheduler_id="s", limit=bad)
        with pytest.raises(InvalidValue):
            store.pending(limit=bad)
    for bad_ids in ("12", [1, "2"], [True], None):
        with pytest.raises(InvalidValue) as info:
            store.pending(limit=10, exclude=bad_ids)
        assert info.value.field == "exclude"
        with pytest.raises(InvalidValue):
            store.executions(limit=bad)


NASTY_NAMES = [
    "x'); drop table goatbeat_schedule;--",
    'quote " and \\ backslash',
    "100% %(name)s %s :name ? $1",
    "naïve ☃ 名前",
]


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_sql_metacharacters_in_names_round_trip_harmlessly(store: ScheduleStore, name: str) -> None:
    store.publish([hourly(name, args=[name], kwargs={name: name}), hourly("bystander")])
    assert store.get(name).args == (name,) and store.get(name).kwargs == {name: name}
    grant = lease(store, holder=name)

    claimed = claim_all(store, grant, T0 + HOUR)
    manual = store.request_run(name, now=T0)

    assert sorted(keys(claimed)) == sorted(
        [f"{name}:2031-03-01T13:00:00Z", "bystander:2031-03-01T13:00:00Z"]
    )
    assert manual.idempotency_key == f"{name}:manual:2031-03-01T12:00:00Z"
    assert {e.schedule_name for e in store.executions(name=name)} == {name}
    assert store.set_enabled(name, False).enabled is False
    assert store.prune(["bystander"]) == []
    store.delete(name)
    assert [s.name for s in store.list_schedules()] == ["bystander"]
    assert len(store.executions()) == 3
