"""Settings parsing: every problem reported at once, nothing silently defaulted."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest

from goatbeat.core.config import KEYS, Settings, default_scheduler_id, parse_settings
from goatbeat.core.errors import ConfigError


def problems_of(raw: object, **kw: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_settings(raw, **kw)  # type: ignore[arg-type]
    error = info.value
    assert isinstance(error, ValueError)
    # The message carries every problem, so a traceback alone is enough to fix them all.
    for problem in error.problems:
        assert problem in str(error)
    return error.problems


def test_no_settings_means_the_documented_defaults() -> None:
    raws: list[dict[str, object] | None] = [None, {}]
    for raw in raws:
        settings = parse_settings(raw)
        assert settings.database == "default"
        assert settings.timezone == "UTC"
        assert settings.lease_ttl == timedelta(seconds=30)
        assert settings.lease_renew_interval == timedelta(seconds=10)
        assert settings.max_sleep == timedelta(seconds=60)
        assert settings.claim_ahead == timedelta(milliseconds=250)
        assert (settings.batch_size, settings.max_submit_retries) == (500, 5)


def test_the_documented_example_parses() -> None:
    settings = parse_settings(
        {
            "database": "default",
            "timezone": "Europe/Paris",
            "lease_ttl": "30s",
            "lease_renew_interval": "10s",
            "max_sleep": "60s",
            "batch_size": 500,
            "max_submit_retries": 5,
            "scheduler_id": "web-1",
        }
    )
    assert settings == Settings(
        database="default",
        timezone="Europe/Paris",
        lease_ttl=timedelta(seconds=30),
        lease_renew_interval=timedelta(seconds=10),
        max_sleep=timedelta(seconds=60),
        batch_size=500,
        max_submit_retries=5,
        scheduler_id="web-1",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(minutes=90)),
    ],
)
def test_durations_are_written_like_people_write_them(text: str, expected: timedelta) -> None:
    assert parse_settings({"max_sleep": text}).max_sleep == expected
    assert parse_settings({"lease_ttl": text, "lease_renew_interval": "1s"}).lease_ttl == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, timedelta(0)),
        ("0s", timedelta(0)),
        ("100ms", timedelta(milliseconds=100)),
        ("5s", timedelta(seconds=5)),
    ],
)
def test_claim_ahead_accepts_zero_to_five_seconds(value: object, expected: timedelta) -> None:
    assert parse_settings({"claim_ahead": value}).claim_ahead == expected


@pytest.mark.parametrize(
    ("value", "reason"), [("6s", "longer than 5s"), (-1, "negative"), ("-1s", "not a duration")]
)
def test_claim_ahead_outside_its_range_is_named_with_its_value(value: object, reason: str) -> None:
    (problem,) = problems_of({"claim_ahead": value})
    assert problem.startswith("claim_ahead:")
    assert repr(value) in problem and reason in problem


def test_numbers_are_seconds() -> None:
    assert parse_settings({"lease_ttl": 45}).lease_ttl == timedelta(seconds=45)


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(
        {
            "lease_ttl": "soon",
            "max_sleep": "-5s",
            "batch_size": 0,
            "max_submit_retries": "5",
            "timezone": "Mars/Olympus",
            "scheduler_id": "",
            "database": 7,
        }
    )
    keys = sorted(p.split(":", 1)[0] for p in problems)
    assert keys == sorted(
        [
            "lease_ttl",
            "max_sleep",
            "batch_size",
            "max_submit_retries",
            "timezone",
            "scheduler_id",
            "database",
        ]
    )
    by_key = {p.split(":", 1)[0]: p for p in problems}
    # Each message names the key and shows the value as written.
    assert "'soon'" in by_key["lease_ttl"]
    assert "'-5s'" in by_key["max_sleep"]
    assert "0" in by_key["batch_size"]
    assert "'5'" in by_key["max_submit_retries"]
    assert "'Mars/Olympus'" in by_key["timezone"]
    assert "''" in by_key["scheduler_id"]
    assert "7" in by_key["database"]


def test_unknown_keys_are_errors_listed_with_the_known_ones() -> None:
    problems = problems_of({"lease_tll": "30s", "LEASE_TTL": "30s"})
    assert len(problems) == 2
    assert {p.split(":", 1)[0] for p in problems} == {"lease_tll", "LEASE_TTL"}
    for problem in problems:
        assert "unknown setting" in problem
        assert all(key in problem for key in KEYS)


def test_unknown_keys_of_mixed_types_are_all_reported() -> None:
    problems = problems_of({1: "x", "typo": 2, ("a",): 3})
    assert len(problems) == 3
    assert any(p.startswith("1: ") for p in problems)
    assert any(p.startswith("typo: ") for p in problems)
    assert any(p.startswith("('a',): ") for p in problems)


def test_unknown_keys_and_bad_values_are_reported_together() -> None:
    problems = problems_of({"batch_size": -1, "colour": "blue"})
    assert [p.split(":", 1)[0] for p in problems] == ["colour", "batch_size"]


def test_renew_interval_must_be_below_lease_ttl() -> None:
    (problem,) = problems_of({"lease_ttl": "10s", "lease_renew_interval": "10s"})
    assert problem.startswith("lease_renew_interval: ")
    assert "10s" in problem and "lease_ttl" in problem


def test_a_short_lease_ttl_is_compared_with_the_default_renew_interval() -> None:
    (problem,) = problems_of({"lease_ttl": "5s"})  # default renew interval is 10 s
    assert problem == "lease_renew_interval: 10s must be below lease_ttl 5s"


def test_a_long_renew_interval_is_compared_with_the_default_lease_ttl() -> None:
    (problem,) = problems_of({"lease_renew_interval": "1m"})  # default lease_ttl is 30 s
    assert problem == "lease_renew_interval: 60s must be below lease_ttl 30s"


def test_the_lease_comparison_is_skipped_when_a_lease_value_is_itself_invalid() -> None:
    (problem,) = problems_of({"lease_ttl": "x", "lease_renew_interval": "1m"})
    assert problem.startswith("lease_ttl: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lease_ttl", "500ms"),  # below the 1 s floor
        ("batch_size", True),
        ("batch_size", 100_001),
        ("batch_size", 2.0),
        ("max_submit_retries", -1),
        ("scheduler_id", "x" * 256),
        ("database", "   "),
        ("timezone", " UTC"),
        ("timezone", None),
    ],
    ids=repr,
)
def test_each_out_of_range_value_names_its_key(key: str, value: object) -> None:
    (problem,) = problems_of({key: value})
    assert problem.startswith(f"{key}: ")


def test_defaults_are_merged_under_the_raw_settings_and_validated_too() -> None:
    settings = parse_settings({"batch_size": 10}, defaults={"timezone": "Europe/Paris"})
    assert (settings.batch_size, settings.timezone) == (10, "Europe/Paris")
    assert (
        parse_settings({"timezone": "UTC"}, defaults={"timezone": "Asia/Tokyo"}).timezone == "UTC"
    )
    (problem,) = problems_of({}, defaults={"timezone": "Nowhere/Town"})
    assert problem.startswith("timezone: ")


@pytest.mark.parametrize("raw", [["lease_ttl", "30s"], "lease_ttl=30s", 42])
def test_settings_that_are_not_a_mapping_are_rejected(raw: object) -> None:
    (problem,) = problems_of(raw)
    assert type(raw).__name__ in problem


def test_default_scheduler_id_is_host_pid_random_and_unique() -> None:
    first, second = default_scheduler_id(), default_scheduler_id()
    assert first != second
    assert re.fullmatch(rf".+:{os.getpid()}:[0-9a-f]{{6}}", first)
    assert parse_settings({}).scheduler_id != parse_settings({}).scheduler_id


def test_prune_on_publish_is_off_by_default_and_only_a_boolean() -> None:
    assert parse_settings({}).prune_on_publish is False
    assert parse_settings({"prune_on_publish": True}).prune_on_publish is True
    with pytest.raises(ConfigError) as exc:
        parse_settings({"prune_on_publish": "yes"})
    assert str(exc.value.problems[0]) == "prune_on_publish: 'yes' is not True or False"


@pytest.mark.parametrize("value", ["²", "١٢", "v2", "-1", True])
def test_a_release_that_is_not_a_whole_number_is_one_config_error(value: object) -> None:
    # "²" and Arabic-Indic digits pass str.isdigit() but not int(): a bare ValueError (fuzzing).
    with pytest.raises(ConfigError, match=r"release: .* is not a release number"):
        parse_settings({"release": value})


def test_a_release_written_as_digits_is_its_number() -> None:
    assert parse_settings({"release": " 42 "}).release == 42
