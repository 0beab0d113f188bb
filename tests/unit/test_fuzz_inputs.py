"""Hostile input: whatever users type into settings, admin forms or schedule declarations,
goatbeat answers with a documented ValueError subclass (InvalidValue / ConfigError) or a valid
value, never another exception and never a hang. (Cron expressions are fuzzed in the cron
tests.)"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goatbeat.core.config import KEYS, Settings, parse_settings
from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import ConfigError, InvalidDuration, InvalidValue
from goatbeat.core.misfire import plan
from goatbeat.core.model import MisfirePolicy, Routing, Schedule
from goatbeat.core.timeutil import get_zone, parse_instant
from goatbeat.core.triggers import IntervalTrigger, OnceTrigger, trigger_from_spec

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TEN_YEARS = timedelta(days=3650)


def past_repr_limit(sign: int) -> int:
    """An int too long for repr() (sys.get_int_max_str_digits), as JSON decoders can produce."""
    return sign * 10**5000


# Values of every type a decoded JSON/TOML/YAML document or a careless caller can produce.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([-1, 1]).map(past_repr_limit),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=10),
    st.datetimes(),
    st.timedeltas(),
)
json_ish = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.sets(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
        st.dictionaries(st.integers() | st.booleans() | st.none(), children, max_size=3),
    ),
    max_leaves=12,
)

duration_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="0123456789.smhdw -+e_", max_size=16),
    st.from_regex(r"\A\s?(\d{1,12}(\.\d{0,4})?(ms|w|d|h|m|s)\s?){1,4}\Z"),
)


# --- durations --------------------------------------------------------------------------------


@FUZZ
@given(st.one_of(duration_text, scalars))
def test_parse_duration_returns_a_bounded_duration_or_invalid_duration(value: object) -> None:
    try:
        result = parse_duration(value, field="fuzz")
    except InvalidDuration as exc:
        assert exc.field == "fuzz"
        assert str(exc).startswith("fuzz: ")
        return
    assert isinstance(result, timedelta)
    assert timedelta(0) <= result <= TEN_YEARS
    assert parse_duration(format_duration(result)) == result


# --- settings ---------------------------------------------------------------------------------

setting_values = st.one_of(
    duration_text,
    scalars,
    st.sampled_from(["UTC", "Europe/Paris", "30s", "10s", "1h30m", "web-1", "default"]),
    st.integers(-5, 200_000),
)
setting_keys = st.one_of(
    st.sampled_from(KEYS), st.text(max_size=12), st.integers(), st.tuples(st.integers())
)


@FUZZ
@given(st.dictionaries(setting_keys, setting_values, max_size=10))
def test_parse_settings_returns_settings_or_one_config_error(raw: dict[Any, Any]) -> None:
    try:
        result = parse_settings(raw)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError must say what is wrong"
        known = {k for k in raw if k in KEYS}
        unknown = [k for k in raw if k not in KEYS]
        # Every unknown key is reported, each problem on its own line of the list.
        assert len(exc.problems) >= len(unknown)
        # The lease comparison may name a default it compared against.
        labels = {*known, "lease_renew_interval", *map(str, unknown), *map(repr, unknown)}
        for problem in exc.problems:
            assert any(problem.startswith(f"{label}: ") for label in labels), problem
        return
    assert isinstance(result, Settings)
    assert set(raw) <= set(KEYS)
    assert result.lease_renew_interval < result.lease_ttl


@FUZZ
@given(json_ish)
def test_parse_settings_rejects_any_non_mapping_with_config_error(raw: object) -> None:
    if raw is None or isinstance(raw, dict):
        return  # None means "no GOATBEAT setting": every default
    with pytest.raises(ConfigError):
        parse_settings(raw)  # type: ignore[arg-type]


# --- schedules: JSON-ish args and kwargs, and every other field --------------------------------

TRIGGER = IntervalTrigger(every="1m")


def _round_trips(value: Any) -> bool:
    return bool(json.loads(json.dumps(value)) == _as_json_lists(value))


def _as_json_lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_json_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json_lists(v) for k, v in value.items()}
    return value


@FUZZ
@given(args=json_ish, kwargs=json_ish)
def test_schedule_args_are_json_that_round_trips_or_invalid_value(args: Any, kwargs: Any) -> None:
    try:
        schedule = Schedule(name="fuzz", task="app.fuzz", trigger=TRIGGER, args=args, kwargs=kwargs)
    except InvalidValue as exc:
        assert exc.field in ("args", "kwargs")
        assert str(exc).startswith(f"{exc.field}: ")
        return
    # Accepted means stored and sent unchanged: nothing is silently altered by JSON.
    assert _round_trips(list(schedule.args))
    assert _round_trips(dict(schedule.kwargs))
    assert json.loads(json.dumps(schedule.definition())) == schedule.definition()


@FUZZ
@given(
    name=st.one_of(st.text(max_size=30), scalars),
    task=st.one_of(st.text(max_size=30), scalars),
    misfire=st.one_of(st.sampled_from([p.value for p in MisfirePolicy]), scalars),
    grace=st.one_of(st.timedeltas(), scalars),
    limit=st.one_of(st.integers(-5, 200_000), scalars),
    start_at=st.one_of(st.none(), st.datetimes(timezones=st.timezones()), scalars),
    routing=st.dictionaries(
        st.sampled_from(
            ["queue", "exchange", "routing_key", "priority", "expires", "headers", "x"]
        ),
        json_ish,
        max_size=3,
    ),
)
def test_any_schedule_field_is_accepted_or_rejected_with_invalid_value(
    name: Any, task: Any, misfire: Any, grace: Any, limit: Any, start_at: Any, routing: Any
) -> None:
    try:
        schedule = Schedule(
            name=name,
            task=task,
            trigger=TRIGGER,
            misfire=misfire,
            misfire_grace=grace,
            catch_up_limit=limit,
            start_at=start_at,
            routing=Routing.from_dict(routing),
        )
    except InvalidValue as exc:
        assert str(exc).startswith(f"{exc.field}: ")
        return
    assert schedule.start_at is None or schedule.start_at.tzinfo is UTC
    json.dumps(schedule.definition())


@FUZZ
@given(
    grace=st.timedeltas(min_value=timedelta(0)),
    limit=st.integers(1, 100_000),
    policy=st.sampled_from(list(MisfirePolicy)),
    every_ms=st.integers(1, 10**10),
    first=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    outage=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=365 * 50)),
)
def test_plan_never_raises_for_valid_schedules(
    grace: timedelta,
    limit: int,
    policy: MisfirePolicy,
    every_ms: int,
    first: datetime,
    outage: timedelta,
) -> None:
    schedule = Schedule(
        name="fuzz",
        task="app.fuzz",
        trigger=IntervalTrigger(
            every=timedelta(milliseconds=every_ms), anchor=first, allow_subsecond=True
        ),
        misfire=policy,
        misfire_grace=grace,
        catch_up_limit=limit,
        next_run_at=first,
    )
    try:
        now = first + outage
    except OverflowError:
        return
    result = plan(schedule, now)
    assert result.next_run_at is None or result.next_run_at > now
    assert all(first <= t <= now for t in result.run_at)


# --- instants, zones, trigger specs -----------------------------------------------------------


@FUZZ
@given(st.one_of(st.text(max_size=40), scalars, st.datetimes(timezones=st.timezones())))
def test_parse_instant_returns_aware_utc_or_invalid_value(value: object) -> None:
    try:
        result = parse_instant(value, "at")
    except InvalidValue as exc:
        assert exc.field == "at"
        return
    assert result.tzinfo is UTC


@FUZZ
@given(st.one_of(st.text(max_size=40), st.text(alphabet="abcAZ/_-.+0\x00", max_size=30), scalars))
def test_get_zone_returns_a_zone_or_invalid_timezone(name: object) -> None:
    try:
        zone = get_zone(name, "timezone")
    except InvalidValue as exc:
        assert exc.field == "timezone"
        return
    assert str(zone) == name


@FUZZ
@given(
    st.one_of(
        json_ish,
        st.fixed_dictionaries(
            {"kind": st.sampled_from(["interval", "once", "cron", "solar", "weekly"])},
            optional={
                "every": json_ish | duration_text,
                "anchor": json_ish,
                "at": json_ish | st.sampled_from(["2027-01-01T09:00:00Z", "2027-01-01"]),
                "expression": json_ish | st.sampled_from(["* * * * *", "0 9 * * 8"]),
                "timezone": json_ish | st.sampled_from(["UTC", "Europe/Paris", "Nowhere"]),
                "event": json_ish | st.sampled_from(["sunrise", "noon"]),
                "latitude": json_ish,
                "longitude": json_ish,
            },
        ),
    )
)
def test_trigger_from_spec_rebuilds_or_raises_invalid_value(spec: Any) -> None:
    try:
        trigger = trigger_from_spec(spec)
    except InvalidValue:
        return
    assert trigger_from_spec(json.loads(json.dumps(trigger.to_spec()))) == trigger


@FUZZ
@given(st.one_of(scalars, duration_text), st.one_of(st.none(), scalars))
def test_interval_and_once_triggers_accept_or_raise_invalid_value(every: Any, at: Any) -> None:
    try:
        trigger = IntervalTrigger(every=every)
    except InvalidValue as exc:
        assert exc.field == "every"
    else:
        assert trigger.every >= timedelta(seconds=1)  # shorter needs allow_subsecond=True
        assert math.isfinite(trigger.every.total_seconds())
    try:
        OnceTrigger(at=at)
    except InvalidValue as exc:
        assert exc.field == "at"
