"""Schedule, Routing and keys: values validated on construction, with errors naming the field."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from goatbeat.core.errors import (
    ConfigError,
    GoatbeatError,
    InvalidCron,
    InvalidDuration,
    InvalidSchedule,
    InvalidTimezone,
    InvalidValue,
)
from goatbeat.core.model import (
    MAX_NAME_LENGTH,
    MisfirePolicy,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
    idempotency_key,
    manual_key,
)
from goatbeat.core.timeutil import get_zone, iso_z, parse_instant
from goatbeat.core.triggers import CronTrigger, IntervalTrigger

PARIS = ZoneInfo("Europe/Paris")
T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def schedule(**kw: Any) -> Schedule:
    base: dict[str, Any] = {
        "name": "daily-report",
        "task": "reports.tasks.generate",
        "trigger": CronTrigger("0 9 * * *", timezone="Europe/Paris"),
    }
    base.update(kw)
    return Schedule(**base)


# --- valid schedules --------------------------------------------------------------------------


def test_a_minimal_schedule_has_the_documented_defaults() -> None:
    s = schedule()
    assert s.misfire is MisfirePolicy.RUN_ONCE
    assert s.misfire_grace == timedelta(seconds=60)
    assert s.catch_up_limit == 100
    assert s.args == () and s.kwargs == {}
    assert s.routing.is_default()
    assert s.enabled and s.source is Source.CODE
    assert s.timezone == "Europe/Paris"


def test_schedules_are_frozen() -> None:
    with pytest.raises(FrozenInstanceError):
        schedule().name = "other"  # type: ignore[misc]


def test_policy_and_source_may_be_given_as_text() -> None:
    s = schedule(misfire="skip", source="django_celery_beat")
    assert s.misfire is MisfirePolicy.SKIP
    assert s.source is Source.DJANGO_CELERY_BEAT


def test_args_and_kwargs_are_copied_so_later_mutation_cannot_leak_in() -> None:
    args = [1, {"a": [2]}]
    kwargs = {"x": 1}
    s = schedule(args=args, kwargs=kwargs)
    args.append(3)
    kwargs["y"] = 2
    assert s.args == (1, {"a": [2]})
    assert s.kwargs == {"x": 1}


def test_datetimes_are_normalised_to_utc() -> None:
    s = schedule(start_at=datetime(2026, 7, 1, 9, tzinfo=PARIS), next_run_at=T0)
    assert s.start_at == datetime(2026, 7, 1, 7, tzinfo=UTC)
    assert s.start_at is not None and s.start_at.tzinfo is UTC


def test_interval_schedules_report_utc_as_their_zone() -> None:
    assert schedule(trigger=IntervalTrigger(every="5m")).timezone == "UTC"


def test_definition_is_json_and_ignores_store_state() -> None:
    a = schedule(args=[1], kwargs={"k": "v"}, routing=Routing(queue="reports"))
    b = a.evolve(next_run_at=T0, version=7, last_status="submitted", id=3)
    assert a.definition() == b.definition()
    assert json.loads(json.dumps(a.definition())) == a.definition()
    assert a.definition() != a.evolve(trigger=CronTrigger("0 10 * * *")).definition()
    assert a.definition() != a.evolve(routing=Routing(queue="other")).definition()


def test_evolve_validates_the_new_values() -> None:
    with pytest.raises(InvalidSchedule, match="catch_up_limit"):
        schedule().evolve(catch_up_limit=0)


# --- first_run_after: start_at / end_at --------------------------------------------------------


def test_first_run_after_is_strictly_after_the_instant() -> None:
    s = schedule(trigger=IntervalTrigger(every="1h"))
    assert s.first_run_after(T0) == T0 + timedelta(hours=1)


def test_first_run_after_can_fire_at_start_at_itself() -> None:
    s = schedule(trigger=IntervalTrigger(every="1h"), start_at=T0)
    assert s.first_run_after(T0 - timedelta(days=3)) == T0


def test_first_run_after_respects_end_at() -> None:
    s = schedule(trigger=IntervalTrigger(every="1h"), end_at=T0)
    assert s.first_run_after(T0 - timedelta(minutes=30)) == T0
    assert s.first_run_after(T0) is None


def test_next_fire_times_start_at_the_planned_run_and_stop_at_end_at() -> None:
    hour = timedelta(hours=1)
    s = schedule(trigger=IntervalTrigger(every="1h"), next_run_at=T0 + hour, end_at=T0 + 3 * hour)
    # The store's plan wins over ``now``; end_at cuts the list short of ``count``.
    assert s.next_fire_times(5, now=T0 - timedelta(days=1)) == [
        T0 + hour,
        T0 + 2 * hour,
        T0 + 3 * hour,
    ]
    assert s.next_fire_times(0, now=T0) == []


def test_next_fire_times_without_a_plan_count_from_now_unless_disabled() -> None:
    s = schedule(trigger=IntervalTrigger(every="1h"))
    assert s.next_fire_times(2, now=T0) == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    assert s.evolve(enabled=False).next_fire_times(2, now=T0) == []


# --- invalid schedules: each error names the field and the value -------------------------------


def _test_id(value: object) -> str:
    """A test id that is the same in every process (no object address): pytest-xdist's
    workers must collect the same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))[:60]


