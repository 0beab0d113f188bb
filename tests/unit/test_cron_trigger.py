"""CronTrigger as a value, and the meaning of every syntax extension (hand-checked, in UTC).

Calendar facts used below (2026): Jan 1 is a Thursday, Feb 1 and Mar 1 are Sundays,
Aug 1 a Saturday, Nov 1 a Sunday, May 31 a Sunday, Jan 31 a Saturday, Feb 28 a Saturday.
"""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import InvalidTimezone, InvalidValue


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def chain(trigger: CronTrigger, start: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    current: datetime | None = start
    for _ in range(count):
        assert current is not None
        current = trigger.next_after(current)
        assert current is not None
        found.append(current)
    return found


# -- the value ---------------------------------------------------------------------------


def test_spec_round_trips_and_describes() -> None:
    trigger = CronTrigger("0 9 * * *", timezone="Europe/Paris")
    assert trigger.kind == "cron"
    spec = trigger.to_spec()
    assert spec == {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Paris"}
    assert CronTrigger(spec["expression"], timezone=spec["timezone"]) == trigger
    assert trigger.describe() == "cron 0 9 * * * (Europe/Paris)"
    assert CronTrigger("@daily").describe() == "cron @daily (UTC)"


def test_timezone_defaults_to_utc_and_accepts_a_zoneinfo() -> None:
    assert CronTrigger("0 9 * * *").timezone == "UTC"
    from_zone = CronTrigger("0 9 * * *", timezone=ZoneInfo("America/New_York"))
    assert from_zone.timezone == "America/New_York"
    assert from_zone == CronTrigger("0 9 * * *", timezone="America/New_York")


def test_zoneinfo_without_a_name_is_rejected() -> None:
    with open("/usr/share/zoneinfo/Europe/Paris", "rb") as handle:
        nameless = ZoneInfo.from_file(handle)
    with pytest.raises(InvalidTimezone, match="no IANA name"):
        CronTrigger("0 9 * * *", timezone=nameless)


def test_equal_triggers_hash_alike_and_cannot_be_changed() -> None:
    first = CronTrigger("0 9 * * *", timezone="Europe/Paris")
    second = CronTrigger("0 9 * * *", timezone="Europe/Paris")
    first.next_after(utc(2026, 1, 1))  # fills first's month cache only
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1
    assert first != CronTrigger("0 9 * * *", timezone="Europe/London")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.expression = "0 10 * * *"  # type: ignore[misc]


def test_pickles() -> None:
    trigger = CronTrigger("*/5 9-17 * * mon-fri", timezone="Europe/Paris")
    copy = pickle.loads(pickle.dumps(trigger))  # noqa: S301 - our own bytes
    assert copy == trigger
    start = utc(2026, 3, 2, 10, 2)
    assert copy.next_after(start) == trigger.next_after(start)


def test_naive_instant_is_rejected() -> None:
    with pytest.raises(InvalidValue, match="naive"):
        CronTrigger("* * * * *").next_after(datetime(2026, 1, 1))


def test_result_is_aware_utc_whatever_the_input_zone() -> None:
    trigger = CronTrigger("0 9 * * *", timezone="Asia/Tokyo")
    start = datetime(2026, 1, 1, 12, 0, tzinfo=ZoneInfo("America/Los_Angeles"))
    found = trigger.next_after(start)
    # 12:00 in Los Angeles is 05:00 next day in Tokyo: 09:00 Tokyo that day is 00:00Z.
    assert found == utc(2026, 1, 2, 0, 0)
    assert found is not None and found.tzinfo is UTC


def test_input_in_a_fixed_offset_timezone_is_converted() -> None:
    trigger = CronTrigger("30 * * * *")
    start = datetime(2026, 1, 1, 12, 45, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert trigger.next_after(start) == utc(2026, 1, 1, 7, 30)


def test_next_is_strictly_after_an_exact_match() -> None:
    trigger = CronTrigger("0 9 * * *")
    assert trigger.next_after(utc(2026, 1, 1, 9, 0)) == utc(2026, 1, 2, 9, 0)
    assert trigger.next_after(utc(2026, 1, 1, 8, 59, 59, 999_999)) == utc(2026, 1, 1, 9, 0)
    assert trigger.next_after(utc(2026, 1, 1, 9, 0, 0, 1)) == utc(2026, 1, 2, 9, 0)


def test_every_minute_and_every_second() -> None:
    assert chain(CronTrigger("* * * * *"), utc(2026, 12, 31, 23, 58, 30), 3) == [
        utc(2026, 12, 31, 23, 59),
        utc(2027, 1, 1, 0, 0),
        utc(2027, 1, 1, 0, 1),
    ]
    assert chain(CronTrigger("* * * * * *"), utc(2026, 12, 31, 23, 59, 58, 500), 3) == [
        utc(2026, 12, 31, 23, 59, 59),
        utc(2027, 1, 1, 0, 0, 0),
        utc(2027, 1, 1, 0, 0, 1),
    ]


def test_far_future_ends_without_error() -> None:
    trigger = CronTrigger("0 0 1 1 *")
    assert trigger.next_after(utc(9997, 6, 1)) == utc(9998, 1, 1)
    assert trigger.next_after(utc(9998, 1, 1)) is None
    assert trigger.next_after(datetime.max.replace(tzinfo=UTC)) is None


def test_far_past_start_still_searches() -> None:
    assert CronTrigger("0 0 1 1 *").next_after(datetime.min.replace(tzinfo=UTC)) == utc(3, 1, 1)
    assert CronTrigger("0 12 * * *", timezone="Europe/Paris").next_after(
        utc(1850, 6, 1)
    ) == datetime(1850, 6, 1, 12, 0, tzinfo=ZoneInfo("Europe/Paris"))


def test_rare_dates_are_found_decades_ahead() -> None:
    # February 29th that is also a Sunday: 2004, 2032, 2060, 2088, then 2128 (2100 is no
    # leap year). `*/7` is Sunday (0 and 7) and, starting with a star, ANDs the day fields.
    trigger = CronTrigger("0 0 29 2 */7")
    assert trigger.next_after(utc(2026, 1, 1)) == utc(2032, 2, 29)
    assert trigger.next_after(utc(2088, 3, 1)) == utc(2128, 2, 29)


# -- day fields --------------------------------------------------------------------------


def test_both_day_fields_restricted_means_either() -> None:
    # The 1st of the month or any Monday.
    assert chain(CronTrigger("0 0 1 * mon"), utc(2026, 1, 20), 4) == [
        utc(2026, 1, 26),
        utc(2026, 2, 1),
        utc(2026, 2, 2),
        utc(2026, 2, 9),
    ]


def test_a_day_field_starting_with_a_star_means_both() -> None:
    # Odd days (*/2 from 1) that are Mondays... in Vixie cron, the star prefix makes it AND.
    assert chain(CronTrigger("0 0 */2 * mon"), utc(2026, 1, 1), 3) == [
        utc(2026, 1, 5),
        utc(2026, 1, 19),
        utc(2026, 2, 9),
    ]
    # dom 1,14,27 that are Fridays: Feb 27 and Mar 27 2026.
    assert chain(CronTrigger("0 0 */13 * fri"), utc(2026, 2, 1), 2) == [
        utc(2026, 2, 27),
        utc(2026, 3, 27),
    ]
    # A star-prefixed day-of-week (*/5: Sunday and Friday) with a plain day-of-month:
    # the 13th, only when it is a Sunday or a Friday.
    assert CronTrigger("0 0 13 * */5").next_after(utc(2026, 1, 1)) == utc(2026, 2, 13)


def test_question_mark_behaves_as_a_star() -> None:
    assert chain(CronTrigger("0 0 ? * mon"), utc(2026, 1, 1), 2) == [
        utc(2026, 1, 5),
        utc(2026, 1, 12),
    ]
    assert CronTrigger("0 0 15 * ?").next_after(utc(2026, 1, 1)) == utc(2026, 1, 15)


def test_sunday_as_seven_and_names() -> None:
    expected = [utc(2026, 1, 4), utc(2026, 1, 11)]
    for dow in ("0", "7", "sun", "SUN", "Sun"):
        assert chain(CronTrigger(f"0 0 * * {dow}"), utc(2026, 1, 1), 2) == expected
    assert chain(CronTrigger("0 9 * FEB,jul Mon-Fri"), utc(2026, 1, 31), 2) == [
        utc(2026, 2, 2, 9),
        utc(2026, 2, 3, 9),
    ]
    assert CronTrigger("0 0 * * sat-sun").next_after(utc(2026, 1, 1)) == utc(2026, 1, 3)


def test_last_day_of_month() -> None:
    assert chain(CronTrigger("0 0 L * *"), utc(2026, 2, 10), 3) == [
        utc(2026, 2, 28),
        utc(2026, 3, 31),
        utc(2026, 4, 30),
    ]
    assert CronTrigger("0 0 L 2 *").next_after(utc(2028, 1, 1)) == utc(2028, 2, 29)


def test_last_weekday_of_month() -> None:
    # Jan 31 is a Saturday -> Fri 30; Feb 28 a Saturday -> Fri 27; Mar 31 a Tuesday;
    # May 31 a Sunday -> Fri 29.
    assert chain(CronTrigger("0 0 LW * *"), utc(2026, 1, 1), 5) == [
        utc(2026, 1, 30),
        utc(2026, 2, 27),
        utc(2026, 3, 31),
        utc(2026, 4, 30),
        utc(2026, 5, 29),
    ]


def test_nearest_weekday_does_not_leave_the_month() -> None:
    # 15th: Thu Jan 15; Sun Feb 15 -> Mon 16; Sun Mar 15 -> Mon 16; Wed Apr 15; Fri May 15;
    # Mon Jun 15; Wed Jul 15; Sat Aug 15 -> Fri 14.
    assert chain(CronTrigger("0 0 15W * *"), utc(2026, 1, 1), 8) == [
        utc(2026, 1, 15),
        utc(2026, 2, 16),
        utc(2026, 3, 16),
        utc(2026, 4, 15),
        utc(2026, 5, 15),
        utc(2026, 6, 15),
        utc(2026, 7, 15),
        utc(2026, 8, 14),
    ]
    # Sat Aug 1 -> Mon Aug 3, not Fri Jul 31; Sun Nov 1 -> Mon Nov 2.
    assert CronTrigger("0 0 1W 8 *").next_after(utc(2026, 1, 1)) == utc(2026, 8, 3)
    assert CronTrigger("0 0 1W 11 *").next_after(utc(2026, 1, 1)) == utc(2026, 11, 2)
    # Sun May 31 -> Fri May 29, not Mon Jun 1; months without a 31st never match.
    assert CronTrigger("0 0 31W * *").next_after(utc(2026, 4, 1)) == utc(2026, 5, 29)
    assert CronTrigger("0 0 31W * *").next_after(utc(2026, 1, 1)) == utc(2026, 1, 30)


def test_last_given_weekday_of_month() -> None:
    assert chain(CronTrigger("0 12 * * 5L"), utc(2026, 1, 1), 4) == [
        utc(2026, 1, 30, 12),
        utc(2026, 2, 27, 12),
        utc(2026, 3, 27, 12),
        utc(2026, 4, 24, 12),
    ]
    # Sunday as 0L or 7L: the last Sunday of January 2026 is the 25th.
    assert CronTrigger("0 0 * * 7L").next_after(utc(2026, 1, 1)) == utc(2026, 1, 25)
    assert CronTrigger("0 0 * * 0L").next_after(utc(2026, 1, 1)) == utc(2026, 1, 25)


def test_nth_weekday_of_month() -> None:
    assert chain(CronTrigger("0 12 * * 5#2"), utc(2026, 1, 1), 3) == [
        utc(2026, 1, 9, 12),
        utc(2026, 2, 13, 12),
        utc(2026, 3, 13, 12),
    ]
    # A fifth Monday: none in January (5..26) or February (2..23); March 30.
    assert CronTrigger("0 0 * * MON#5").next_after(utc(2026, 1, 1)) == utc(2026, 3, 30)


def test_extensions_combine_in_lists() -> None:
    # The 10th, the last day, and (OR, both fields restricted) every second Friday.
    assert chain(CronTrigger("0 0 10,L * 5#2"), utc(2026, 1, 1), 5) == [
        utc(2026, 1, 9),
        utc(2026, 1, 10),
        utc(2026, 1, 31),
        utc(2026, 2, 10),
        utc(2026, 2, 13),
    ]


# -- time fields, seconds and macros -----------------------------------------------------


def test_steps_ranges_and_lists_in_time_fields() -> None:
    assert chain(CronTrigger("*/15 9-10 * * *"), utc(2026, 1, 1, 10, 40), 3) == [
        utc(2026, 1, 1, 10, 45),
        utc(2026, 1, 2, 9, 0),
        utc(2026, 1, 2, 9, 15),
    ]
    assert chain(CronTrigger("5/20 * * * *"), utc(2026, 1, 1, 0, 0), 3) == [
        utc(2026, 1, 1, 0, 5),
        utc(2026, 1, 1, 0, 25),
        utc(2026, 1, 1, 0, 45),
    ]


def test_six_fields_fire_on_seconds() -> None:
    assert chain(CronTrigger("*/20 * * * * *"), utc(2026, 1, 1, 12, 0, 5), 3) == [
        utc(2026, 1, 1, 12, 0, 20),
        utc(2026, 1, 1, 12, 0, 40),
        utc(2026, 1, 1, 12, 1, 0),
    ]
    assert chain(CronTrigger("30 0 9 * * *"), utc(2026, 1, 1, 9, 0, 30), 1) == [
        utc(2026, 1, 2, 9, 0, 30)
    ]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@monthly", utc(2026, 4, 1)),
        ("@weekly", utc(2026, 3, 8)),
        ("@daily", utc(2026, 3, 3)),
        ("@midnight", utc(2026, 3, 3)),
        ("@hourly", utc(2026, 3, 2, 11)),
        ("@DAILY", utc(2026, 3, 3)),
    ],
)
def test_macros(macro: str, expected: datetime) -> None:
    assert CronTrigger(macro).next_after(utc(2026, 3, 2, 10, 30)) == expected
    assert CronTrigger(macro).expression == macro


def test_fixed_offset_zone() -> None:
    # Etc/GMT-5 is UTC+5 (the sign is POSIX's).
    trigger = CronTrigger("0 9 * * *", timezone="Etc/GMT-5")
    assert trigger.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 4)
    assert trigger.next_after(utc(2026, 1, 1, 4)) == utc(2026, 1, 2, 4)
