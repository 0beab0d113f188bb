"""Sun-event times: the nine events of celery's ``solar`` schedule, in stdlib math only.

This module owns the solar position model and :class:`SolarTrigger`, whose ``next_after`` finds
the next dawn, sunrise, solar noon, sunset or dusk after an instant for an observer at sea level.

Conventions follow celery's ``solar`` (which asks ephem): no atmospheric model (celery sets
ephem's pressure to 0, so refraction lives only in the -0:34 sunrise/sunset horizon); dawn and
dusk are the sun's centre crossing -6/-12/-18 degrees; sunrise and sunset are its upper limb
crossing -34 arcminutes; solar noon is the transit across the meridian. Altitudes are
topocentric, as ephem's are (the sun's parallax is 8.8 arcseconds).

Position model: Meeus' low-precision solar theory (mean longitude, equation of the centre),
the main IAU 1980 nutation terms and annual aberration, plus a table of periodic corrections
(perturbations by Venus, Mars, Jupiter, Saturn and the Moon) whose amplitudes were fitted by
least squares against ephem's VSOP87 apparent positions over 1900-2200. There the apparent
longitude agrees with ephem to 1.5 arcseconds (0.4 rms), which moves event times by well under a
second except when the sun barely grazes the target altitude. Outside 1900-2200 the correction
table stops following the time polynomial and accuracy falls back to Meeus' 0.01 degree, which
is still within seconds of time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from goatbeat.core.errors import InvalidCoordinate
from goatbeat.core.timeutil import ensure_aware, to_utc

__all__ = ["SOLAR_EVENTS", "SolarTrigger", "sun_position"]

SOLAR_EVENTS: tuple[str, ...] = (
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

_RISING = 1
_SETTING = -1
_TRANSIT = 0

# event -> (direction, altitude of the horizon in degrees, measured at the upper limb?)
_EVENT_RULES: dict[str, tuple[int, float, bool]] = {
    "dawn_astronomical": (_RISING, -18.0, False),
    "dawn_nautical": (_RISING, -12.0, False),
    "dawn_civil": (_RISING, -6.0, False),
    "sunrise": (_RISING, -34.0 / 60.0, True),
    "solar_noon": (_TRANSIT, 0.0, False),
    "sunset": (_SETTING, -34.0 / 60.0, True),
    "dusk_civil": (_SETTING, -6.0, False),
    "dusk_nautical": (_SETTING, -12.0, False),
    "dusk_astronomical": (_SETTING, -18.0, False),
}

_TAU = 2.0 * math.pi
_DEG = math.pi / 180.0
_ARCSEC = _DEG / 3600.0
_J2000 = datetime(2000, 1, 1, 12, tzinfo=UTC)  # JD 2451545.0, on the UT scale
_DAY = timedelta(days=1)
_SEARCH_DAYS = 366.0
_SOLAR_RADIUS_ARCSEC = 959.63  # the sun's semidiameter at 1 AU
_SOLAR_PARALLAX_ARCSEC = 8.794  # the sun's equatorial horizontal parallax at 1 AU
# d(declination)/d(day) = sin(obliquity) * (mean motion) * cos(right ascension), radians
_DEC_RATE = math.sin(23.44 * _DEG) * (0.98565 * _DEG)
_TOLERANCE_DAYS = 1e-9  # 86 microseconds: far below what rounding to microseconds keeps

# Correction to the apparent longitude, in arcseconds: (rate in degrees per Julian century,
# sine amplitude, cosine amplitude) of an argument that is zero at J2000.0. Rates are the
# combinations of planetary and lunar mean motions behind the largest perturbations of the
# Earth's orbit; amplitudes are fitted (see the module docstring).
_PERIODIC_TERMS: tuple[tuple[float, float, float], ...] = (
    (32964.47, -2.787, -6.657),
    (445267.1, 3.019, -5.714),
    (45036.9, 5.286, -1.608),
    (22518.4, 0.707, 4.781),
    (65929.0, -1.851, 2.01),
    (3034.9, -2.35, -1.166),
    (9037.5, -2.226, 1.093),
    (33718.15, 1.752, 1.002),
    (150.68, -2.258, -1.798),
    (2281.2, 0.637, -1.655),
    (29929.6, -1.494, 0.611),
    (31556.0, -0.88, -1.28),
    (4443.4, 0.883, -0.528),
    (67555.3, 0.275, 0.595),
    (4562.4, -0.434, -0.16),
    (62893.6, -0.178, 0.542),
    (31437.0, -0.177, 0.475),
    (14577.8, 0.423, 0.041),
    (31931.8, -0.399, -0.12),
    (34777.2, -0.272, -0.314),
    (1222.1, -0.233, 0.2),
    (16859.2, 0.074, -0.267),
    (26894.2, -0.124, 0.143),
    (90073.6, -0.171, 0.123),
    (12296.7, 0.011, 0.197),
    (890.5, -0.14, 0.165),
    (922465.0, 0.051, 0.171),
    (35959.2, -0.267, -0.173),
    (409268.0, 0.091, -0.151),
    (98893.6, -0.155, -0.041),
)
_TERMS_RAD = tuple((rate * _DEG, s, c) for rate, s, c in _PERIODIC_TERMS)
# The fitted secular part (constant, T, T^2, T^3, then sin M, cos M, T sin M, T cos M, sin 2M,
# cos 2M, arcseconds) is only valid where it was fitted; T is clamped to 1900-2200 for it so
# that far dates get a bounded correction instead of a diverging cubic.
_SECULAR = (-7.5056, -1.4947, -0.6384, 0.7518)
_ANOMALY = (0.3228, 0.2648, 0.098, -0.1291, 0.0063, -0.0008)
_FIT_T_MIN = -1.0
_FIT_T_MAX = 2.0


def sun_position(days: float) -> tuple[float, float, float, float]:
    """The sun at ``days`` after 2000-01-01 12:00 UT: apparent geocentric right ascension and
    declination, Greenwich apparent sidereal time (radians) and the Earth-sun distance (AU)."""
    year = 2000.0 + days / 365.25
    u = (year - 1820.0) / 100.0
    # Delta T (TT - UT, seconds) from the long-term parabola; the fitted terms absorb its
    # difference from the measured values.
    delta_t = -20.0 + 32.0 * u * u
    t = (days + delta_t / 86400.0) / 36525.0

    mean_longitude = 280.46646 + 36000.76983 * t + 0.0003032 * t * t
    anomaly = (357.52911 + 35999.05029 * t - 0.0001537 * t * t) * _DEG
    eccentricity = 0.016708634 - 0.000042037 * t - 0.0000001267 * t * t
    centre = (
        (1.914602 - 0.004817 * t - 0.000014 * t * t) * math.sin(anomaly)
        + (0.019993 - 0.000101 * t) * math.sin(2.0 * anomaly)
        + 0.000289 * math.sin(3.0 * anomaly)
    )
    true_anomaly = anomaly + centre * _DEG
    distance = 1.000001018 * (1.0 - eccentricity**2) / (1.0 + eccentricity * math.cos(true_anomaly))

    node = (125.04452 - 1934.136261 * t) * _DEG
    sun_l2 = 2.0 * (280.4665 + 36000.7698 * t) * _DEG
    moon_l2 = 2.0 * (218.3165 + 481267.8813 * t) * _DEG
    nutation_longitude = (
        -17.20 * math.sin(node)
        - 1.32 * math.sin(sun_l2)
        - 0.23 * math.sin(moon_l2)
        + 0.21 * math.sin(2.0 * node)
    )
    nutation_obliquity = (
        9.20 * math.cos(node)
        + 0.57 * math.cos(sun_l2)
        + 0.10 * math.cos(moon_l2)
        - 0.09 * math.cos(2.0 * node)
    )

    tc = min(max(t, _FIT_T_MIN), _FIT_T_MAX)
    sin_m, cos_m = math.sin(anomaly), math.cos(anomaly)
    correction = (
        _SECULAR[0]
        + tc * (_SECULAR[1] + tc * (_SECULAR[2] + tc * _SECULAR[3]))
        + (_ANOMALY[0] + tc * _ANOMALY[2]) * sin_m
        + (_ANOMALY[1] + tc * _ANOMALY[3]) * cos_m
        + _ANOMALY[4] * math.sin(2.0 * anomaly)
        + _ANOMALY[5] * math.cos(2.0 * anomaly)
    )
    for rate, sin_amp, cos_amp in _TERMS_RAD:
        argument = rate * t
        correction += sin_amp * math.sin(argument) + cos_amp * math.cos(argument)

    aberration = -20.4898 / distance
    longitude = (mean_longitude + centre) * _DEG + (
        nutation_longitude + aberration + correction
    ) * _ARCSEC
    mean_obliquity = 23.4392911 - (46.8150 * t + 0.00059 * t * t - 0.001813 * t**3) / 3600.0
    obliquity = mean_obliquity * _DEG + nutation_obliquity * _ARCSEC

    sin_lon = math.sin(longitude)
    right_ascension = math.atan2(math.cos(obliquity) * sin_lon, math.cos(longitude))
    declination = math.asin(math.sin(obliquity) * sin_lon)

    tu = days / 36525.0
    mean_sidereal = (
        280.46061837 + 360.98564736629 * days + tu * tu * (0.000387933 - tu / 38710000.0)
    )
    # Apparent sidereal time (the equation of the equinoxes added), as ephem uses.
    sidereal = (mean_sidereal % 360.0) * _DEG + nutation_longitude * _ARCSEC * math.cos(obliquity)
    return right_ascension, declination, sidereal, distance


def _wrap(angle: float) -> float:
    """``angle`` folded into [-pi, pi)."""
    return (angle + math.pi) % _TAU - math.pi


class _Observer:
    """Per-call search state for one trigger: the observer's geometry and the target altitude."""

    __slots__ = ("sin_lat", "cos_lat", "lon", "lon_days", "altitude", "upper_limb")

    def __init__(self, latitude: float, longitude: float, altitude: float, upper_limb: bool):
        lat = latitude * _DEG
        self.sin_lat = math.sin(lat)
        self.cos_lat = math.cos(lat)
        self.lon = longitude * _DEG
        self.lon_days = longitude / 360.0
        self.altitude = altitude * _DEG
        self.upper_limb = upper_limb

    def meridian(self, n: int, offset: float) -> float:
        """When the sun's local hour angle is ``offset`` (0: transit, pi: antitransit) within
        half a day after the local mean noon of day ``n`` (days after J2000.0)."""
        d = n + offset / _TAU - self.lon_days
        for _ in range(10):
            step = self._meridian_step(d, offset)
            d -= step
            if abs(step) < _TOLERANCE_DAYS:
                break
        return d

    def boundary(self, j: int) -> float:
        """Half-day boundary ``j``: the transit of day ``j // 2`` when ``j`` is even, else the
        antitransit after it. One correction from mean solar time leaves it a fraction of a
        second off, which is all a bracket needs."""
        offset = math.pi * (j % 2)
        d = j // 2 + offset / _TAU - self.lon_days
        return d - self._meridian_step(d, offset)

    def _meridian_step(self, d: float, offset: float) -> float:
        ra, _dec, sidereal, _r = sun_position(d)
        # The sun's hour angle grows by one turn per (solar) day, to within 0.03 %.
        return _wrap(sidereal + self.lon - ra - offset) / _TAU

    def target_sine(self, distance: float) -> float:
        """Sine of the geocentric altitude at which the event happens."""
        altitude = self.altitude
        if self.upper_limb:
            altitude -= _SOLAR_RADIUS_ARCSEC * _ARCSEC / distance
        # Parallax lowers the topocentric sun by p*cos(alt); ephem's altitudes are topocentric.
        altitude += _SOLAR_PARALLAX_ARCSEC * _ARCSEC / distance * math.cos(altitude)
        return math.sin(altitude)

    def excess(self, d: float) -> tuple[float, float, float]:
        """(sin altitude - sin target altitude, its derivative per day, declination) at ``d``."""
        ra, dec, sidereal, distance = sun_position(d)
        hour_angle = sidereal + self.lon - ra
        sin_dec, cos_dec = math.sin(dec), math.cos(dec)
        cos_ha = math.cos(hour_angle)
        sin_alt = self.sin_lat * sin_dec + self.cos_lat * cos_dec * cos_ha
        # The declination's drift matters as much as the hour angle near the poles, where a
        # derivative without it would stop Newton's method early.
        dec_rate = _DEC_RATE * math.cos(ra)
        derivative = (self.sin_lat * cos_dec - self.cos_lat * sin_dec * cos_ha) * dec_rate - (
            self.cos_lat * cos_dec * math.sin(hour_angle) * _TAU
        )
        return sin_alt - self.target_sine(distance), derivative, dec

    def sample(self, d: float) -> tuple[float, float, float]:
        excess, _slope, dec = self.excess(d)
        return d, excess, dec

    def altitude_range_excludes_target(self, n: int) -> bool:
        """True when, during solar day ``n``, the sun stays clearly above or clearly below the
        target altitude, so the exact search can skip the day (polar day and night)."""
        _ra, dec, _sidereal, _r = sun_position(n - self.lon_days)
        lat = math.atan2(self.sin_lat, self.cos_lat)
        highest = math.pi / 2 - abs(lat - dec)
        lowest = abs(lat + dec) - math.pi / 2
        # One degree covers the declination's drift over a day (< 0.41 degrees), the solar
        # radius and parallax.
        margin = _DEG
        return self.altitude > highest + margin or self.altitude < lowest - margin

    def crossing(self, lo: float, hi: float, f_lo: float, transit: float, dec: float) -> float:
        """The instant in (lo, hi) where the altitude excess changes sign, given that it does.

        Newton's method from the textbook hour-angle estimate, kept inside the shrinking bracket
        and replaced by bisection whenever it would leave it (a grazing sun makes the derivative
        vanish)."""
        sign = 1.0 if f_lo < 0 else -1.0
        x = 0.5 * (lo + hi)
        arg = (self.target_sine(1.0) - self.sin_lat * math.sin(dec)) / (
            self.cos_lat * math.cos(dec)
        )
        if -1.0 < arg < 1.0:
            half_arc = math.acos(arg) / _TAU
            guess = transit - half_arc if hi <= transit else transit + half_arc
            if lo < guess < hi:
                x = guess
        for _ in range(80):
            value, slope, _dec = self.excess(x)
            value *= sign
            slope *= sign
            if value == 0.0:
                return x
            if value < 0.0:
                lo = x
            else:
                hi = x
            nxt = x - value / slope if slope > 0.0 else math.nan
            if not lo < nxt < hi:
                nxt = 0.5 * (lo + hi)
            if abs(nxt - x) < _TOLERANCE_DAYS or hi - lo < _TOLERANCE_DAYS:
                return nxt
            x = nxt
        return x


