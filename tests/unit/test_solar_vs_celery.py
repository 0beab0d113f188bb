"""SolarTrigger against the reference it replaces: celery's ``solar`` schedule, which asks ephem.

Three kinds of check:
- celery itself, through its public ``remaining_estimate`` (an ephem Observer with celery's
  horizon per event, pressure 0, next_rising / next_setting / next_transit, use_center for dawn
  and dusk): within a minute at |latitude| <= 60, for all nine events;
- ephem's sun position, compared with ``sun_position`` directly;
- ephem as an altitude oracle: at the returned instant the sun (centre, or upper limb for
  sunrise and sunset) is at the event's altitude and moving the right way. This is the check
  for polar latitudes, where celery's own search (skip to the next antitransit whenever ephem
  raises CircumpolarError) can miss days: from 1 December 2025 it reports the first Svalbard
  sunset after the polar night in August 2026, while the sun sets there again from 15 February.
"""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, datetime, timedelta

import ephem
import pytest
from celery.schedules import solar as celery_solar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goatbeat.core.solar import SOLAR_EVENTS, SolarTrigger, sun_position

PROFILE = settings(
    database=None,
    deadline=None,
    derandomize=True,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)

# The event altitudes restated from celery's table (arcseconds), and which use the upper limb.
EVENT_ALTITUDE = {
    "dawn_astronomical": -18 * 3600,
    "dawn_nautical": -12 * 3600,
    "dawn_civil": -6 * 3600,
    "sunrise": -34 * 60,
    "sunset": -34 * 60,
    "dusk_civil": -6 * 3600,
    "dusk_nautical": -12 * 3600,
    "dusk_astronomical": -18 * 3600,
}
UPPER_LIMB = {"sunrise", "sunset"}
RISING = {"dawn_astronomical", "dawn_nautical", "dawn_civil", "sunrise"}
J2000 = datetime(2000, 1, 1, 12, tzinfo=UTC)
ARCSEC = math.degrees(1) * 3600

latitudes = st.floats(min_value=-60, max_value=60)
longitudes = st.floats(min_value=-180, max_value=180)
instants = st.datetimes(
    min_value=datetime(1950, 1, 1), max_value=datetime(2150, 1, 1), timezones=st.just(UTC)
)


def celery_next(event: str, lat: float, lon: float, instant: datetime) -> datetime:
    """The instant celery beat would run a ``solar(event, lat, lon)`` entry last run at
    ``instant``: now + remaining_estimate(last_run_at), with "now" pinned to ``instant``."""
    schedule = celery_solar(event, lat, lon, nowfun=lambda: instant)
    return instant + schedule.remaining_estimate(instant)


def ephem_observer(lat: float, lon: float, when: datetime) -> ephem.Observer:
    observer = ephem.Observer()
    observer.lat = str(lat)
    observer.lon = str(lon)
    observer.elev = 0
    observer.pressure = 0
    observer.date = ephem.Date(when.astimezone(UTC).replace(tzinfo=None))
    return observer


def ephem_altitude(trigger: SolarTrigger, when: datetime) -> float:
    """ephem's altitude (arcseconds) of the point of the sun the trigger's event looks at."""
    sun = ephem.Sun(ephem_observer(trigger.latitude, trigger.longitude, when))
    altitude = float(sun.alt) * ARCSEC
    if trigger.event in UPPER_LIMB:
        altitude += float(sun.radius) * ARCSEC
    return altitude


def assert_sun_at_event(trigger: SolarTrigger, when: datetime) -> None:
    target = EVENT_ALTITUDE[trigger.event]
    assert abs(ephem_altitude(trigger, when) - target) < 3.0
    # Rising or sinking. Not "below, then above": at a pole the altitude changes by about an
    # arcsecond a minute, as slowly as the declination.
    before = ephem_altitude(trigger, when - timedelta(minutes=1))
    after = ephem_altitude(trigger, when + timedelta(minutes=1))
    assert (after > before) == (trigger.event in RISING)


def assert_no_crossing_between(trigger: SolarTrigger, start: datetime, end: datetime) -> None:
    """Sampling every 10 minutes, ephem sees no crossing of the event's altitude, in the
    event's direction, between ``start`` and ``end``."""
    target = EVENT_ALTITUDE[trigger.event]
    step = timedelta(minutes=10)
    when = start
    previous = ephem_altitude(trigger, when)
    while when + step < end:
        when += step
        current = ephem_altitude(trigger, when)
        if trigger.event in RISING:
            assert not previous < target <= current, when
        else:
            assert not previous > target >= current, when
        previous = current


