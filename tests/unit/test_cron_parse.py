"""Parsing cron expressions: the accepted dialect, the parsed tables, and the errors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goatbeat.core.cron import MACROS, CronTrigger, parse_cron
from goatbeat.core.errors import InvalidCron, InvalidTimezone


def test_plain_five_fields_parse_into_sorted_tables() -> None:
    fields = parse_cron("5,1,3 9-11 1,15 */4 mon-fri")
    assert fields.seconds == (0,)
    assert fields.minutes == (1, 3, 5)
    assert fields.hours == (9, 10, 11)
    assert fields.days == (1, 15)
    assert fields.months == (1, 5, 9)
    assert fields.weekdays == (1, 2, 3, 4, 5)
    assert not fields.has_seconds


def test_six_fields_put_seconds_first() -> None:
    fields = parse_cron("*/20 0 12 * * *")
    assert fields.has_seconds
    assert fields.seconds == (0, 20, 40)
    assert fields.minutes == (0,)
    assert fields.hours == (12,)


@pytest.mark.parametrize(
    ("minute_field", "expected"),
    [
        ("*/15", (0, 15, 30, 45)),
        ("5-59/15", (5, 20, 35, 50)),
        ("5/15", (5, 20, 35, 50)),
        ("50-59/3,1-2", (1, 2, 50, 53, 56, 59)),
        ("0-10/100", (0,)),
        ("7-7", (7,)),
        ("*/1", tuple(range(60))),
    ],
)
def test_steps_and_ranges_expand(minute_field: str, expected: tuple[int, ...]) -> None:
    assert parse_cron(f"{minute_field} * * * *").minutes == expected


def test_names_are_case_insensitive() -> None:
    upper = parse_cron("0 0 * JAN,Mar-MAY MON-Fri")
    lower = parse_cron("0 0 * jan,mar-may mon-fri")
    assert upper == lower
    assert upper.months == (1, 3, 4, 5)
    assert upper.weekdays == (1, 2, 3, 4, 5)


def test_sunday_is_zero_or_seven() -> None:
    assert parse_cron("0 0 * * 7").weekdays == (0,)
    assert parse_cron("0 0 * * 0").weekdays == (0,)
    assert parse_cron("0 0 * * 5-7").weekdays == (0, 5, 6)
    # "sun" closing a range counts as 7, so the weekend can be written as a range.
    assert parse_cron("0 0 * * fri-sun").weekdays == (0, 5, 6)
    assert parse_cron("0 0 * * sun-tue").weekdays == (0, 1, 2)


def test_day_of_week_steps_run_through_seven_as_in_vixie_cron() -> None:
    assert parse_cron("0 0 * * */2").weekdays == (0, 2, 4, 6)
    # 1/2 is 1-7/2: Monday, Wednesday, Friday and Sunday (7).
    assert parse_cron("0 0 * * 1/2").weekdays == (0, 1, 3, 5)


def test_question_mark_is_a_star_in_the_day_fields() -> None:
    fields = parse_cron("0 0 ? * mon")
    assert fields.dom_star
    assert fields.days == tuple(range(1, 32))
    assert parse_cron("0 0 1 * ?").dow_star


def test_day_extensions_parse() -> None:
    fields = parse_cron("0 0 L,LW,15W,1 * *")
    assert fields.last_day
    assert fields.last_weekday
    assert fields.nearest_weekdays == (15,)
    assert fields.days == (1,)
    dow = parse_cron("0 0 * * 5L,7L,FRI#2,0#5")
    assert dow.last_weekdays_of_month == (0, 5)
    assert dow.nth_weekdays == ((0, 5), (5, 2))
    assert dow.weekdays == ()


@pytest.mark.parametrize(("macro", "expanded"), sorted(MACROS.items()))
def test_macros_mean_their_five_field_expansion(macro: str, expanded: str) -> None:
    assert parse_cron(macro) == parse_cron(expanded)
    assert parse_cron(macro.upper()) == parse_cron(expanded)


def test_macro_expansions_are_the_usual_ones() -> None:
    assert MACROS["@yearly"] == MACROS["@annually"] == "0 0 1 1 *"
    assert MACROS["@monthly"] == "0 0 1 * *"
    assert MACROS["@weekly"] == "0 0 * * 0"
    assert MACROS["@daily"] == MACROS["@midnight"] == "0 0 * * *"
    assert MACROS["@hourly"] == "0 * * * *"


@pytest.mark.parametrize(
    ("expression", "fixed"),
    [
        ("0 9 * * *", True),
        ("30 2 * * *", True),
        ("0,30 1-3 * * *", True),
        ("0-59 0-23 * * *", True),
        ("@daily", True),
        ("*/10 30 2 * * *", True),  # the seconds field does not count
        ("* 2 * * *", False),
        ("*/15 9-17 * * *", False),
        ("0 * * * *", False),
        ("0 */2 * * *", False),
        ("@hourly", False),
    ],
)
def test_fixed_time_means_neither_minute_nor_hour_starts_with_a_star(
    expression: str, fixed: bool
) -> None:
    assert parse_cron(expression).fixed_time is fixed


@pytest.mark.parametrize(
    ("expression", "dom_star", "dow_star"),
    [
        ("0 0 1 * mon", False, False),
        ("0 0 * * mon", True, False),
        ("0 0 */2 * mon", True, False),
        ("0 0 1 * */2", False, True),
        ("0 0 ? * 1", True, False),
        ("0 0 1-31 * mon", False, False),
    ],
)
def test_star_prefix_of_the_day_fields_is_recorded(
    expression: str, dom_star: bool, dow_star: bool
) -> None:
    fields = parse_cron(expression)
    assert (fields.dom_star, fields.dow_star) == (dom_star, dow_star)
    assert fields.days_and is (dom_star or dow_star)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 9 * * 8", "day-of-week: 8 is out of range 0-7 in '0 9 * * 8'"),
        ("x * * * *", "minute: 'x' is not a number or name in 'x * * * *'"),
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("0 24 * * *", "hour: 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month: 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month: 32 is out of range 1-31"),
        ("0 0 * 13 *", "month: 13 is out of range 1-12"),
        ("0 0 * 0 *", "month: 0 is out of range 1-12"),
        ("60 0 0 * * *", "second: 60 is out of range 0-59"),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "got 7"),
        ("*/0 * * * *", "minute: '*/0': the step must be at least 1"),
        ("5-1 * * * *", "minute: the range '5-1' runs backwards"),
        ("0 0 * * fri-mon", "day-of-week: the range 'fri-mon' runs backwards"),
        ("0 0 * dec-jan *", "month: the range 'dec-jan' runs backwards"),
        ("1,,2 * * * *", "minute: empty list item"),
        ("1, * * * *", "minute: empty list item"),
        ("*/x * * * *", "minute: '*/x': the step 'x' is not a number"),
        ("*/ * * * *", "minute: '*/' is missing a step"),
        ("1- * * * *", "minute: a value is missing"),
        ("-1 * * * *", "minute: a value is missing"),
        ("0 0 * mon *", "month: 'mon' is not a number or name"),
        ("0 0 * * jan", "day-of-week: 'jan' is not a number or name"),
        ("0 0 L * L", "day-of-week: 'L' needs a weekday before it"),
        ("0 0 * * 5#6", "day-of-week: '5#6': the occurrence 6 is out of range 1-5"),
        ("0 0 * * 5#0", "the occurrence 0 is out of range 1-5"),
        ("0 0 * * 8#1", "day-of-week: 8 is out of range 0-7"),
        ("0 0 * * 9L", "day-of-week: 9 is out of range 0-7"),
        ("0 0 32W * *", "day-of-month: '32W': 32 is out of range 1-31"),
        ("0 0 0W * *", "out of range 1-31"),
        ("0 0 W * *", "day-of-month: 'W' is not a number or name"),
        ("0 L * * *", "hour: 'L' is not a number or name"),
        ("? * * * *", "minute: '?' is only allowed in day-of-month and day-of-week"),
        ("0 0 1-5W * *", "day-of-month: '5W' is not a number or name"),
        ("0 0 L/2 * *", "day-of-month: 'L' is not a number or name"),
        ("99999999999999999999 * * * *", "minute: 99999999999999999999 is out of range 0-59"),
        ("*/99999999999999999999 * * * *", "the step 99999999999999999999 is too large"),
        ("٣ * * * *", "minute: '٣' is not a number or name"),
        ("@reboot", "'@reboot' is not a supported macro"),
        ("@daily extra", "is not a supported macro"),
        ("0 0 30 2 *", "day-of-month: 30 never occurs in February in '0 0 30 2 *'"),
        ("0 0 31 2,4,6,9,11 *", "31 never occurs in February, April, June, September, November"),
        ("0 0 31 4 */2", "day-of-month: 31 never occurs in April"),
        ("0 0 30,31 feb ?", "never occurs in February"),
        ("0 0 31W 4 *", "never occurs in April"),
        ("0 0 */40 * 1#5", "day-of-month: */40 with day-of-week 1#5 never matches a day"),
    ],
)
def test_invalid_expressions_raise_invalid_cron_naming_field_and_value(
    expression: str, message: str
) -> None:
    with pytest.raises(InvalidCron) as caught:
        parse_cron(expression)
    assert message in str(caught.value)
    assert caught.value.field == "cron"
    assert caught.value.value in (expression, expression.strip())
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 31 4 mon",  # OR: Mondays of April still match
        "0 0 29 2 *",  # leap years
        "0 0 L 2 *",
        "0 0 LW 2 *",
        "0 0 29W 2 *",
        "0 0 * 2 1#5",  # a leap-year February that starts on a Monday
    ],
)
def test_possible_but_rare_days_are_accepted(expression: str) -> None:
    parse_cron(expression)


def test_nearest_weekday_beyond_every_month_length_is_rejected() -> None:
    with pytest.raises(InvalidCron, match="never occurs in February"):
        parse_cron("0 0 30W 2 *")


def test_non_string_expression_is_invalid_cron() -> None:
    with pytest.raises(InvalidCron, match="is not a string"):
        CronTrigger(None)  # type: ignore[arg-type]


def test_unknown_timezone_is_invalid_timezone() -> None:
    with pytest.raises(InvalidTimezone):
        CronTrigger("0 9 * * *", timezone="Mars/Olympus")


def test_whitespace_between_fields_is_free_and_the_expression_is_stripped() -> None:
    trigger = CronTrigger("  0\t9  *  * *\n")
    assert trigger.expression == "0\t9  *  * *"
    assert trigger.fields == parse_cron("0 9 * * *")


_CRONISH = st.text(alphabet="0123456789*/-,?#LWlwjanfebMONsun @x \t", max_size=40)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.text(max_size=40), _CRONISH))
def test_any_string_either_parses_or_raises_invalid_cron(text: str) -> None:
    try:
        trigger = CronTrigger(text)
    except InvalidCron:
        return
    # Whatever parses also searches without error.
    trigger.next_after(datetime(2026, 1, 1, tzinfo=UTC))


_FIELD_ITEMS = st.sampled_from(
    ["*", "?", "*/7", "1-5", "5/15", "0", "7", "L", "LW", "15W", "5L", "5#2", "mon-fri", "jan"]
)
_FIELD = st.lists(_FIELD_ITEMS, min_size=1, max_size=3).map(",".join)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_FIELD, min_size=4, max_size=7).map(" ".join))
def test_field_shaped_strings_either_parse_or_raise_invalid_cron(text: str) -> None:
    try:
        trigger = CronTrigger(text, timezone="Europe/Paris")
    except InvalidCron:
        return
    start = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    found = trigger.next_after(start)
    assert found is None or found > start
