"""SolarTrigger as a value: validation, spec, description, and the properties of next_after that
hold without a reference ephemeris (strictly later, deterministic, about a day apart).

Agreement with celery/ephem and the polar cases are in test_solar_vs_celery.py."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goatbeat.core.errors import InvalidCoordinate, InvalidValue
from goatbeat.core.solar import SOLAR_EVENTS, SolarTrigger

# Fixed and database-free, so every run explores the same examples.
PROFILE = settings(
    database=None,
    deadline=None,
    derandomize=True,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)

PARIS = SolarTrigger(event="sunrise", latitude=48.85, longitude=2.35)

latitudes = st.floats(min_value=-60, max_value=60)
longitudes = st.floats(min_value=-180, max_value=180)
instants = st.datetimes(
    min_value=datetime(1950, 1, 1), max_value=datetime(2150, 1, 1), timezones=st.just(UTC)
)


# --- construction and validation -----------------------------------------------------------


def test_solar_events_are_celerys_nine_in_order_of_the_day() -> None:
    assert SOLAR_EVENTS == (
        "dawn_astronomical",
        "dawn_nautical",
        "dawn_civil",
        "sunrise",
        "solar_noon",
        "sunset",
        "dusk_civil",
        "dusk_nautical",
        "dusk_astronomical",
    )


@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_every_solar_event_is_accepted(event: str) -> None:
    trigger = SolarTrigger(event=event, latitude=-33.9, longitude=151.2)
    assert trigger.event == event
    assert SolarTrigger.kind == "solar"


def test_integer_coordinates_are_stored_as_floats() -> None:
    trigger = SolarTrigger(event="sunset", latitude=45, longitude=-73)
    assert trigger.latitude == 45.0 and isinstance(trigger.latitude, float)
    assert trigger.longitude == -73.0 and isinstance(trigger.longitude, float)


@pytest.mark.parametrize(("latitude", "longitude"), [(90, 180), (-90, -180), (0, 0)])
def test_range_limits_are_valid_coordinates(latitude: float, longitude: float) -> None:
    SolarTrigger(event="sunrise", latitude=latitude, longitude=longitude)


@pytest.mark.parametrize(
    ("field", "latitude", "longitude"),
    [
        ("latitude", 90.01, 0.0),
        ("latitude", -91, 0.0),
        ("latitude", math.inf, 0.0),
        ("latitude", "48.85", 0.0),
        ("latitude", True, 0.0),
        ("latitude", None, 0.0),
        ("longitude", 0.0, 180.5),
        ("longitude", 0.0, -200),
        ("longitude", 0.0, -math.inf),
        ("longitude", 0.0, [2.35]),
    ],
)
def test_invalid_coordinate_names_the_field_and_the_value(
    field: str, latitude: object, longitude: object
) -> None:
    bad = latitude if field == "latitude" else longitude
    with pytest.raises(InvalidCoordinate) as caught:
        SolarTrigger(event="sunrise", latitude=latitude, longitude=longitude)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert caught.value.value is bad
    assert str(caught.value).startswith(f"{field}: ")
    assert repr(bad) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_nan_latitude_is_rejected() -> None:
    with pytest.raises(InvalidCoordinate) as caught:
        SolarTrigger(event="sunrise", latitude=math.nan, longitude=0.0)
    assert caught.value.field == "latitude"
    assert "nan" in str(caught.value)


@pytest.mark.parametrize("event", ["noon", "Sunrise", "sunrise ", "", "civil_dawn", 3, None])
def test_unknown_event_is_rejected_with_the_list_of_valid_events(event: object) -> None:
    with pytest.raises(InvalidCoordinate) as caught:
        SolarTrigger(event=event, latitude=0.0, longitude=0.0)  # type: ignore[arg-type]
    assert caught.value.field == "event"
    assert caught.value.value == event
    message = str(caught.value)
    assert message.startswith("event: ")
    assert repr(event) in message
    for valid in SOLAR_EVENTS:
        assert valid in message


def test_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        SolarTrigger("sunrise", 48.85, 2.35)  # type: ignore[misc]


def test_trigger_is_immutable_and_hashable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PARIS.latitude = 0.0  # type: ignore[misc]
    same = SolarTrigger(event="sunrise", latitude=48.85, longitude=2.35)
    assert same == PARIS and hash(same) == hash(PARIS)
    assert SolarTrigger(event="sunset", latitude=48.85, longitude=2.35) != PARIS


def test_naive_instant_is_rejected() -> None:
    with pytest.raises(InvalidValue) as caught:
        PARIS.next_after(datetime(2026, 6, 1, 12))
    assert caught.value.field == "instant"


# --- spec and description ------------------------------------------------------------------


@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_spec_is_json_and_rebuilds_an_equal_trigger(event: str) -> None:
    trigger = SolarTrigger(event=event, latitude=-12.5, longitude=130.84)
    spec = json.loads(json.dumps(trigger.to_spec()))
    assert spec == {"kind": "solar", "event": event, "latitude": -12.5, "longitude": 130.84}
    rebuilt = SolarTrigger(
        event=spec["event"], latitude=spec["latitude"], longitude=spec["longitude"]
    )
    assert rebuilt == trigger


def test_description_names_the_event_and_the_place() -> None:
    assert PARIS.describe() == "sunrise at 48.85°N 2.35°E"
    south_west = SolarTrigger(event="dusk_civil", latitude=-34.6, longitude=-58.38)
    assert south_west.describe() == "dusk_civil at 34.6°S 58.38°W"


# --- next_after properties -----------------------------------------------------------------


@PROFILE
@given(event=st.sampled_from(SOLAR_EVENTS), lat=latitudes, lon=longitudes, instant=instants)
def test_result_is_strictly_later_and_is_found_again_from_just_before_it(
    event: str, lat: float, lon: float, instant: datetime
) -> None:
    trigger = SolarTrigger(event=event, latitude=lat, longitude=lon)
    result = trigger.next_after(instant)
    assert result is not None
    assert result.tzinfo is UTC
    assert instant < result <= instant + timedelta(days=366)
    assert trigger.next_after(result - timedelta(microseconds=1)) == result
    following = trigger.next_after(result)
    assert following is not None and following > result


@PROFILE
@given(
    event=st.sampled_from(["sunrise", "solar_noon", "sunset"]),
    lat=latitudes,
    lon=longitudes,
    instant=instants,
)
def test_daily_events_recur_about_a_day_later(
    event: str, lat: float, lon: float, instant: datetime
) -> None:
    trigger = SolarTrigger(event=event, latitude=lat, longitude=lon)
    first = trigger.next_after(instant)
    assert first is not None
    second = trigger.next_after(first)
    assert second is not None
    # At |latitude| <= 60 sunrise and sunset drift by at most a few minutes a day; solar noon
    # by less than 30 seconds.
    assert abs(second - first - timedelta(days=1)) < timedelta(minutes=10)


@PROFILE
@given(lat=latitudes, lon=longitudes, instant=instants)
def test_events_of_one_day_come_in_celestial_order(
    lat: float, lon: float, instant: datetime
) -> None:
    # Take the solar noon after the instant; the dawns before it and the dusks after it fall
    # in order of the sun's altitude whenever they happen that day.
    noon = SolarTrigger(event="solar_noon", latitude=lat, longitude=lon).next_after(instant)
    assert noon is not None
    window = noon - timedelta(hours=12)
    times = {}
    for event in SOLAR_EVENTS:
        when = SolarTrigger(event=event, latitude=lat, longitude=lon).next_after(window)
        assert when is not None
        if when < noon + timedelta(hours=12):
            times[event] = when
    ordered = [event for event in SOLAR_EVENTS if event in times]
    assert sorted(ordered, key=times.__getitem__) == ordered
    # Sunrise, noon and sunset happen every day at these latitudes.
    assert {"sunrise", "solar_noon", "sunset"} <= set(times)


def test_input_time_zone_does_not_change_the_result() -> None:
    utc_instant = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    local = utc_instant.astimezone(ZoneInfo("Europe/Paris"))
    assert PARIS.next_after(local) == PARIS.next_after(utc_instant)


def test_sunrise_in_paris_on_the_summer_solstice_is_before_four_utc() -> None:
    # Sunrise in Paris around 21 June is at 05:47 CEST, i.e. 03:47 UTC.
    result = PARIS.next_after(datetime(2026, 6, 21, tzinfo=UTC))
    assert result is not None
    assert (
        datetime(2026, 6, 21, 3, 44, tzinfo=UTC) < result < datetime(2026, 6, 21, 3, 50, tzinfo=UTC)
    )


def test_no_event_past_the_end_of_the_datetime_range() -> None:
    # At 170 E, 23:00 UTC on 31 December 9999 is 10:20 local time on 1 January 10000: every
    # next event falls past datetime.max.
    end = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    for event in SOLAR_EVENTS:
        assert SolarTrigger(event=event, latitude=0.0, longitude=170.0).next_after(end) is None


def test_search_from_the_start_of_the_datetime_range_finds_an_event() -> None:
    start = datetime(1, 1, 1, tzinfo=UTC)
    for event in SOLAR_EVENTS:
        result = SolarTrigger(event=event, latitude=10.0, longitude=170.0).next_after(start)
        assert result is not None and start < result < start + timedelta(days=2)