INVALID: list[tuple[str, dict[str, Any]]] = [
    ("name", {"name": ""}),
    ("name", {"name": "   "}),
    ("name", {"name": 42}),
    ("name", {"name": "bad\nname"}),
    ("name", {"name": "x" * (MAX_NAME_LENGTH + 1)}),
    ("task", {"task": ""}),
    ("task", {"task": "reports tasks"}),
    ("task", {"task": None}),
    ("trigger", {"trigger": "0 9 * * *"}),
    ("args", {"args": "abc"}),
    ("args", {"args": {"a": 1}}),
    ("args", {"args": [{1, 2}]}),
    ("args", {"args": [float("nan")]}),
    ("args", {"args": [object()]}),
    ("kwargs", {"kwargs": [("a", 1)]}),
    ("kwargs", {"kwargs": {1: "a"}}),
    ("kwargs", {"kwargs": {"when": datetime(2026, 1, 1, tzinfo=UTC)}}),
    ("kwargs", {"kwargs": {"x": float("inf")}}),
    ("misfire", {"misfire": "sometimes"}),
    ("misfire", {"misfire": None}),
    ("misfire_grace", {"misfire_grace": timedelta(seconds=-1)}),
    ("misfire_grace", {"misfire_grace": 60}),
    ("catch_up_limit", {"catch_up_limit": 0}),
    ("catch_up_limit", {"catch_up_limit": 100_001}),
    ("catch_up_limit", {"catch_up_limit": True}),
    ("catch_up_limit", {"catch_up_limit": 5.0}),
    ("start_at", {"start_at": datetime(2026, 1, 1)}),
    ("start_at", {"start_at": "2026-01-01"}),
    ("next_run_at", {"next_run_at": datetime(2026, 1, 1)}),
    ("end_at", {"start_at": T0, "end_at": T0 - timedelta(seconds=1)}),
    ("source", {"source": "cron"}),
    ("description", {"description": None}),
    ("routing", {"routing": {"queue": "q"}}),
]


@pytest.mark.parametrize(("field", "changes"), INVALID, ids=_test_id)
def test_invalid_fields_raise_invalid_schedule_naming_the_field(
    field: str, changes: dict[str, Any]
) -> None:
    with pytest.raises(InvalidValue) as info:
        schedule(**changes)
    error = info.value
    assert isinstance(error, ValueError) and isinstance(error, GoatbeatError)
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    assert error.value == changes[field] or error.value is changes[field] or field == "args"


# --- Routing ----------------------------------------------------------------------------------