# --- celery, within a minute ---------------------------------------------------------------


@PROFILE
@given(lat=latitudes, lon=longitudes, instant=instants)
def test_all_nine_events_are_within_a_minute_of_celery(
    lat: float, lon: float, instant: datetime
) -> None:
    for event in SOLAR_EVENTS:
        ours = SolarTrigger(event=event, latitude=lat, longitude=lon).next_after(instant)
        theirs = celery_next(event, lat, lon, instant)
        assert ours is not None
        assert abs((ours - theirs).total_seconds()) <= 60, (event, ours, theirs)


@PROFILE
@given(lat=latitudes, lon=longitudes, instant=instants, event=st.sampled_from(SOLAR_EVENTS))
def test_chained_events_stay_within_a_minute_of_celery(
    lat: float, lon: float, instant: datetime, event: str
) -> None:
    # A beat schedule feeds each run time back in as last_run_at.
    trigger = SolarTrigger(event=event, latitude=lat, longitude=lon)
    ours = theirs = instant
    for _ in range(3):
        following = trigger.next_after(ours)
        assert following is not None
        ours = following
        theirs = celery_next(event, lat, lon, theirs)
        assert abs((ours - theirs).total_seconds()) <= 60, (ours, theirs)


def test_typical_agreement_with_celery_is_well_under_a_second() -> None:
    rng = random.Random(20260601)
    differences = []
    for _ in range(400):
        event = rng.choice(SOLAR_EVENTS)
        lat, lon = rng.uniform(-60, 60), rng.uniform(-180, 180)
        instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=rng.uniform(0, 60_000))
        ours = SolarTrigger(event=event, latitude=lat, longitude=lon).next_after(instant)
        assert ours is not None
        differences.append(abs((ours - celery_next(event, lat, lon, instant)).total_seconds()))
    assert statistics.median(differences) < 0.2
    assert sorted(differences)[int(0.95 * len(differences))] < 1.0
    assert max(differences) < 10.0


@pytest.mark.parametrize(
    ("place", "lat", "lon"),
    [("Paris", 48.85, 2.35), ("Quito", -0.18, -78.47), ("Oslo", 59.91, 10.75)],
)
@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_a_year_of_daily_events_matches_celery(
    place: str, lat: float, lon: float, event: str
) -> None:
    trigger = SolarTrigger(event=event, latitude=lat, longitude=lon)
    instant = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(24):  # one event every ~15 days through 2026
        ours = trigger.next_after(instant)
        assert ours is not None
        assert abs((ours - celery_next(event, lat, lon, instant)).total_seconds()) <= 60
        instant = ours + timedelta(days=15)


# --- ephem's sun -----------------------------------------------------------------------------


@PROFILE
@given(
    when=st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    )
)
def test_sun_position_matches_ephem_to_two_arcseconds(when: datetime) -> None:
    right_ascension, declination, sidereal, distance = sun_position(
        (when - J2000) / timedelta(days=1)
    )
    observer = ephem_observer(0.0, 0.0, when)
    sun = ephem.Sun(observer)

    def wrapped(angle: float) -> float:
        return (angle + math.pi) % math.tau - math.pi

    ra_error = wrapped(right_ascension - float(sun.g_ra)) * math.cos(declination) * ARCSEC
    assert abs(ra_error) < 2.0
    assert abs(declination - float(sun.g_dec)) * ARCSEC < 2.0
    # Sidereal time in seconds of time (15 arcseconds each).
    assert abs(wrapped(sidereal - float(observer.sidereal_time())) * ARCSEC / 15) < 0.05
    assert abs(distance - sun.earth_distance) < 2e-4


@PROFILE
@given(
    event=st.sampled_from(sorted(EVENT_ALTITUDE)),
    lat=st.floats(min_value=-90, max_value=90),
    lon=longitudes,
    instant=instants,
)
def test_at_the_result_ephem_sees_the_sun_at_the_event_altitude(
    event: str, lat: float, lon: float, instant: datetime
) -> None:
    # Every latitude, poles included: where celery's search gives up or skips, this still
    # holds the result to the sun's real altitude.
    trigger = SolarTrigger(event=event, latitude=lat, longitude=lon)
    result = trigger.next_after(instant)
    assert result is not None
    assert_sun_at_event(trigger, result)


