"""Durations as people write them: "30s", "10m", "1h30m"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import InvalidDuration, InvalidValue


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("500ms", timedelta(milliseconds=500)),
        ("1m1ms", timedelta(minutes=1, milliseconds=1)),
        (
            "1w2d3h4m5s6ms",
            timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5, milliseconds=6),
        ),
        ("1.5h", timedelta(minutes=90)),
        (" 1h 30m ", timedelta(minutes=90)),
        ("1H30M", timedelta(minutes=90)),
        ("90", timedelta(seconds=90)),
        ("0.25", timedelta(milliseconds=250)),
        ("0s", timedelta(0)),
    ],
)
def test_text_durations_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (90, timedelta(seconds=90)),
        (1.5, timedelta(seconds=1.5)),
        (0, timedelta(0)),
        (timedelta(minutes=3), timedelta(minutes=3)),
    ],
)
def test_numbers_are_seconds_and_timedeltas_pass_through(
    value: object, expected: timedelta
) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "abc",
        "30x",
        "30 seconds",
        "1h30",
        "30m1h",  # smallest unit first
        "1h1h",  # unit twice
        "-5s",
        "-5",
        "nan",
        "inf",
        "1e400",
        "3651d",
        "99999999999999999999w",
        "1_000s",
        True,
        None,
        [30],
        {"s": 30},
        -1,
        float("nan"),
        float("-inf"),
        10**400,
        -(10**400),
        timedelta(seconds=-1),
        timedelta(days=3651),
    ],
    ids=repr,
)
def test_invalid_durations_raise_naming_field_and_value(value: object) -> None:
    with pytest.raises(InvalidDuration) as info:
        parse_duration(value, field="lease_ttl")
    error = info.value
    assert isinstance(error, InvalidValue) and isinstance(error, ValueError)
    assert error.field == "lease_ttl" and error.value is value
    message = str(error)
    assert message.startswith("lease_ttl: ")
    if isinstance(value, str) and value.strip():
        assert repr(value) in message


def test_default_field_name_is_duration() -> None:
    with pytest.raises(InvalidDuration, match=r"^duration: 'soon'"):
        parse_duration("soon")


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=30), "30s"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(days=9, hours=1), "1w2d1h"),
        (timedelta(milliseconds=1500), "1s500ms"),
        (timedelta(microseconds=1), "0.000001s"),
        (timedelta(seconds=61, microseconds=500), "61.0005s"),
    ],
)
def test_format_duration_writes_the_shortest_readable_text(delta: timedelta, text: str) -> None:
    assert format_duration(delta) == text


def test_format_duration_refuses_negative_durations() -> None:
    with pytest.raises(InvalidDuration):
        format_duration(timedelta(seconds=-1))


@given(st.integers(0, 3650 * 86_400 * 10**6))
def test_format_then_parse_is_the_identity(micros: int) -> None:
    delta = timedelta(microseconds=micros)
    assert parse_duration(format_duration(delta)) == delta