def test_routing_round_trips_through_a_dict() -> None:
    routing = Routing(
        queue="emails",
        exchange="ex",
        routing_key="rk",
        priority=3,
        expires=30.0,
        headers={"trace": "1"},
    )
    assert Routing.from_dict(json.loads(json.dumps(routing.to_dict()))) == routing
    assert Routing.from_dict(None) == Routing()
    assert Routing.from_dict({"headers": None}) == Routing()


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("queue", {"queue": ""}),
        ("queue", {"queue": 5}),
        ("exchange", {"exchange": ""}),
        ("routing_key", {"routing_key": b"rk"}),
        ("priority", {"priority": "high"}),
        ("priority", {"priority": True}),
        ("priority", {"priority": 256}),
        ("expires", {"expires": 0}),
        ("expires", {"expires": float("nan")}),
        ("expires", {"expires": "10s"}),
        ("headers", {"headers": ["a"]}),
        ("headers", {"headers": {"a": {1, 2}}}),
    ],
    ids=repr,
)
def test_invalid_routing_options_name_the_field(field: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidSchedule) as info:
        Routing(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_unknown_routing_options_are_listed() -> None:
    with pytest.raises(InvalidSchedule, match=r"routing: unknown option\(s\) \['colour'\]"):
        Routing.from_dict({"queue": "q", "colour": "blue"})


# --- keys -------------------------------------------------------------------------------------


def test_idempotency_key_is_name_and_utc_instant_with_z() -> None:
    assert idempotency_key("daily-report", T0) == "daily-report:2026-12-01T08:00:00Z"
    paris = T0.astimezone(PARIS)
    assert idempotency_key("daily-report", paris) == "daily-report:2026-12-01T08:00:00Z"
    assert iso_z(T0 + timedelta(microseconds=5)) == "2026-12-01T08:00:00.000005Z"


def test_manual_key_is_distinct_from_the_scheduled_key() -> None:
    assert manual_key("daily-report", T0) == "daily-report:manual:2026-12-01T08:00:00Z"
    assert manual_key("daily-report", T0) != idempotency_key("daily-report", T0)


# --- errors: the hierarchy callers rely on -----------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error_type", "field", "value"),
    [
        (lambda: get_zone("Mars/Olympus"), InvalidTimezone, "timezone", "Mars/Olympus"),
        (lambda: get_zone("../../etc/passwd"), InvalidTimezone, "timezone", "../../etc/passwd"),
        (lambda: get_zone("Europe/Paris\x00"), InvalidTimezone, "timezone", "Europe/Paris\x00"),
        (
            lambda: CronTrigger("0 9 * * *", timezone="Nowhere/Town"),
            InvalidTimezone,
            "timezone",
            "Nowhere/Town",
        ),
        (lambda: CronTrigger("0 9 * * 8"), InvalidCron, "cron", "0 9 * * 8"),
        (lambda: IntervalTrigger(every="soon"), InvalidDuration, "every", "soon"),
        (lambda: schedule(args=[{1}]), InvalidSchedule, "args", None),
        (lambda: parse_instant("yesterday", "start_at"), InvalidValue, "start_at", "yesterday"),
    ],
    ids=["zone", "zone-path", "zone-nul", "cron-zone", "cron", "duration", "json-args", "instant"],
)
def test_invalid_values_are_value_errors_naming_field_and_value(
    call: Callable[[], object], error_type: type[InvalidValue], field: str, value: object
) -> None:
    with pytest.raises(error_type) as info:
        call()
    error = info.value
    assert isinstance(error, ValueError) and isinstance(error, GoatbeatError)
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    if value is not None:
        assert error.value == value
        assert repr(value) in str(error) or str(value) in str(error)


def test_config_error_is_a_value_error_carrying_every_problem() -> None:
    error = ConfigError(["a: bad", "b: worse"])
    assert isinstance(error, ValueError) and isinstance(error, GoatbeatError)
    assert error.problems == ["a: bad", "b: worse"]
    assert "a: bad" in str(error) and "b: worse" in str(error)