# --- polar day and night ---------------------------------------------------------------------

SVALBARD = (78.22, 15.65)  # Longyearbyen


def test_svalbard_sunrise_in_the_midnight_sun_is_the_first_after_polar_day_ends() -> None:
    trigger = SolarTrigger(event="sunrise", latitude=SVALBARD[0], longitude=SVALBARD[1])
    start = datetime(2025, 6, 1, tzinfo=UTC)
    result = trigger.next_after(start)
    assert result is not None
    assert datetime(2025, 8, 20, tzinfo=UTC) < result < datetime(2025, 8, 30, tzinfo=UTC)
    assert_sun_at_event(trigger, result)
    assert_no_crossing_between(trigger, start, result - timedelta(minutes=10))
    # Here celery agrees: its skip-a-day search reaches the same sunrise.
    assert abs((result - celery_next("sunrise", *SVALBARD, start)).total_seconds()) <= 60


def test_svalbard_sunset_in_the_polar_night_is_the_first_after_the_night_ends() -> None:
    trigger = SolarTrigger(event="sunset", latitude=SVALBARD[0], longitude=SVALBARD[1])
    start = datetime(2025, 12, 1, tzinfo=UTC)
    result = trigger.next_after(start)
    assert result is not None
    assert datetime(2026, 2, 10, tzinfo=UTC) < result < datetime(2026, 2, 20, tzinfo=UTC)
    assert_sun_at_event(trigger, result)
    assert_no_crossing_between(trigger, start, result - timedelta(minutes=10))


def test_svalbard_astronomical_dusk_returns_after_the_bright_summer() -> None:
    trigger = SolarTrigger(event="dusk_astronomical", latitude=SVALBARD[0], longitude=SVALBARD[1])
    start = datetime(2026, 4, 1, tzinfo=UTC)
    result = trigger.next_after(start)
    assert result is not None
    assert result - start > timedelta(days=120)
    assert_sun_at_event(trigger, result)
    assert_no_crossing_between(trigger, start, result - timedelta(minutes=10))


def test_svalbard_solar_noon_happens_every_day_of_the_polar_night() -> None:
    trigger = SolarTrigger(event="solar_noon", latitude=SVALBARD[0], longitude=SVALBARD[1])
    instant = datetime(2025, 12, 15, tzinfo=UTC)
    for _ in range(5):
        noon = trigger.next_after(instant)
        assert noon is not None
        assert noon - instant < timedelta(days=1, minutes=1)
        transit = ephem_observer(*SVALBARD, instant).next_transit(ephem.Sun())
        assert abs((noon - transit.datetime().replace(tzinfo=UTC)).total_seconds()) < 5
        instant = noon


def test_north_pole_sunrise_is_found_a_year_ahead() -> None:
    # At the pole the sun rises once a year, as its declination turns positive in March.
    trigger = SolarTrigger(event="sunrise", latitude=90.0, longitude=0.0)
    first = trigger.next_after(datetime(2025, 1, 1, tzinfo=UTC))
    assert first is not None and first.month == 3
    assert_sun_at_event(trigger, first)
    following = trigger.next_after(first)
    assert following is not None
    assert timedelta(days=360) < following - first < timedelta(days=366)
    assert_sun_at_event(trigger, following)


@pytest.mark.parametrize("lat", [-90.0, -89.5, -78.22, -66.6, 66.6, 78.22, 89.5, 90.0])
@pytest.mark.parametrize("event", SOLAR_EVENTS)
def test_high_latitudes_never_raise_and_stay_within_the_search_window(
    lat: float, event: str
) -> None:
    trigger = SolarTrigger(event=event, latitude=lat, longitude=-45.0)
    for start in (
        datetime(2026, 3, 20, tzinfo=UTC),
        datetime(2026, 6, 21, tzinfo=UTC),
        datetime(2026, 9, 23, tzinfo=UTC),
        datetime(2026, 12, 21, tzinfo=UTC),
    ):
        result = trigger.next_after(start)
        if result is None:
            continue
        assert start < result <= start + timedelta(days=367)
        if event != "solar_noon":
            assert_sun_at_event(trigger, result)