def _to_datetime(days: float) -> datetime:
    return _J2000 + timedelta(microseconds=round(days * 86_400_000_000))


def _later(days: float, start: float, instant: datetime) -> datetime | None:
    """``days`` as a datetime if it is strictly after ``instant`` (``start`` days), else None.

    The decision is made on the microsecond-rounded datetime, the value next_after returns,
    so that next_after(result) moves on to the following event; floats only screen out
    instants clearly before, which may also lie before datetime.min."""
    if days < start - _TOLERANCE_DAYS:
        return None
    when = _to_datetime(days)
    return when if when > instant else None


def _check_coordinate(field: str, value: object, bound: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidCoordinate(field, value, f"{value!r} is not a number of degrees")
    number = float(value)
    if not math.isfinite(number) or not -bound <= number <= bound:
        raise InvalidCoordinate(
            field, value, f"{value!r} is out of range -{bound:g}..{bound:g} degrees"
        )
    return number


@dataclass(frozen=True, slots=True)
class SolarTrigger:
    """Fires at a sun event (``SOLAR_EVENTS``) seen from ``latitude``, ``longitude`` (degrees,
    north and east positive), like celery's ``solar(event, lat, lon)``.

    Where an event does not happen every day (astronomical dusk in a northern summer, sunrise
    in the polar night), ``next_after`` returns the first one that does happen, searching up to
    366 days ahead, and ``None`` beyond."""

    kind: ClassVar[str] = "solar"
    event: str
    latitude: float
    longitude: float

    def __init__(self, *, event: str, latitude: float, longitude: float) -> None:
        if not isinstance(event, str) or event not in _EVENT_RULES:
            raise InvalidCoordinate(
                "event",
                event,
                f"{event!r} is not a solar event; valid events: {', '.join(SOLAR_EVENTS)}",
            )
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "latitude", _check_coordinate("latitude", latitude, 90.0))
        object.__setattr__(self, "longitude", _check_coordinate("longitude", longitude, 180.0))

    def next_after(self, instant: datetime) -> datetime | None:
        instant = to_utc(ensure_aware(instant, "instant"))
        start = (instant - _J2000) / _DAY
        direction, altitude, upper_limb = _EVENT_RULES[self.event]
        observer = _Observer(self.latitude, self.longitude, altitude, upper_limb)
        try:
            if direction == _TRANSIT:
                return self._next_transit(observer, instant, start)
            return self._next_crossing(observer, instant, start, direction)
        except OverflowError:
            # Past datetime.max (year 9999): there is no representable next event.
            return None

    @staticmethod
    def _next_transit(observer: _Observer, instant: datetime, start: float) -> datetime | None:
        # Transit n lies within the equation of time (< 0.012 day) of n - lon_days.
        n = math.floor(start + observer.lon_days)
        for k in range(n, n + 3):
            when = _later(observer.meridian(k, 0.0), start, instant)
            if when is not None:
                return when
        return None  # unreachable: transits are about a day apart

    @staticmethod
    def _next_crossing(
        observer: _Observer, instant: datetime, start: float, direction: int
    ) -> datetime | None:
        # The search walks half-days: from an antitransit to the next transit (the sun
        # climbing) and from a transit to the next antitransit (the sun sinking). A half holds
        # at most one crossing of the target altitude, except within a degree or so of a pole;
        # a rising is an upward crossing, a setting a downward one (near a pole either can
        # happen in either half, driven by the declination). Half-days are numbered from
        # J2000 and every root is computed from its number alone, so the answer does not
        # depend on where the search started: next_after of a result is the following event.
        # Boundary j lies within the equation of time (< 0.012 day) of j / 2 - lon_days.
        j = math.floor(2.0 * (start + observer.lon_days))
        if start < j / 2 - observer.lon_days + 0.02:
            j -= 1
        limit = start + _SEARCH_DAYS
        lo: tuple[float, float, float] | None = None  # (instant, excess, declination)
        screened_day, skip_day = None, False
        while j / 2 - observer.lon_days <= limit + 0.1:
            day = (j + 1) // 2
            if day != screened_day:
                screened_day, skip_day = day, observer.altitude_range_excludes_target(day)
            if skip_day:
                lo = None
                j += 1
                continue
            if lo is None:
                lo = observer.sample(observer.boundary(j))
            hi = observer.sample(observer.boundary(j + 1))
            if hi[0] > start - _TOLERANCE_DAYS and direction * lo[1] < 0.0 < direction * hi[1]:
                transit = lo if j % 2 == 0 else hi
                root = observer.crossing(lo[0], hi[0], lo[1], transit[0], transit[2])
                when = _later(root, start, instant)
                if when is not None:
                    return when
            lo = hi
            j += 1
        return None

    def to_spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "event": self.event,
            "latitude": self.latitude,
            "longitude": self.longitude,
        }

    def describe(self) -> str:
        ns = "N" if self.latitude >= 0 else "S"
        ew = "E" if self.longitude >= 0 else "W"
        return f"{self.event} at {abs(self.latitude):g}°{ns} {abs(self.longitude):g}°{ew}"