def test_parse_instant_accepts_z_and_offsets_and_returns_utc() -> None:
    assert parse_instant("2026-12-01T08:00:00Z", "at") == T0
    assert parse_instant("2026-12-01T09:00:00+01:00", "at") == T0
    with pytest.raises(InvalidValue, match="at: .*naive"):
        parse_instant("2026-12-01T08:00:00", "at")
    with pytest.raises(InvalidValue, match="at: .*out of range"):
        parse_instant("0001-01-01T00:00:00+05:00", "at")


# --- the declaration path (Schedule._declared) ------------------------------------------------


def declared_fields(**kw: Any) -> dict[str, Any]:
    """Every field Schedule._declared takes, at the values Beat passes by default."""
    base: dict[str, Any] = {
        "name": "daily-report",
        "task": "reports.tasks.generate",
        "trigger": CronTrigger("0 9 * * *", timezone="Europe/Paris"),
        "args": [1],
        "kwargs": {},
        "routing": Routing(),
        "misfire": MisfirePolicy.RUN_ONCE,
        "misfire_grace": timedelta(seconds=60),
        "catch_up_limit": 100,
        "start_at": None,
        "end_at": None,
        "one_off": False,
        "description": "",
        "jitter": timedelta(0),
        "overlap": "allow",
        "max_runtime": None,
        "pause_on_failure": None,
        "source": Source.CODE,
        "enabled": True,
    }
    base.update(kw)
    return base


class Tagged(str):
    pass


DECLARED = [
    {},
    {"args": (1, "two", 3.5, None, True, [4, {"five": [6]}])},
    {"args": [{"nested": (1, 2)}]},  # a nested tuple: the constructor's path
    {"args": [2**80, -0.0, 'é\\"', ""]},
    {"kwargs": {"a": {"b": [1, 2.5, None]}, "c": False}},
    {"kwargs": {Tagged("k"): 1}},  # a str subclass as key: the constructor's path
    {"routing": Routing(queue="q", priority=3, headers={"h": 1})},
    {"misfire": "skip", "overlap": "skip", "max_runtime": timedelta(minutes=5)},
    {"misfire": MisfirePolicy.RUN_ALL, "catch_up_limit": 100_000, "pause_on_failure": 1000},
    {"misfire_grace": timedelta(0), "jitter": timedelta(days=1), "one_off": True},
    {"start_at": datetime(2026, 1, 1, 10, tzinfo=PARIS), "end_at": T0},
    {"description": "café", "source": "admin", "enabled": False},
    {"name": " padded name ", "task": "a"},
    {"trigger": IntervalTrigger("1h")},
]


@pytest.mark.parametrize("changes", DECLARED, ids=_test_id)
def test_the_declaration_path_builds_what_the_constructor_builds(changes: dict[str, Any]) -> None:
    fields = declared_fields(**changes)
    given = json.dumps(fields["args"], default=str), json.dumps(fields["kwargs"], default=str)

    fast, slow = Schedule._declared(**fields), Schedule(**fields)

    assert fast == slow
    assert repr(fast) == repr(slow)  # types too: True is not 1, a member is not its value
    for name in Schedule.__slots__:
        assert type(getattr(fast, name)) is type(getattr(slow, name)), name
    # Copies, as the constructor makes: the caller's lists and dicts are not kept.
    dumped = json.dumps(fields["args"], default=str), json.dumps(fields["kwargs"], default=str)
    assert dumped == given
    grow(fields["args"])
    grow(fields["kwargs"])
    assert fast == slow and repr(fast) == repr(slow)


def grow(value: Any) -> None:
    """Append to every list and add a key to every dict inside ``value``."""
    if isinstance(value, (list, tuple)):
        for item in value:
            grow(item)
        if isinstance(value, list):
            value.append("later")
    elif isinstance(value, dict):
        for item in value.values():
            grow(item)
        value["later"] = 1


DECLARED_INVALID = [
    (field, changes)
    for field, changes in INVALID
    if set(changes) <= set(declared_fields()) and field not in ("start_at", "end_at")
] + [
    ("overlap", {"overlap": "never"}),
    ("max_runtime", {"overlap": "skip"}),
    ("max_runtime", {"max_runtime": timedelta(0)}),
    ("jitter", {"jitter": timedelta(days=2)}),
    ("pause_on_failure", {"pause_on_failure": 0}),
    ("pause_on_failure", {"pause_on_failure": True}),
    ("args", {"args": [[[]] * 2] * 2 + [json.loads("[" * 120 + "]" * 120)]}),
    ("name", {"name": "   "}),
]


