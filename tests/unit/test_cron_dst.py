"""Daylight saving time, following Debian/ISC cron.

Hand-checked transitions (2026):

* Europe/Paris: 29 Mar at 01:00Z clocks go 02:00 CET -> 03:00 CEST (gap 02:00-02:59);
  25 Oct at 01:00Z clocks go 03:00 CEST -> 02:00 CET (02:00-02:59 happens twice: first pass
  00:00Z-00:59Z, second pass 01:00Z-01:59Z).
* America/New_York: 8 Mar at 07:00Z, 02:00 EST -> 03:00 EDT; 1 Nov at 06:00Z,
  02:00 EDT -> 01:00 EST (01:00-01:59 twice: 05:00Z-05:59Z, then 06:00Z-06:59Z).
* Australia/Lord_Howe (half-hour shift): 5 Apr local (4 Apr 15:00Z), 02:00 +11:00 ->
  01:30 +10:30 (01:30-01:59 twice: 14:30Z-14:59Z, then 15:00Z-15:29Z); 4 Oct local
  (3 Oct 15:30Z), 02:00 +10:30 -> 02:30 +11:00 (gap 02:00-02:29).

After them, a property test checks the engine against a brute-force reference written from
the rules alone, in zones with unusual transitions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goatbeat.core.cron import CronTrigger


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def chain(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    trigger = CronTrigger(expression, timezone=zone)
    found: list[datetime] = []
    current = start
    for _ in range(count):
        following = trigger.next_after(current)
        assert following is not None
        assert following > current
        found.append(following)
        current = following
    return found


PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"


# -- spring forward: the gap ---------------------------------------------------------------


def test_paris_fixed_time_in_the_gap_fires_when_the_clocks_jump() -> None:
    assert chain("30 2 * * *", PARIS, utc(2026, 3, 28, 12), 3) == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, the first real instant after the gap
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_paris_several_gap_times_fire_once_at_the_jump() -> None:
    assert chain("0,30 2 * * *", PARIS, utc(2026, 3, 28, 12), 3) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 0),
        utc(2026, 3, 30, 0, 30),
    ]


def test_paris_gap_firing_happens_even_when_starting_one_second_before_it() -> None:
    assert chain("30 2 * * *", PARIS, utc(2026, 3, 29, 0, 59, 59), 1) == [utc(2026, 3, 29, 1)]
    # ...and not again when starting exactly at it.
    assert chain("30 2 * * *", PARIS, utc(2026, 3, 29, 1), 1) == [utc(2026, 3, 30, 0, 30)]


def test_paris_wildcard_skips_the_gap() -> None:
    assert chain("30 * * * *", PARIS, utc(2026, 3, 29, 0, 45), 2) == [
        utc(2026, 3, 29, 1, 30),  # 03:30 CEST; 02:30 does not exist
        utc(2026, 3, 29, 2, 30),
    ]
    assert chain("*/30 * * * *", PARIS, utc(2026, 3, 29, 0, 15), 3) == [
        utc(2026, 3, 29, 0, 30),  # 01:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST
        utc(2026, 3, 29, 1, 30),
    ]
    # Every minute of 02:xx: nothing at all on the 29th.
    assert chain("* 2 * * *", PARIS, utc(2026, 3, 28, 12), 1) == [utc(2026, 3, 30, 0, 0)]


def test_paris_six_field_fixed_time_in_the_gap_fires_once() -> None:
    # The seconds field does not make an expression a wildcard one.
    assert chain("*/10 30 2 * * *", PARIS, utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 0, 0),
        utc(2026, 3, 30, 0, 30, 0),
    ]


def test_new_york_gap() -> None:
    assert chain("30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), 2) == [
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]
    assert chain("15 * * * *", NEW_YORK, utc(2026, 3, 8, 6, 30), 1) == [utc(2026, 3, 8, 7, 15)]


def test_lord_howe_half_hour_gap() -> None:
    assert chain("15 2 * * *", LORD_HOWE, utc(2026, 10, 3), 2) == [
        utc(2026, 10, 3, 15, 30),  # 02:30 +11:00, the jump
        utc(2026, 10, 4, 15, 15),  # 02:15 +11:00
    ]
    # Wildcard: 02:00 and 02:20 do not exist; 02:40 +11:00 is 15:40Z.
    assert chain("*/20 * * * *", LORD_HOWE, utc(2026, 10, 3, 15, 25), 2) == [
        utc(2026, 10, 3, 15, 40),
        utc(2026, 10, 3, 16, 0),
    ]


def test_midnight_skipped_by_the_jump_fires_at_one() -> None:
    # America/Santiago jumps from 00:00 -04 to 01:00 -03 on 6 Sep 2026 (04:00Z).
    assert chain("@daily", "America/Santiago", utc(2026, 9, 5, 12), 2) == [
        utc(2026, 9, 6, 4, 0),
        utc(2026, 9, 7, 3, 0),
    ]


# -- fall back: the repeated hour ----------------------------------------------------------


def test_paris_fixed_time_in_the_repeated_hour_fires_once_on_the_first_pass() -> None:
    assert chain("30 2 * * *", PARIS, utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc(2026, 10, 26, 1, 30),  # 02:30 CET, next day
    ]
    # 01:00 CEST exactly, then 02:00 CEST (first pass), 03:00 CET, and the next day.
    assert chain("0 1-3 * * *", PARIS, utc(2026, 10, 24, 23), 4) == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 2, 0),
        utc(2026, 10, 26, 0, 0),
        utc(2026, 10, 26, 1, 0),
    ]


def test_paris_wildcard_fires_on_both_passes() -> None:
    assert chain("30 * * * *", PARIS, utc(2026, 10, 25, 0), 3) == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 1, 30),  # 02:30 CET
        utc(2026, 10, 25, 2, 30),  # 03:30 CET
    ]
    assert chain("*/30 2 * * *", PARIS, utc(2026, 10, 24, 23, 59), 5) == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 26, 1, 0),
    ]


def test_paris_starting_in_the_second_pass() -> None:
    # 02:10 CET, second pass: 02:30 already fired on the first pass.
    assert chain("30 2 * * *", PARIS, utc(2026, 10, 25, 1, 10), 1) == [utc(2026, 10, 26, 1, 30)]
    # Starting exactly at the fall-back instant is the start of the second pass.
    assert chain("15 2 * * *", PARIS, utc(2026, 10, 25, 1, 0), 1) == [utc(2026, 10, 26, 1, 15)]
    # A fixed time after the repeated hour still fires normally.
    assert chain("0 3 * * *", PARIS, utc(2026, 10, 25, 1, 10), 1) == [utc(2026, 10, 25, 2, 0)]
    # A wildcard one fires on the second pass.
    assert chain("*/20 * * * *", PARIS, utc(2026, 10, 25, 1, 10), 2) == [
        utc(2026, 10, 25, 1, 20),
        utc(2026, 10, 25, 1, 40),
    ]


def test_paris_end_of_first_pass_goes_back_to_the_second_for_wildcards_only() -> None:
    # 02:30 CEST: the next 02:00 on the wall is the second pass, 30 minutes later.
    assert chain("0 * * * *", PARIS, utc(2026, 10, 25, 0, 30), 1) == [utc(2026, 10, 25, 1, 0)]
    # The fixed-time 02:45 already fired at 00:45Z.
    assert chain("45 2 * * *", PARIS, utc(2026, 10, 25, 0, 50), 1) == [utc(2026, 10, 26, 1, 45)]


def test_new_york_repeated_hour() -> None:
    assert chain("30 1 * * *", NEW_YORK, utc(2026, 10, 31, 12), 2) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT
        utc(2026, 11, 2, 6, 30),  # 01:30 EST, next day
    ]
    assert chain("30 * * * *", NEW_YORK, utc(2026, 11, 1, 5), 3) == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 1, 7, 30),
    ]
    # 01:10 EST, second pass.
    assert chain("30 1 * * *", NEW_YORK, utc(2026, 11, 1, 6, 10), 1) == [utc(2026, 11, 2, 6, 30)]
    assert chain("*/30 * * * *", NEW_YORK, utc(2026, 11, 1, 6, 10), 1) == [utc(2026, 11, 1, 6, 30)]


def test_lord_howe_half_hour_repeat() -> None:
    assert chain("45 1 * * *", LORD_HOWE, utc(2026, 4, 4), 2) == [
        utc(2026, 4, 4, 14, 45),  # 01:45 +11:00, first pass
        utc(2026, 4, 5, 15, 15),  # 01:45 +10:30, next day
    ]
    assert chain("*/15 1 * * *", LORD_HOWE, utc(2026, 4, 4, 14, 40), 4) == [
        utc(2026, 4, 4, 14, 45),  # 01:45 +11:00
        utc(2026, 4, 4, 15, 0),  # 01:30 +10:30, second pass
        utc(2026, 4, 4, 15, 15),  # 01:45 +10:30
        utc(2026, 4, 5, 14, 30),  # 01:00 +10:30, next day
    ]
    # 01:35 +10:30, second pass: the fixed 01:45 already fired.
    assert chain("45 1 * * *", LORD_HOWE, utc(2026, 4, 4, 15, 5), 1) == [utc(2026, 4, 5, 15, 15)]


def test_input_given_in_the_second_pass_with_fold() -> None:
    second_pass = datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=ZoneInfo(PARIS))
    first_pass = datetime(2026, 10, 25, 2, 10, fold=0, tzinfo=ZoneInfo(PARIS))
    trigger = CronTrigger("30 2 * * *", timezone=PARIS)
    assert trigger.next_after(first_pass) == utc(2026, 10, 25, 0, 30)
    assert trigger.next_after(second_pass) == utc(2026, 10, 26, 1, 30)


def test_transitions_reached_from_a_year_away() -> None:
    # The search jumps over months of offset changes; the DST rules still hold on arrival.
    assert chain("30 2 29 3 *", PARIS, utc(2025, 4, 1), 2) == [
        utc(2026, 3, 29, 1, 0),  # in the gap: the jump
        utc(2027, 3, 29, 0, 30),
    ]
    assert chain("30 2 25 10 *", PARIS, utc(2025, 10, 26), 2) == [
        utc(2026, 10, 25, 0, 30),  # first pass only
        utc(2027, 10, 25, 0, 30),  # 2027 falls back on the 31st: still CEST
    ]
    assert chain("*/30 2 25 10 *", PARIS, utc(2025, 10, 26), 5) == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 1, 30),
        utc(2027, 10, 25, 0, 0),
    ]
    assert chain("45 1 5 4 *", LORD_HOWE, utc(2025, 1, 1), 1) == [utc(2025, 4, 4, 14, 45)]
    assert chain("45 1 5 4 *", LORD_HOWE, utc(2025, 4, 4, 15), 1) == [utc(2026, 4, 4, 14, 45)]


# -- brute-force reference -----------------------------------------------------------------

_ZONES = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute shifts
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/St_Johns",  # -03:30
    "America/Santiago",  # midnight transitions
    "Europe/Dublin",  # "negative" DST in tzdata
    "Pacific/Apia",  # skipped 30 Dec 2011 entirely
    "Antarctica/Troll",  # 2-hour shift
    "Asia/Kolkata",  # no DST
]
_MINUTE = timedelta(minutes=1)


def _offset_changes_near(zone: ZoneInfo, start: datetime) -> datetime:
    """The first offset change after ``start`` to the minute, or ``start`` if none in a year."""
    offset = start.astimezone(zone).utcoffset()
    probe = start
    for _ in range(366):
        if (probe + timedelta(days=1)).astimezone(zone).utcoffset() != offset:
            while probe.astimezone(zone).utcoffset() == offset:
                probe += _MINUTE
            return probe
        probe += timedelta(days=1)
    return start


def _local(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def _reference_wildcard(matches: set[tuple[int, int]], zone: ZoneInfo, after: datetime) -> datetime:
    # Every real minute, in order: the first whose local wall time matches.
    instant = after.replace(second=0, microsecond=0) + _MINUTE
    for _ in range(4 * 1440):
        wall = _local(instant, zone)
        if (wall.hour, wall.minute) in matches:
            return instant
        instant += _MINUTE
    raise AssertionError("no match within four days")


def _fire_instant_fixed(wall: datetime, zone: ZoneInfo) -> datetime:
    real = [
        candidate
        for fold in (0, 1)
        if _local(candidate := wall.replace(tzinfo=zone, fold=fold).astimezone(UTC), zone) == wall
    ]
    if real:
        return min(real)  # the first pass of a repeated time
    # In a gap: the first real instant whose wall clock is past it.
    instant = min(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    while _local(instant, zone) <= wall:
        instant += _MINUTE
    return instant


def _reference_fixed(matches: set[tuple[int, int]], zone: ZoneInfo, after: datetime) -> datetime:
    # Every wall minute from a day before to three days after: each fires at one instant.
    wall = _local(after, zone).replace(second=0, microsecond=0) - timedelta(days=1)
    best: datetime | None = None
    for _ in range(4 * 1440):
        if (wall.hour, wall.minute) in matches:
            fire = _fire_instant_fixed(wall, zone)
            if fire > after and (best is None or fire < best):
                best = fire
        wall += _MINUTE
    assert best is not None
    return best


def _time_field(low: int, high: int) -> st.SearchStrategy[tuple[str, set[int]]]:
    values = st.integers(low, high)
    return st.one_of(
        st.just(("*", set(range(low, high + 1)))),
        st.integers(1, high).map(lambda s: (f"*/{s}", set(range(low, high + 1, s)))),
        st.lists(values, min_size=1, max_size=4).map(lambda vs: (",".join(map(str, vs)), set(vs))),
        st.tuples(values, values).map(
            lambda ab: (f"{min(ab)}-{max(ab)}", set(range(min(ab), max(ab) + 1)))
        ),
    )


@settings(max_examples=300, deadline=None)
@given(
    zone_name=st.sampled_from(_ZONES),
    minute=_time_field(0, 59),
    hour=_time_field(0, 23),
    year=st.integers(1975, 2040),
    day_of_year=st.integers(0, 364),
    shift_minutes=st.integers(-36 * 60, 36 * 60),
    shift_seconds=st.integers(0, 59),
    hours_of_the_change=st.booleans(),
)
def test_matches_brute_force_reference_near_transitions(
    zone_name: str,
    minute: tuple[str, set[int]],
    hour: tuple[str, set[int]],
    year: int,
    day_of_year: int,
    shift_minutes: int,
    shift_seconds: int,
    hours_of_the_change: bool,
) -> None:
    zone = ZoneInfo(zone_name)
    change = _offset_changes_near(zone, utc(year, 1, 1) + timedelta(days=day_of_year))
    if hours_of_the_change:
        # Aim at the skipped or repeated wall hours themselves.
        before = _local(change - _MINUTE, zone)
        around = {(before + timedelta(minutes=k)).hour for k in (0, 1, 61)}
        around |= {_local(change + timedelta(minutes=k), zone).hour for k in (0, 60)}
        hour = (",".join(map(str, sorted(around))), around)
    expression = f"{minute[0]} {hour[0]} * * *"
    matches = {(h, m) for h in hour[1] for m in minute[1]}
    start = change + timedelta(minutes=shift_minutes, seconds=shift_seconds)
    trigger = CronTrigger(expression, timezone=zone_name)
    fixed = not minute[0].startswith("*") and not hour[0].startswith("*")
    reference = _reference_fixed if fixed else _reference_wildcard
    current = start
    for _ in range(3):
        expected = reference(matches, zone, current)
        found = trigger.next_after(current)
        assert found == expected, (expression, zone_name, current)
        current = expected


@pytest.mark.parametrize("zone_name", _ZONES)
def test_hourly_job_matches_reference_around_the_2011_transitions(zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    trigger = CronTrigger("17 * * * *", timezone=zone_name)
    change = utc(2011, 1, 1)
    for _ in range(2):
        change = _offset_changes_near(zone, change + timedelta(days=1))
        current = change - timedelta(days=2)
        while current < change + timedelta(days=2):
            expected = _reference_wildcard({(h, 17) for h in range(24)}, zone, current)
            assert trigger.next_after(current) == expected
            current = expected


def test_wildcard_matches_reference_in_every_zone_over_a_transition() -> None:
    # One property, every zone shipped with the system tz database.
    from zoneinfo import available_timezones

    for zone_name in sorted(available_timezones()):
        zone = ZoneInfo(zone_name)
        change = _offset_changes_near(zone, utc(2026, 1, 1))
        if change == utc(2026, 1, 1):
            change = utc(2026, 6, 1)
        for expression, matches, fixed in (
            ("*/30 * * * *", {(h, m) for h in range(24) for m in (0, 30)}, False),
            ("30 1,2 * * *", {(1, 30), (2, 30)}, True),
        ):
            trigger = CronTrigger(expression, timezone=zone_name)
            current = change - timedelta(hours=3)
            reference = _reference_fixed if fixed else _reference_wildcard
            for _ in range(3):
                expected = reference(matches, zone, current)
                assert trigger.next_after(current) == expected, (zone_name, expression, current)
                current = expected


def test_offset_change_tables_match_zoneinfo_transition_data() -> None:
    # The engine finds offset changes by probing zoneinfo; check it against the transition
    # list that zoneinfo's pure-Python implementation reads from the tz files (used here as
    # an oracle only), in wartime years, where changes come closest together, and today.
    from zoneinfo import _zoneinfo, available_timezones

    from goatbeat.core.cron import _year_transitions

    years = [*range(1939, 1947), *range(2024, 2031)]
    checked = 0
    for key in sorted(available_timezones()):
        reference_zone = _zoneinfo.ZoneInfo.no_cache(key)
        previous = reference_zone._tti_before.utcoff if reference_zone._tti_before else None
        changes: list[tuple[int, int]] = []
        for instant, info in zip(reference_zone._trans_utc, reference_zone._ttinfos, strict=True):
            if info.utcoff != previous:
                changes.append((instant, int(info.utcoff.total_seconds())))
                previous = info.utcoff
        if not reference_zone._trans_utc:
            continue
        last_listed = datetime.fromtimestamp(reference_zone._trans_utc[-1], UTC).year
        for year in years:
            if year >= last_listed:
                break  # later changes come from the zone's rule string, not the list
            start, end, times, offsets, _ = _year_transitions(ZoneInfo(key), year)
            expected = [(t, o) for t, o in changes if start <= t < end]
            assert list(zip(times, offsets, strict=True)) == expected, (key, year)
            checked += 1
    assert checked > 1000
