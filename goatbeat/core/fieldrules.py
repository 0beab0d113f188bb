"""The rules of a schedule's fields, each written once for every door a value comes in by: one
:class:`FieldRule` (a normaliser) per checked field in :data:`FIELD_RULES`, the limits they
hold, and :func:`check_joint`, the rules that join two fields. The constructor, the
declaration fast path (``goatbeat.core.model``) and the stores' row decoder all use them."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.choices import MisfirePolicy, OverlapPolicy, Source
from goatbeat.core.errors import InvalidSchedule, InvalidValue, short_repr
from goatbeat.core.jitter import MAX_JITTER
from goatbeat.core.jsonvalues import NOT_PLAIN, check_json, json_form, plain_copy
from goatbeat.core.routing import Routing
from goatbeat.core.timeutil import ensure_aware, to_utc
from goatbeat.core.triggers import Trigger

__all__ = [
    "FieldRule",
    "FIELD_RULES",
    "check_joint",
    "MAX_NAME_LENGTH",
    "MAX_PAUSE_ON_FAILURE",
    "MAX_CATCH_UP_LIMIT",
]

MAX_NAME_LENGTH = 200
MAX_PAUSE_ON_FAILURE = 1000
MAX_CATCH_UP_LIMIT = 100_000

_CONTROL = re.compile(r"[\x00-\x1f]")

_TRIGGER_TYPES: set[type] = set()
"""goatbeat's trigger classes once one of their instances passed the protocol check (an
``isinstance`` against a runtime Protocol inspects every member, every time)."""


def _is_trigger(value: object) -> bool:
    if not isinstance(value, Trigger):
        return False
    if type(value).__module__.startswith("goatbeat."):
        _TRIGGER_TYPES.add(type(value))
    return True


@dataclass(frozen=True, slots=True)
class FieldRule:
    """One field's rule, written once for every door a value comes in by.

    ``normalise(value)`` turns whatever the constructor accepts into the field's final form
    (a tuple of JSON values, a member of the enum, a UTC instant...), or raises
    :class:`~goatbeat.core.errors.InvalidSchedule` naming the field; ``check(value)`` says
    whether ``value`` already is that final form and valid: what ``normalise`` keeps as it
    is. The constructor and the declaration fast path run ``normalise`` on every field; the
    stores' row decoder turns a column into the field's type and runs ``check`` on it
    (``goatbeat.stores.rows``), with messages that name the column's form."""

    name: str
    normalise: Callable[[Any], Any]
    kept: Collection[type] = frozenset()
    """Types every instance of which ``normalise`` keeps as it is (the same object, never
    refused): the declaration path skips the call for a value of exactly one of them. It may
    grow (the trigger classes, once one of their instances passed the protocol check)."""

    def check(self, value: Any) -> bool:
        try:
            return self.normalise(value) is value
        except InvalidValue:
            return False


_ZERO = timedelta(0)
_TASK_NAME = re.compile(r"\S+\Z")  # non-empty, no whitespace at all
_SOURCES: dict[Any, Source] = {s.value: s for s in Source}


def _policy(field: str, kind: type[MisfirePolicy] | type[OverlapPolicy]) -> Callable[[Any], Any]:
    """The normaliser of a policy field: a member of ``kind``, from itself or its value."""
    members: dict[Any, Any] = {p.value: p for p in kind}

    def normalise(value: Any) -> Any:
        if type(value) is kind:
            return value
        policy = members.get(value) if type(value) is str else None
        if policy is not None:
            return policy
        try:
            return kind(value)
        except ValueError:
            raise InvalidSchedule(
                field,
                value,
                f"{short_repr(value)} is not one of {', '.join(p.value for p in kind)}",
            ) from None

    return normalise


# Each normaliser keeps a valid value of the final form as it is (the same object: that is
# what FieldRule.check tests), and tests that case first, as cheaply as it can: the
# declaration path runs these for every schedule a large project declares at its start.


def _name(value: Any) -> Any:
    if (type(value) is not str and not isinstance(value, str)) or not value.strip():
        raise InvalidSchedule("name", value, f"{short_repr(value)} must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidSchedule(
            "name", value, f"{short_repr(value)} is longer than {MAX_NAME_LENGTH}"
        )
    if _CONTROL.search(value):
        raise InvalidSchedule("name", value, f"{short_repr(value)} contains control characters")
    return value


def _task(value: Any) -> Any:
    if (type(value) is str or isinstance(value, str)) and _TASK_NAME.match(value) is not None:
        return value
    raise InvalidSchedule("task", value, f"{short_repr(value)} is not a task name")


def _trigger(value: Any) -> Any:
    if type(value) in _TRIGGER_TYPES or _is_trigger(value):
        return value
    raise InvalidSchedule("trigger", value, f"{short_repr(value)} is not a trigger")


def _args(value: Any) -> tuple[Any, ...]:
    # Stored and sent as JSON, so keep the JSON form: a nested tuple would come back as a
    # list and the schedule would never equal its stored self. Always a deep copy.
    if type(value) is list or type(value) is tuple:
        args = plain_copy(value if type(value) is list else list(value), 0)
        if args is not NOT_PLAIN:
            return tuple(args)
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidSchedule("args", value, f"{short_repr(value)} must be a list")
    check_json("args", list(value))
    return tuple(json_form(list(value)))