@pytest.mark.parametrize(("field", "changes"), DECLARED_INVALID, ids=_test_id)
def test_the_declaration_path_refuses_what_the_constructor_refuses(
    field: str, changes: dict[str, Any]
) -> None:
    fields = declared_fields(**changes)
    with pytest.raises(InvalidValue) as slow:
        Schedule(**fields)
    with pytest.raises(InvalidValue) as fast:
        Schedule._declared(**fields)
    assert type(fast.value) is type(slow.value)
    assert (fast.value.field, str(fast.value)) == (slow.value.field, str(slow.value))
    assert fast.value.field == field


def test_plain_declarations_do_not_go_through_the_constructor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = Schedule(**declared_fields(trigger=IntervalTrigger("7m")))

    def refuse(self: Schedule) -> None:
        raise AssertionError("the constructor ran")

    monkeypatch.setattr(Schedule, "__post_init__", refuse)
    assert Schedule._declared(**declared_fields(trigger=IntervalTrigger("7m"))) == expected
    assert Schedule._declared(**declared_fields(misfire="skip", source="admin")) is not None


class Seconds(timedelta):
    pass


class Count(int):
    pass


class Plain(Routing):
    pass


NEAR_DEFAULTS: dict[str, list[Any]] = {
    # Per declared field with a default: values equal to it but of another type, values
    # next to it, and bad ones. Each goes through its rule: only the default itself skips it.
    "args": [(), [], [[]], ("",), Tagged("")],
    "kwargs": [{}, {"": None}, {Tagged(""): 1}, [], None],
    "routing": [Routing(), Plain(), Routing(headers={"": None}), None, {}],
    "misfire": [MisfirePolicy.RUN_ONCE, "run_once", MisfirePolicy.SKIP, "RUN_ONCE", None],
    "misfire_grace": [timedelta(seconds=60), Seconds(seconds=60), 60, 60.0, timedelta(-1)],
    "catch_up_limit": [100, 100.0, Count(100), True, 0, 101],
    "start_at": [None, T0, datetime(2026, 1, 1), "2026-01-01T00:00:00Z", 0],
    "end_at": [None, T0, datetime(2026, 1, 1), 0],
    "source": [Source.CODE, "code", Source.ADMIN, "CODE", None],
    "description": ["", Tagged(""), "x", None, 0],
    "jitter": [timedelta(0), Seconds(0), 0, -0.0, timedelta(days=2)],
    "overlap": ["allow", OverlapPolicy.ALLOW, OverlapPolicy.SKIP, "ALLOW", None],
    "max_runtime": [None, timedelta(0), Seconds(1), 0, False],
    "pause_on_failure": [None, 0, 1, Count(1), True, 1.0],
}


def _built(build: Callable[..., Schedule], fields: dict[str, Any]) -> Any:
    try:
        return build(**fields)
    except InvalidValue as exc:
        return type(exc), exc.field, str(exc)


@pytest.mark.parametrize(
    ("field", "value"),
    [(f, v) for f, values in NEAR_DEFAULTS.items() for v in values],
    ids=lambda v: repr(v)[:40],
)
def test_a_declared_field_at_or_next_to_its_default_builds_what_the_constructor_builds(
    field: str, value: Any
) -> None:
    fast = _built(Schedule._declared, declared_fields(**{field: value}))
    slow = _built(Schedule, declared_fields(**{field: value}))
    assert fast == slow
    assert repr(fast) == repr(slow)
    if isinstance(slow, Schedule):
        for name in Schedule.__slots__:
            assert type(getattr(fast, name)) is type(getattr(slow, name)), name


