"""IntervalTrigger and OnceTrigger, and the spec round trip every trigger kind relies on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goatbeat.core.errors import InvalidSchedule, InvalidValue
from goatbeat.core.triggers import (
    EPOCH,
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
    trigger_from_spec,
)

PARIS = ZoneInfo("Europe/Paris")
T0 = datetime(2026, 3, 1, 10, 2, 30, tzinfo=UTC)


# --- IntervalTrigger: the grid -----------------------------------------------------------------


def test_interval_without_anchor_is_aligned_on_the_unix_epoch() -> None:
    five = IntervalTrigger(every="5m")
    assert five.next_after(T0) == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    assert five.next_after(EPOCH - timedelta(days=1)) == EPOCH


def test_interval_next_after_is_strictly_after_an_instant_on_the_grid() -> None:
    five = IntervalTrigger(every=timedelta(minutes=5))
    on_grid = datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    assert five.next_after(on_grid) == on_grid + timedelta(minutes=5)
    assert five.next_after(on_grid - timedelta(microseconds=1)) == on_grid


def test_interval_grid_follows_the_anchor() -> None:
    anchor = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    trigger = IntervalTrigger(every=timedelta(minutes=10), anchor=anchor)
    assert trigger.next_after(T0) == datetime(2026, 3, 1, 10, 10, 7, tzinfo=UTC)
    # Before the anchor, the anchor itself is the first instant.
    assert trigger.next_after(anchor - timedelta(days=30)) == anchor
    assert trigger.next_after(anchor) == anchor + timedelta(minutes=10)


def test_interval_result_is_utc_whatever_the_input_zone() -> None:
    trigger = IntervalTrigger(every=timedelta(hours=1))
    result = trigger.next_after(T0.astimezone(PARIS))
    assert result is not None
    assert result.tzinfo is UTC
    assert result == datetime(2026, 3, 1, 11, tzinfo=UTC)


@given(
    every_ms=st.integers(1, 10**9),
    anchor_s=st.integers(-(10**9), 10**9),
    offset_us=st.integers(-(10**15), 10**15),
)
def test_interval_instants_lie_on_the_anchor_grid_and_are_the_first_after(
    every_ms: int, anchor_s: int, offset_us: int
) -> None:
    every = timedelta(milliseconds=every_ms)
    anchor = EPOCH + timedelta(seconds=anchor_s)
    trigger = IntervalTrigger(every=every, anchor=anchor, allow_subsecond=True)
    instant = anchor + timedelta(microseconds=offset_us)
    nxt = trigger.next_after(instant)
    assert nxt is not None and nxt > instant
    if nxt != anchor:
        assert (nxt - anchor) % every == timedelta(0)
        assert nxt - every <= instant  # no grid point was skipped


# --- IntervalTrigger: elapsed time, not wall time ----------------------------------------------


def test_interval_steps_exactly_every_across_spring_forward() -> None:
    anchor = datetime(2026, 3, 29, 0, 30, tzinfo=PARIS)  # 30 min before the 02:00 -> 03:00 jump
    trigger = IntervalTrigger(every=timedelta(hours=1), anchor=anchor)
    instants = [anchor]
    for _ in range(4):
        nxt = trigger.next_after(instants[-1])
        assert nxt is not None
        instants.append(nxt)
    gaps = {b - a for a, b in zip(instants, instants[1:], strict=False)}
    assert gaps == {timedelta(hours=1)}
    wall = [i.astimezone(PARIS).strftime("%H:%M") for i in instants]
    assert wall == ["00:30", "01:30", "03:30", "04:30", "05:30"]  # 02:30 does not exist


def test_daily_interval_keeps_24_hours_of_elapsed_time_across_fall_back() -> None:
    anchor = datetime(2026, 10, 24, 9, 0, tzinfo=PARIS)  # CEST, the day before fall-back
    trigger = IntervalTrigger(every="1d", anchor=anchor)
    nxt = trigger.next_after(anchor)
    assert nxt is not None
    assert nxt - anchor == timedelta(hours=24)
    assert nxt.astimezone(PARIS).hour == 8  # wall clock moved; elapsed time did not


# --- IntervalTrigger: accepted and rejected values ---------------------------------------------


@pytest.mark.parametrize(
    "every",
    ["5m", 300, 300.0, timedelta(minutes=5), "300", "5m0s", " 5 M ", "300000ms"],
)
def test_interval_accepts_every_spelling_of_a_duration(every: object) -> None:
    assert IntervalTrigger(every=every).every == timedelta(minutes=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "every",
    [0, -1, "0s", "abc", "", True, None, [5], float("nan"), float("inf"), 1e20, 10**400, 0.0001],
    ids=lambda v: repr(v)[:20],
)
def test_interval_rejects_bad_every_naming_the_field_and_value(every: object) -> None:
    with pytest.raises(InvalidValue) as info:
        IntervalTrigger(every=every)  # type: ignore[arg-type]
    assert info.value.field == "every"
    assert str(info.value).startswith("every: ")
    # The value is shown (long ones shortened), so the message is enough to find the typo.
    assert repr(every)[:12] in str(info.value)


def test_interval_rejects_naive_anchor_and_naive_instant() -> None:
    with pytest.raises(InvalidValue, match="anchor: .*naive"):
        IntervalTrigger(every="5m", anchor=datetime(2026, 1, 1))
    with pytest.raises(InvalidValue, match="instant: .*naive"):
        IntervalTrigger(every="5m").next_after(datetime(2026, 1, 1))


def test_interval_near_the_end_of_time_never_fires_again() -> None:
    trigger = IntervalTrigger(every=timedelta(days=7))
    assert trigger.next_after(datetime(9999, 12, 30, tzinfo=UTC)) is None


def test_interval_triggers_are_values() -> None:
    a = IntervalTrigger(every="5m")
    b = IntervalTrigger(every=timedelta(seconds=300))
    assert a == b and hash(a) == hash(b)
    assert a != IntervalTrigger(every="5m", anchor=EPOCH + timedelta(seconds=1))
    assert isinstance(a, Trigger)
    assert a.describe() == "every 5m"


# --- OnceTrigger ------------------------------------------------------------------------------


def test_once_fires_at_its_instant_and_never_again() -> None:
    at = datetime(2027, 1, 1, 9, tzinfo=UTC)
    once = OnceTrigger(at=at)
    assert once.next_after(at - timedelta(days=400)) == at
    assert once.next_after(at - timedelta(microseconds=1)) == at
    assert once.next_after(at) is None
    assert once.next_after(at + timedelta(days=1)) is None


def test_once_normalises_to_utc() -> None:
    once = OnceTrigger(at=datetime(2027, 1, 1, 10, tzinfo=PARIS))
    assert once.at == datetime(2027, 1, 1, 9, tzinfo=UTC)
    assert once.at.tzinfo is UTC


def test_once_rejects_naive_datetimes() -> None:
    with pytest.raises(InvalidValue, match="at: .*naive"):
        OnceTrigger(at=datetime(2027, 1, 1, 9))
    with pytest.raises(InvalidValue, match="instant: "):
        OnceTrigger(at=datetime(2027, 1, 1, 9, tzinfo=UTC)).next_after(datetime(2026, 1, 1))


def test_once_rejects_an_instant_with_no_utc_equivalent() -> None:
    with pytest.raises(InvalidValue, match="at: "):
        OnceTrigger(at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))


# --- spec round trip, every kind ---------------------------------------------------------------

ALL_KINDS: list[Trigger] = [
    IntervalTrigger(every="5m"),
    IntervalTrigger(every=timedelta(seconds=1.5), anchor=datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)),
    OnceTrigger(at=datetime(2027, 1, 1, 9, 0, 0, 123456, tzinfo=UTC)),
    CronTrigger("*/15 9-17 * * mon-fri", timezone="Europe/Paris"),
    CronTrigger("0 0 * * * *"),
    SolarTrigger(event="sunrise", latitude=48.85, longitude=2.35),
]


@pytest.mark.parametrize("trigger", ALL_KINDS, ids=lambda t: t.describe())
def test_every_trigger_kind_round_trips_through_its_json_spec(trigger: Trigger) -> None:
    spec = trigger.to_spec()
    assert spec["kind"] == trigger.kind
    decoded = json.loads(json.dumps(spec))
    rebuilt = trigger_from_spec(decoded)
    assert rebuilt == trigger
    assert type(rebuilt) is type(trigger)
    probe = datetime(2026, 6, 1, 3, tzinfo=UTC)
    assert rebuilt.next_after(probe) == trigger.next_after(probe)


@given(
    every_us=st.integers(1000, 3650 * 86_400 * 10**6),
    anchor=st.none()
    | st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
)
def test_interval_spec_round_trip_is_exact(every_us: int, anchor: datetime | None) -> None:
    trigger = IntervalTrigger(
        every=timedelta(microseconds=every_us), anchor=anchor, allow_subsecond=True
    )
    assert trigger_from_spec(json.loads(json.dumps(trigger.to_spec()))) == trigger


@pytest.mark.parametrize("every", [0.5, "500ms", timedelta(milliseconds=999), "0.2s"])
def test_an_interval_below_one_second_is_refused_naming_the_field_and_value(every: Any) -> None:
    with pytest.raises(InvalidValue) as caught:
        IntervalTrigger(every=every)
    assert caught.value.field == "every" and caught.value.value == every
    assert "shorter than 1 s" in str(caught.value) and "allow_subsecond=True" in str(caught.value)


def test_a_sub_second_interval_is_accepted_when_explicitly_allowed_and_stored_so() -> None:
    fast = IntervalTrigger(every="250ms", allow_subsecond=True)
    assert fast.every == timedelta(milliseconds=250) and fast.allow_subsecond
    spec = fast.to_spec()
    assert spec == {"kind": "interval", "every": 0.25, "anchor": None, "allow_subsecond": True}
    assert trigger_from_spec(json.loads(json.dumps(spec))) == fast
    # A stored spec without the flag (hand-written, or from before it existed) is refused.
    with pytest.raises(InvalidValue, match="shorter than 1 s"):
        trigger_from_spec({"kind": "interval", "every": 0.25, "anchor": None})
    with pytest.raises(InvalidValue) as caught:
        IntervalTrigger(every="250ms", allow_subsecond="yes")  # type: ignore[arg-type]
    assert caught.value.field == "allow_subsecond"


def test_the_sub_second_flag_means_nothing_from_one_second_up() -> None:
    assert IntervalTrigger(every="1s", allow_subsecond=True) == IntervalTrigger(every="1s")
    assert "allow_subsecond" not in IntervalTrigger(every="5s", allow_subsecond=True).to_spec()


def test_interval_spec_also_accepts_a_duration_text() -> None:
    assert trigger_from_spec({"kind": "interval", "every": "90s"}) == IntervalTrigger(every=90)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"kind": "weekly"}, "trigger.kind"),
        ({}, "trigger.kind"),
        ({"kind": "interval"}, "trigger"),
        ({"kind": "interval", "every": "abc"}, "every"),
        ({"kind": "interval", "every": None}, "every"),
        ({"kind": "interval", "every": 60, "anchor": "yesterday"}, "anchor"),
        ({"kind": "interval", "every": 60, "anchor": "2026-01-01T00:00:00"}, "anchor"),
        ({"kind": "once", "at": 12}, "at"),
        ({"kind": "once"}, "trigger"),
        ({"kind": "solar", "event": "sunrise", "latitude": "north", "longitude": 2}, "trigger"),
        ({"kind": "cron"}, "trigger"),
    ],
    ids=repr,
)
def test_bad_specs_raise_invalid_value_naming_the_field(
    spec: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidValue) as info:
        trigger_from_spec(spec)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_a_spec_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(InvalidSchedule, match="trigger: "):
        trigger_from_spec(["interval", 60])  # type: ignore[arg-type]