def _kwargs(value: Any) -> Any:
    if type(value) is dict:
        kwargs = plain_copy(value, 0)
        if kwargs is not NOT_PLAIN:
            return kwargs
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidSchedule("kwargs", value, f"{short_repr(value)} must be a JSON object")
    check_json("kwargs", dict(value))
    return json_form(dict(value))


def _routing(value: Any) -> Any:
    if type(value) is Routing or isinstance(value, Routing):
        return value
    raise InvalidSchedule("routing", value, f"{short_repr(value)} is not a Routing")


def _grace(value: Any) -> Any:
    if isinstance(value, timedelta) and value >= _ZERO:
        return value
    raise InvalidSchedule("misfire_grace", value, f"{short_repr(value)} must be >= 0")


def _catch_up(value: Any) -> Any:
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        if 1 <= value <= MAX_CATCH_UP_LIMIT:
            return value
    raise InvalidSchedule(
        "catch_up_limit", value, f"{short_repr(value)} is not in 1..{MAX_CATCH_UP_LIMIT}"
    )


def _instant(name: str, *, named: bool = True) -> Callable[[Any], Any]:
    def normalise(value: Any) -> Any:
        if value is None or (type(value) is datetime and value.tzinfo is UTC):
            return value
        aware = ensure_aware(value, name)
        return to_utc(aware, name) if named else to_utc(aware)

    return normalise


def _source(value: Any) -> Source:
    if type(value) is Source:
        return value
    source = _SOURCES.get(value) if type(value) is str else None
    if source is not None:
        return source
    try:
        return Source(value)
    except ValueError:
        raise InvalidSchedule("source", value, f"{short_repr(value)} is not a source") from None


def _text(name: str) -> Callable[[Any], Any]:
    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            return value
        raise InvalidSchedule(name, value, "must be a string")

    return normalise


def _jitter(value: Any) -> Any:
    if isinstance(value, timedelta) and _ZERO <= value <= MAX_JITTER:
        return value
    raise InvalidSchedule("jitter", value, f"{short_repr(value)} is not between 0 and 1 day")


def _max_runtime(value: Any) -> Any:
    if value is None or (isinstance(value, timedelta) and value > _ZERO):
        return value
    raise InvalidSchedule("max_runtime", value, f"{short_repr(value)} must be > 0")


def _pause_on_failure(value: Any) -> Any:
    if value is None:
        return value
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        if 1 <= value <= MAX_PAUSE_ON_FAILURE:
            return value
    raise InvalidSchedule(
        "pause_on_failure",
        value,
        f"{short_repr(value)} is not a number of failures in 1..{MAX_PAUSE_ON_FAILURE}",
    )


def check_joint(
    start_at: datetime | None,
    end_at: datetime | None,
    overlap: OverlapPolicy,
    max_runtime: timedelta | None,
) -> None:
    """The rules that join two fields (the row decoder has them too, naming the column)."""
    if start_at and end_at and end_at < start_at:
        raise InvalidSchedule("end_at", end_at, "end_at is before start_at")
    if overlap is not OverlapPolicy.ALLOW and max_runtime is None:
        raise InvalidSchedule(
            "max_runtime",
            None,
            f"required when overlap is {overlap.value!r}: how long after its "
            "submission a run still counts as running if its worker never reports its "
            "end (e.g. '1h')",
        )


FIELD_RULES: dict[str, FieldRule] = {
    rule.name: rule
    for rule in (
        FieldRule("name", _name),
        FieldRule("task", _task),
        FieldRule("trigger", _trigger, _TRIGGER_TYPES),
        FieldRule("args", _args),
        FieldRule("kwargs", _kwargs),
        FieldRule("routing", _routing, frozenset({Routing})),
        FieldRule("misfire", _policy("misfire", MisfirePolicy)),
        FieldRule("misfire_grace", _grace),
        FieldRule("catch_up_limit", _catch_up),
        FieldRule("start_at", _instant("start_at")),
        FieldRule("end_at", _instant("end_at")),
        FieldRule("next_run_at", _instant("next_run_at")),
        FieldRule("last_run_at", _instant("last_run_at")),
        FieldRule("created_at", _instant("created_at")),
        FieldRule("updated_at", _instant("updated_at")),
        FieldRule("source", _source),
        FieldRule("description", _text("description")),
        FieldRule("jitter", _jitter),
        FieldRule("overlap", _policy("overlap", OverlapPolicy)),
        FieldRule("max_runtime", _max_runtime),
        FieldRule("pause_on_failure", _pause_on_failure),
        FieldRule("paused_at", _instant("paused_at", named=False)),
        FieldRule("pause_note", _text("pause_note")),
    )
}
"""Each checked field of :class:`Schedule` and its rule, in the order the constructor checks
them (a schedule with two bad fields names the same one through every door; the rules that
join two fields, :func:`check_joint`, come after them all). The fields not listed
(``one_off``, ``enabled``, ``id``, the counters...) take their value as given, as before."""