def test_the_default_kwargs_of_a_declaration_are_its_own_empty_dict() -> None:
    given: dict[str, Any] = {}
    one = Schedule._declared(**declared_fields(kwargs=given))
    two = Schedule._declared(**declared_fields(kwargs=given))
    assert one.kwargs == {} and one.kwargs is not given and one.kwargs is not two.kwargs
    given["later"] = 1
    assert one.kwargs == {} and two.kwargs == {}


def test_a_declaration_at_the_defaults_runs_only_the_rules_of_the_fields_it_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from goatbeat.core import model

    ran: list[str] = []

    def counted(name: str, normalise: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def run(value: Any) -> Any:
            ran.append(name)
            return normalise(value)

        return run

    monkeypatch.setattr(
        model,
        "_DECLARED_NORMALISERS",
        tuple(
            counted(n, f)
            for n, f in zip(model._DECLARED_RULES, model._DECLARED_NORMALISERS, strict=True)
        ),
    )
    Schedule._declared(**declared_fields(overlap=OverlapPolicy.ALLOW))
    # The first of its trigger class went through the protocol check; the next ones do not.
    assert ran == ["name", "task", "trigger", "args"] or ran == ["name", "task", "args"]
    ran.clear()
    Schedule._declared(**declared_fields(overlap=OverlapPolicy.ALLOW))
    assert ran == ["name", "task", "args"]
    ran.clear()
    Schedule._declared(**declared_fields(overlap="allow", jitter=timedelta(seconds=1)))
    assert ran == ["name", "task", "args", "jitter", "overlap"]
    ran.clear()
    Schedule._declared(**declared_fields(routing=Plain(), source="code"))
    assert ran == ["name", "task", "args", "routing", "source", "overlap"]


def test_what_a_rule_keeps_whatever_its_value_it_keeps_as_it_is() -> None:
    from goatbeat.core.model import FIELD_RULES
    from goatbeat.core.triggers import OnceTrigger

    examples = [
        IntervalTrigger("1h"),
        CronTrigger("0 9 * * *", timezone="Europe/Paris"),
        OnceTrigger(T0),
        Routing(queue="q", priority=3, headers={"h": [1]}, expires=5.0),
        Routing(),
    ]
    kept = {name: rule.kept for name, rule in FIELD_RULES.items() if rule.kept}
    assert set(kept) == {"trigger", "routing"}
    Schedule(**declared_fields(trigger=examples[0]))  # a trigger class is known once checked
    Schedule(**declared_fields(trigger=examples[1]))
    Schedule(**declared_fields(trigger=examples[2]))
    # Other tests may have made more trigger classes known (the set is the process's): the
    # examples' classes must be among them, and each example is kept as it is.
    assert {IntervalTrigger, CronTrigger, OnceTrigger} <= set(kept["trigger"])
    assert Routing in kept["routing"]
    for name, types in kept.items():
        values = [v for v in examples if type(v) in types]
        assert values, name
        for value in values:
            assert FIELD_RULES[name].normalise(value) is value, (name, value)
        # Nothing a rule refuses or converts is kept.
        assert dict not in types and str not in types and type(None) not in types


def test_each_checked_field_has_one_rule_that_its_final_value_passes() -> None:
    from goatbeat.core.model import FIELD_RULES

    schedule = Schedule(
        name="ruled",
        task="app.tasks.ping",
        trigger=IntervalTrigger("1h"),
        args=(1, [2]),
        kwargs={"a": {"b": 1}},
        start_at=datetime(2026, 1, 1, 10, tzinfo=PARIS),
        overlap="skip",
        max_runtime=timedelta(minutes=5),
        pause_on_failure=3,
        paused_at=T0,
    )
    assert set(FIELD_RULES) <= set(Schedule.__slots__)
    for name, rule in FIELD_RULES.items():
        value = getattr(schedule, name)
        assert rule.name == name
        again = rule.normalise(value)
        assert again == value and type(again) is type(value), name
        if name in ("args", "kwargs"):  # always a deep copy: the caller keeps its own
            assert again is not value and not rule.check(value)
        else:
            assert rule.check(value), name  # the constructor's output is the final form
