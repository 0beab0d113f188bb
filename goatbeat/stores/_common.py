"""What every store shares: validation before writing, Schedule <-> row conversion, planning a
claim batch, and notification payloads.

A *row* here is a plain dict keyed by column name holding Python values (JSON columns as
lists/dicts, instants as aware UTC datetimes, booleans as bool). Each store converts between
its own encoding and rows; everything else (what a definition is, what a claim writes) is
decided once, here, so the three stores cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import (
    DamagedRow,
    InvalidSchedule,
    InvalidValue,
    ScheduleNotFound,
    short_repr,
)
from goatbeat.core.jitter import MAX_JITTER, jittered
from goatbeat.core.misfire import Plan, count_instants, instants_between
from goatbeat.core.model import (
    ACTIVE_STATUSES,
    MAX_NAME_LENGTH,
    MAX_PAUSE_ON_FAILURE,
    SCHEDULE_INVALID,
    DamagedSchedule,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    Miss,
    Occurrence,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
    StoredSchedule,
    idempotency_key,
)
from goatbeat.core.solar import SolarTrigger
from goatbeat.core.store import FieldChange, PublishResult, ResumeResult, definition_changes
from goatbeat.core.timeutil import ensure_aware, get_zone, iso_z, to_utc
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
    trigger_from_spec,
)

__all__ = [
    "Planner",
    "SCHEDULE_COLUMNS",
    "DEFINITION_COLUMNS",
    "validate_schedule",
    "validate_batch",
    "schedule_to_row",
    "definition_of",
    "row_definition",
    "schedule_changes",
    "orphans",
    "schedule_from_row",
    "read_schedule",
    "damaged_schedule",
    "trusted_schedule_from_row",
    "decode_due",
    "enabled_values",
    "execution_from_row",
    "occurrence_from_row",
    "decode_pending",
    "ClaimPlan",
    "plan_batch",
    "validate_payload",
    "check_payload",
    "utc",
    "fingerprint",
    "fingerprint_of_text",
    "definition_text",
    "definition_json",
    "Comparison",
    "edited",
    "KEPT_WHEN_NONE",
    "without_kept",
]

Planner = Callable[[Schedule, datetime], Plan]
"""Misfire planning as the stores call it; :func:`goatbeat.core.misfire.plan` unless a test
injects another (to interleave a concurrent edit between plan and write, for instance)."""

DEFINITION_COLUMNS = (
    "task",
    "trigger",
    "timezone",
    "args",
    "kwargs",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "expires",
    "headers",
    "misfire_policy",
    "misfire_grace",
    "catch_up_limit",
    "one_off",
    "start_at",
    "end_at",
    "description",
    "jitter",
    "overlap",
    "max_runtime",
    "pause_on_failure",
)

_LATER_DEFAULTS: dict[str, Any] = {
    "jitter": 0.0,
    "overlap": "allow",
    "max_runtime": None,
    "pause_on_failure": None,
}
"""Definition columns added after fingerprints were first recorded (schema 6), with their
defaults: a fingerprint hashes them only when set, so the ones recorded before stay valid."""

STATE_FIELDS = (
    "enabled",
    "next_run_at",
    "last_run_at",
    "last_status",
    "total_run_count",
    "missed_count",
    "version",
    "created_at",
    "updated_at",
    "paused",
    "paused_at",
    "paused_by",
    "pause_note",
    "skipped_count",
)
"""Columns of a schedule row the store owns (Schedule's state fields)."""

SCHEDULE_COLUMNS = ("id", "name", "source", *DEFINITION_COLUMNS, *STATE_FIELDS)

# Column widths of the schema: checked up front so every store refuses the same values
# (PostgreSQL would fail mid-transaction; SQLite and memory would accept them silently).
_MAX_LENGTHS = {
    "task": 255,
    "queue": 200,
    "exchange": 200,
    "routing_key": 200,
    "timezone": 64,
}


ABANDONED_ERROR = "schedule deleted before this occurrence was submitted"


def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


# NUL escaped by json.dumps, not preceded by an escaped backslash ("\\u0000" is harmless).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain_json(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` already reads back from a JSON column as it is: lists, dicts with
    string keys, strings without NUL, finite floats, exact built-in types only (a subclass,
    a tuple or a NaN goes the long way round, through :func:`json.dumps`)."""
    kind = type(value)
    if kind is str:
        return "\x00" not in value
    if kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= 20:
        return False
    if kind is list:
        for item in value:
            if type(item) is int or (type(item) is str and "\x00" not in item):
                continue
            if not _plain_json(item, depth + 1):
                return False
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) is int or (type(item) is str and "\x00" not in item):
                continue
            if not _plain_json(item, depth + 1):
                return False
        return True
    return False


def _json_normal(field_name: str, value: Any) -> Any:
    """``value`` as it will read back from a JSON column (tuples become lists...)."""
    if _plain_json(value):
        # What a Schedule holds after its own checks: the round trip would change nothing.
        # (Integers too large for PostgreSQL's numeric are refused by Schedule already.)
        return value
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidSchedule(
            field_name, value, f"{short_repr(value)} is not JSON-serialisable: {exc}"
        )
    if "\\u0000" in text and _JSON_NUL.search(text):
        # PostgreSQL's jsonb cannot hold NUL; refuse it in every store alike.
        raise InvalidSchedule(field_name, value, "contains a NUL character")
    return json.loads(text)


def validate_schedule(schedule: Schedule) -> dict[str, Any]:
    """Everything a store needs to be true before it writes ``schedule``; returns its
    definition (:func:`definition_of`).

    Schedule's constructor already validates; this re-checks what the store depends on and
    what the constructor cannot see: the trigger must survive the round trip through its spec
    (a custom trigger, or a spec with an unknown zone, would be unreadable later), JSON fields
    must serialise (frozen dataclasses can be bypassed), and values must fit the columns."""
    if not isinstance(schedule, Schedule):
        raise InvalidSchedule("schedule", schedule, f"{short_repr(schedule)} is not a Schedule")
    if not isinstance(schedule.name, str) or not schedule.name.strip():
        raise InvalidSchedule("name", schedule.name, f"{short_repr(schedule.name)} is not a name")
    if len(schedule.name) > MAX_NAME_LENGTH:
        raise InvalidSchedule("name", schedule.name, f"longer than {MAX_NAME_LENGTH}")
    if not isinstance(schedule.kwargs, Mapping) or not all(
        isinstance(k, str) for k in schedule.kwargs
    ):
        raise InvalidSchedule("kwargs", schedule.kwargs, "must be a JSON object")
    if not isinstance(schedule.routing, Routing):
        raise InvalidSchedule(
            "routing", schedule.routing, f"{short_repr(schedule.routing)} is not a Routing"
        )
    texts = {
        "name": schedule.name,
        "task": schedule.task,
        "description": schedule.description,
        "queue": schedule.routing.queue,
        "exchange": schedule.routing.exchange,
        "routing_key": schedule.routing.routing_key,
        "timezone": schedule.timezone,
    }
    for name, text in texts.items():
        if isinstance(text, str) and "\x00" in text:
            raise InvalidSchedule(name, text, f"{short_repr(text)} contains a NUL character")
        limit = _MAX_LENGTHS.get(name)
        if limit is not None and text is not None and len(text) > limit:
            raise InvalidSchedule(name, text, f"{short_repr(text)} is longer than {limit}")
    trigger = schedule.trigger
    checked = _CHECKED_TRIGGERS.get(id(trigger))
    if checked is not None and checked[0] is trigger:
        return definition_of(schedule, spec=checked[1])
    try:
        raw_spec = trigger.to_spec()
    except InvalidValue:
        raise
    except Exception as exc:  # a foreign trigger object: report it on the field, not a crash
        raise InvalidSchedule("trigger", trigger, f"cannot describe trigger: {exc}")
    definition = definition_of(schedule, spec=raw_spec)
    spec = definition["trigger"]
    rebuilt = trigger_of(spec)  # raises InvalidCron / InvalidTimezone / ... by field
    if _json_normal("trigger", rebuilt.to_spec()) != spec:
        raise InvalidSchedule("trigger", spec, "the trigger does not survive its own spec")
    if type(trigger) in _FROZEN_TRIGGERS:
        if len(_CHECKED_TRIGGERS) >= 4096:
            _CHECKED_TRIGGERS.clear()
        _CHECKED_TRIGGERS[id(trigger)] = (trigger, spec)
    return definition


_FROZEN_TRIGGERS = (CronTrigger, IntervalTrigger, OnceTrigger, CeleryCrontabTrigger, SolarTrigger)
"""goatbeat's own triggers: frozen values whose spec never changes."""

_CHECKED_TRIGGERS: dict[int, tuple[Trigger, Any]] = {}
"""Triggers whose spec survived the round trip, by identity, with their normal spec: a
declaration sharing a trigger object (Beat builds each distinct cron or interval once) is not
checked again. The entry holds the trigger, so its id cannot be reused while it is there."""


OWN_COLUMNS = ("args", "kwargs", "headers")
"""The definition columns a declaration usually has to itself; the others (task, trigger,
routing, policies...) many declarations share (:class:`Comparison`)."""
SHARED_COLUMNS = tuple(c for c in DEFINITION_COLUMNS if c not in OWN_COLUMNS)


class Comparison:
    """A publication's declarations as PostgreSQL compares them with the stored rows
    (``publish_unchanged``), each validated on the way: per declaration ``[name, args, kwargs,
    headers, k]``, where ``k`` indexes :attr:`shared`, the other definition columns, one entry
    per distinct combination of them (a ``schedules.py`` repeats a few tasks, triggers and
    policies many times over), as a list in :data:`SHARED_COLUMNS`' order.

    A declaration is checked as :func:`validate_schedule` checks it: in full (and its definition
    computed) for the first declaration of each combination, and for anything that is not a
    plain Schedule; a declaration sharing a checked combination has only what is its own
    checked (its name, and its JSON values: exact built-in types, no NUL). The combination is
    told by value (the trigger by identity), so two declarations share an entry only when
    the shared columns of their definitions are equal."""

    def __init__(self) -> None:
        self.shared: list[list[Any]] = []
        """The shared columns of each combination, in :data:`SHARED_COLUMNS`' order."""
        self._index: dict[tuple[Any, ...], int] = {}

    def add(self, schedule: Schedule) -> tuple[list[Any], dict[str, Any] | None]:
        """``schedule`` validated (raises InvalidSchedule as :func:`validate_schedule`);
        returns its part of the comparison, and its definition when it was computed (None:
        valid, :func:`validate_schedule` computes it when it is needed)."""
        if type(schedule) is not Schedule:
            return self._added(schedule, None)
        name = schedule.name
        routing = schedule.routing
        key: tuple[Any, ...] | None = None
        if (
            type(name) is str
            and len(name) <= MAX_NAME_LENGTH
            and "\x00" not in name
            and name.strip()
            and type(routing) is Routing
        ):
            args = list(schedule.args)
            kwargs = schedule.kwargs
            headers = routing.headers
            if (
                type(kwargs) is dict
                and type(headers) is dict
                and _plain_json(args)
                and _plain_json(kwargs)
                and _plain_json(headers)
            ):
                key = (
                    schedule.task,
                    id(schedule.trigger),  # alive as long as the schedules being published
                    routing.queue,
                    routing.exchange,
                    routing.routing_key,
                    routing.priority,
                    routing.expires,
                    schedule.misfire,
                    schedule.misfire_grace,
                    schedule.catch_up_limit,
                    schedule.one_off,
                    schedule.start_at,
                    schedule.end_at,
                    schedule.description,
                    schedule.jitter,
                    schedule.overlap,
                    schedule.max_runtime,
                    schedule.pause_on_failure,
                )
                try:
                    known = self._index.get(key)
                except TypeError:  # an unhashable value: not a declaration's
                    key = None
                else:
                    if known is not None:
                        return [name, args, kwargs, headers, known], None
        return self._added(schedule, key)

    def _added(
        self, schedule: Schedule, key: tuple[Any, ...] | None
    ) -> tuple[list[Any], dict[str, Any]]:
        """``schedule`` validated in full, as the first of a combination (``key``: None, a
        combination of its own)."""
        definition = validate_schedule(schedule)
        self.shared.append([definition[c] for c in SHARED_COLUMNS])
        if key is not None:
            self._index[key] = len(self.shared) - 1
        own = [schedule.name, definition["args"], definition["kwargs"], definition["headers"]]
        return [*own, len(self.shared) - 1], definition


def validate_batch(schedules: Sequence[Schedule]) -> list[dict[str, Any]]:
    """Validate a whole publish batch before anything is written (names must be unique);
    returns the definitions, in order."""
    seen: set[str] = set()
    definitions: list[dict[str, Any]] = []
    for schedule in schedules:
        definitions.append(validate_schedule(schedule))
        if schedule.name in seen:
            raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} is declared twice")
        seen.add(schedule.name)
    return definitions


def definition_of(schedule: Schedule, *, spec: Any = None) -> dict[str, Any]:
    """The definition columns of ``schedule``, normalised as they read back from a store."""
    routing = schedule.routing
    return {
        "task": schedule.task,
        "trigger": _json_normal("trigger", schedule.trigger.to_spec() if spec is None else spec),
        "timezone": schedule.timezone,
        "args": _json_normal("args", list(schedule.args)),
        "kwargs": _json_normal("kwargs", dict(schedule.kwargs)),
        "queue": routing.queue,
        "exchange": routing.exchange,
        "routing_key": routing.routing_key,
        "priority": routing.priority,
        "expires": None if routing.expires is None else float(routing.expires),
        "headers": _json_normal("headers", dict(routing.headers)),
        "misfire_policy": schedule.misfire.value,
        "misfire_grace": schedule.misfire_grace.total_seconds(),
        "catch_up_limit": schedule.catch_up_limit,
        "one_off": bool(schedule.one_off),
        "start_at": utc(schedule.start_at),
        "end_at": utc(schedule.end_at),
        "description": schedule.description,
        "jitter": schedule.jitter.total_seconds(),
        "overlap": schedule.overlap.value,
        "max_runtime": (
            None if schedule.max_runtime is None else schedule.max_runtime.total_seconds()
        ),
        "pause_on_failure": schedule.pause_on_failure,
    }


def row_definition(row: Mapping[str, Any]) -> dict[str, Any]:
    """The definition columns of a stored row, comparable with :func:`definition_of`."""
    out = {name: row[name] for name in DEFINITION_COLUMNS}
    try:
        out["start_at"] = utc(out["start_at"])
        out["end_at"] = utc(out["end_at"])
        out["one_off"] = bool(out["one_off"])
        out["misfire_grace"] = float(out["misfire_grace"])
        if out["expires"] is not None:
            out["expires"] = float(out["expires"])
        out["jitter"] = float(out["jitter"])
        if out["max_runtime"] is not None:
            out["max_runtime"] = float(out["max_runtime"])
    except (TypeError, ValueError, AttributeError, OverflowError):
        pass  # a damaged row: its raw value differs from any valid definition's
    return out


def schedule_changes(old: Schedule, new: Schedule) -> list[FieldChange]:
    """The stored columns of ``old``'s definition that ``new`` changes, old -> new."""
    return definition_changes(definition_of(old), definition_of(new))


def schedule_to_row(
    schedule: Schedule,
    *,
    source: Source,
    enabled: bool,
    next_run_at: datetime | None,
    definition: dict[str, Any] | None = None,
    published: bool = False,
) -> dict[str, Any]:
    """Columns to insert for a new schedule (the store adds id, version and timestamps).
    ``published``: a publish writes it, so its definition's fingerprint is recorded."""
    row = dict(definition) if definition is not None else definition_of(schedule)
    row.update(
        name=schedule.name,
        source=Source(source).value,
        enabled=bool(enabled),
        next_run_at=utc(next_run_at),
        last_run_at=utc(schedule.last_run_at),
        total_run_count=int(schedule.total_run_count),
        published_fingerprint=fingerprint(row) if published else None,
        # A new row starts unpaused (a declaration cannot pause: that is an operator's act).
        paused=False,
        paused_at=None,
        paused_by=None,
        pause_note="",
        skipped_count=0,
    )
    return row


def fingerprint(definition: Mapping[str, Any]) -> str:
    """A hash of a definition (:func:`definition_of` / :func:`row_definition`, whose values
    compare equal exactly when the definitions are the same): what publish records, so an
    edit made since can be told apart from the publish's own write."""
    return fingerprint_of_text(definition_text(definition))


def fingerprint_of_text(text: str) -> str:
    """The fingerprint of a :func:`definition_text`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def definition_json(definition: Mapping[str, Any] | Sequence[Any]) -> str:
    """A definition (or definition values, as :attr:`Comparison.shared`) as compact JSON, keys
    in no particular order (instants as ISO 8601 in UTC): what PostgreSQL's publication
    compares with the stored rows (``publish_unchanged``); cheaper than
    :func:`definition_text`, which sorts every level for a stable hash."""
    return json.dumps(definition, separators=(",", ":"), default=_instant_text)


def definition_text(definition: Mapping[str, Any]) -> str:
    """The JSON text a fingerprint hashes: the definition's columns, sorted, compact, the
    columns added by schema 6 left out while they hold their defaults,
    instants as ISO 8601 in UTC."""
    return json.dumps(
        {
            name: definition[name]
            for name in DEFINITION_COLUMNS
            if name not in _LATER_DEFAULTS or definition[name] != _LATER_DEFAULTS[name]
        },
        sort_keys=True,
        separators=(",", ":"),
        default=_instant_text,
    )


def _instant_text(value: Any) -> str:
    if isinstance(value, datetime):
        return utc(value).isoformat()  # type: ignore[union-attr]
    raise TypeError(f"{type(value).__name__} in a definition")


def edited(row: Mapping[str, Any]) -> bool:
    """Whether a stored row's definition changed since the publish that recorded its
    fingerprint (rows without one, created in the admin or before schema 3: never)."""
    recorded = row.get("published_fingerprint")
    return recorded is not None and recorded != fingerprint(row_definition(row))


def first_run(schedule: Schedule, anchor: datetime) -> datetime | None:
    """``next_run_at`` of a schedule (re)starting at ``anchor``; None when disabled."""
    if not schedule.enabled:
        return None
    return schedule.first_run_after(anchor)


@lru_cache(maxsize=8192)
def _trigger_from_text(text: str) -> Trigger:
    # Triggers are immutable values, so one parsed trigger can serve every row that shares the
    # spec: claiming 10,000 cron schedules should not parse 10,000 cron expressions.
    return trigger_from_spec(json.loads(text))


@lru_cache(maxsize=8192)
def _trigger_from_items(items: tuple[tuple[str, Any], ...]) -> Trigger:
    return trigger_from_spec(dict(items))


def trigger_of(spec: Any) -> Trigger:
    if isinstance(spec, str):
        return _trigger_from_text(spec)
    if isinstance(spec, dict):
        # Flat specs (every built-in trigger's) are keyed by their items, ~8x cheaper than
        # dumping them to text; a nested one falls through to the text key.
        try:
            return _trigger_from_items(tuple(sorted(spec.items())))
        except TypeError:  # an unhashable value
            pass
    return _trigger_from_text(json.dumps(spec, sort_keys=True))


def _json(value: Any, text: bool, want: type, what: str) -> Any:
    """A JSON column's value, which must be a ``want``. With ``text`` the column came as JSON
    text (the claim path's rows); otherwise it is decoded already, and a string is a JSON
    string: never what an args, kwargs or headers column may hold."""
    if text and isinstance(value, str):
        # Most schedules have no args, kwargs or headers: skip the decoder for the empty ones.
        if value == "[]":
            value = []
        elif value == "{}":
            value = {}
        else:
            try:
                value = json.loads(value)
            except ValueError:
                raise _Bad(f"{short_repr(value)} is not JSON") from None
    if type(value) is not want:
        raise _Bad(f"{short_repr(value)} is not {what}")
    return value


def schedule_from_row(row: Mapping[str, Any], *, json_text: bool = False) -> Schedule:
    """Rebuild a Schedule (definition and state) from a stored row, validating every field as a
    declaration would. JSON columns come decoded, or as JSON text with ``json_text``.

    A row that cannot be decoded raises :class:`~goatbeat.core.errors.DamagedRow` naming the
    schedule and the column; :func:`read_schedule` returns a DamagedSchedule instead."""
    trusted = trusted_schedule_from_row(row, json_text=json_text)
    try:
        # The constructors' own validation, on the decoded values.
        Routing(**trusted.routing.to_dict())
        return replace(trusted)
    except InvalidValue as exc:
        column = _COLUMN_OF_FIELD.get(exc.field, exc.field)
        raise DamagedRow(row.get("name"), column, row.get(column, exc.value), exc.reason) from None


def read_schedule(row: Mapping[str, Any]) -> StoredSchedule:
    """:func:`schedule_from_row`, or a :class:`DamagedSchedule` for a row it cannot decode:
    what ``get`` and ``list_schedules`` return, so one damaged row never hides the others."""
    try:
        return schedule_from_row(row)
    except DamagedRow as exc:
        return damaged_schedule(row, exc)


# Schedule field -> the column that stores it, where the names differ.
_COLUMN_OF_FIELD = {"misfire": "misfire_policy", "routing": "headers"}

_TRUSTED_TIMES = (
    "start_at",
    "end_at",
    "next_run_at",
    "last_run_at",
    "created_at",
    "updated_at",
    "paused_at",
)
_COUNTERS = ("total_run_count", "missed_count", "version", "skipped_count")
_MAX_CATCH_UP = 100_000


class _Bad(Exception):
    """One column's problem, turned into DamagedRow by the caller that knows the column."""


def _check_routing_text(value: Any) -> Any:
    if value is not None and (type(value) is not str or not value):
        raise _Bad(f"{short_repr(value)} must be a non-empty string or NULL")
    return value


def _check_priority(value: Any) -> Any:
    if value is None:
        return None
    if type(value) is not int or not -100 <= value <= 255:
        raise _Bad(f"{short_repr(value)} is not an integer in -100..255")
    return value


def _check_expires(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, str)):
        raise _Bad(f"{short_repr(value)} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise _Bad(f"{short_repr(value)} must be a finite number of seconds > 0")
    return seconds


def _check_grace(value: Any) -> timedelta:
    if isinstance(value, (bool, str)):
        raise _Bad(f"{short_repr(value)} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise _Bad(f"{short_repr(value)} must be a finite number of seconds >= 0")
    return timedelta(seconds=seconds)


def _check_seconds(value: Any, *, none: bool, positive: bool) -> timedelta | None:
    if value is None and none:
        return None
    if isinstance(value, (bool, str)) or value is None:
        raise _Bad(f"{short_repr(value)} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        raise _Bad(
            f"{short_repr(value)} must be a finite number of seconds {'>' if positive else '>='} 0"
        )
    return timedelta(seconds=seconds)


def _check_pause_on_failure(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_PAUSE_ON_FAILURE:
        raise _Bad(f"{short_repr(value)} is not an integer in 1..{MAX_PAUSE_ON_FAILURE}")
    return value


def _check_catch_up(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= _MAX_CATCH_UP:
        raise _Bad(f"{short_repr(value)} is not an integer in 1..{_MAX_CATCH_UP}")
    return value


_TASK_NAME = re.compile(r"\S+\Z")  # Schedule's rule: non-empty, no whitespace at all


def _check_task(value: Any) -> str:
    if type(value) is not str or _TASK_NAME.match(value) is None:
        raise _Bad(f"{short_repr(value)} is not a task name")
    return value


def _check_zone(value: Any, trigger: Trigger) -> None:
    # The column repeats the trigger's zone (for the admin and SQL users); a row where the two
    # disagree does not say which one it means.
    expected = str(getattr(trigger, "timezone", "UTC"))
    if value != expected:
        try:
            get_zone(value)
        except InvalidValue as exc:
            raise _Bad(exc.reason) from None
        raise _Bad(f"{short_repr(value)} is not the trigger's time zone {expected!r}")


def trusted_schedule_from_row(row: Mapping[str, Any], *, json_text: bool = False) -> Schedule:
    """:func:`schedule_from_row` for the claim path, without re-validating the JSON contents.

    The row was validated when goatbeat wrote it, so only what a row damaged behind goatbeat's
    back (a hand-edited column, a restored dump) could still get wrong is checked here, cheaply:
    the trigger spec (parsed, and cached by spec) and the zone column, the shape of the JSON
    columns, the task name, the routing options, the enums, the limits and the instants. A
    damaged row raises :class:`~goatbeat.core.errors.DamagedRow` naming the schedule and the
    column; the claim quarantines that row and goes on with the others."""
    column = "trigger"
    try:
        spec = row["trigger"]
        if not json_text and isinstance(spec, str):
            raise _Bad(f"{short_repr(spec)} is not a JSON object")
        trigger = trigger_of(spec)
        column = "timezone"
        _check_zone(row["timezone"], trigger)
        task, args, kwargs, routing = _payload(row, row.get("name"), json_text=json_text)
        column = "misfire_policy"
        values: dict[str, Any] = {"misfire": MisfirePolicy(row["misfire_policy"])}
        column = "source"
        values["source"] = Source(row["source"])
        column = "misfire_grace"
        values["misfire_grace"] = _check_grace(row["misfire_grace"])
        column = "catch_up_limit"
        values["catch_up_limit"] = _check_catch_up(row["catch_up_limit"])
        for column in _TRUSTED_TIMES:
            value = row[column]
            values[column] = None if value is None else value.astimezone(UTC)
        column = "end_at"
        if values["start_at"] and values["end_at"] and values["end_at"] < values["start_at"]:
            raise _Bad(f"{values['end_at'].isoformat()} is before start_at")
        for column in _COUNTERS:
            values[column] = int(row[column])
        column = "description"
        if type(row["description"]) is not str:
            raise _Bad(f"{short_repr(row['description'])} is not text")
        column = "jitter"
        jitter = _check_seconds(row["jitter"], none=False, positive=False)
        assert jitter is not None
        if jitter > MAX_JITTER:
            raise _Bad(f"{short_repr(row['jitter'])} is longer than a day")
        values["jitter"] = jitter
        column = "overlap"
        values["overlap"] = OverlapPolicy(row["overlap"])
        column = "max_runtime"
        values["max_runtime"] = _check_seconds(row["max_runtime"], none=True, positive=True)
        if values["overlap"] is not OverlapPolicy.ALLOW and values["max_runtime"] is None:
            raise _Bad(f"NULL, but overlap {values['overlap'].value!r} needs it")
        column = "pause_on_failure"
        values["pause_on_failure"] = _check_pause_on_failure(row["pause_on_failure"])
        column = "pause_note"
        note = row["pause_note"]
        if type(note) is not str:
            raise _Bad(f"{short_repr(note)} is not text")
    except DamagedRow:
        raise
    except InvalidValue as exc:
        # A trigger's own error names the field inside the spec ("timezone: ..."): keep it.
        raise DamagedRow(row.get("name"), column, row.get(column), str(exc)) from None
    except (_Bad, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise DamagedRow(row.get("name"), column, row.get(column), str(exc)) from None
    values.update(
        name=row["name"],
        task=task,
        trigger=trigger,
        args=tuple(args),
        kwargs=kwargs,
        routing=routing,
        one_off=bool(row["one_off"]),
        description=row["description"],
        enabled=bool(row["enabled"]),
        id=int(row["id"]),
        last_status=row["last_status"],
        paused=bool(row["paused"]),
        paused_by=row["paused_by"],
        pause_note=note,
    )
    return Schedule._trusted(values)


def _payload(
    row: Mapping[str, Any], name: Any, *, json_text: bool = False
) -> tuple[str, list[Any], dict[str, Any], Routing]:
    """What a submission carries (task, args, kwargs, routing), checked column by column:
    shared by the claim path and the pending (resubmission) path."""
    column = "task"
    try:
        task = _check_task(row["task"])
        column = "args"
        args = _json(row["args"], json_text, list, "a JSON array")
        column = "kwargs"
        kwargs = _json(row["kwargs"], json_text, dict, "a JSON object")
        column = "headers"
        headers = row["headers"]
        headers = {} if headers is None else _json(headers, json_text, dict, "a JSON object")
        column = "queue"
        queue = _check_routing_text(row["queue"])
        column = "exchange"
        exchange = _check_routing_text(row["exchange"])
        column = "routing_key"
        routing_key = _check_routing_text(row["routing_key"])
        column = "priority"
        priority = _check_priority(row["priority"])
        column = "expires"
        routing = Routing._trusted(
            queue=queue,
            exchange=exchange,
            routing_key=routing_key,
            priority=priority,
            expires=_check_expires(row["expires"]),
            headers=headers,
        )
    except (_Bad, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise DamagedRow(name, column, row.get(column), str(exc)) from None
    return task, args, kwargs, routing


def damaged_schedule(row: Mapping[str, Any], exc: DamagedRow) -> DamagedSchedule:
    """What a store shows for a row that ``exc`` says cannot be decoded: the state columns as
    far as they can be read, and every definition column as stored."""

    def read(column: str, convert: Callable[[Any], Any], default: Any) -> Any:
        try:
            value = row[column]
            return default if value is None else convert(value)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            return default

    def instant(value: Any) -> datetime:
        return value.astimezone(UTC)  # type: ignore[no-any-return]

    columns = {name: _shown(row.get(name)) for name in DEFINITION_COLUMNS}
    return DamagedSchedule(
        name=str(row.get("name")),
        column=exc.column,
        value=exc.value,
        detail=exc.detail,
        id=read("id", int, None),
        source=str(row.get("source")),
        task=str(row.get("task")),
        description=str(row.get("description") or ""),
        enabled=read("enabled", bool, False),
        next_run_at=read("next_run_at", instant, None),
        last_run_at=read("last_run_at", instant, None),
        last_status=read("last_status", str, None),
        total_run_count=read("total_run_count", int, 0),
        missed_count=read("missed_count", int, 0),
        version=read("version", int, 0),
        created_at=read("created_at", instant, None),
        updated_at=read("updated_at", instant, None),
        paused=read("paused", bool, False),
        paused_at=read("paused_at", instant, None),
        paused_by=read("paused_by", str, None),
        pause_note=read("pause_note", str, ""),
        skipped_count=read("skipped_count", int, 0),
        columns=columns,
    )


def _shown(value: Any) -> Any:
    """A stored column value as an operator should see it: JSON text decoded when it parses."""
    if isinstance(value, str) and value[:1] in ("[", "{", '"'):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def execution_from_row(row: Mapping[str, Any]) -> Execution:
    claimed_at = utc(row["claimed_at"])
    assert claimed_at is not None
    scheduled_at = utc(row["scheduled_at"])
    assert scheduled_at is not None
    return Execution(
        id=int(row["id"]),
        schedule_id=None if row["schedule_id"] is None else int(row["schedule_id"]),
        schedule_name=row["schedule_name"],
        scheduled_at=scheduled_at,
        idempotency_key=row["idempotency_key"],
        kind=ExecutionKind(row["kind"]),
        status=ExecutionStatus(row["status"]),
        fencing_token=None if row["fencing_token"] is None else int(row["fencing_token"]),
        scheduler_id=row["scheduler_id"],
        claimed_at=claimed_at,
        submitted_at=utc(row["submitted_at"]),
        finished_at=utc(row["finished_at"]),
        attempts=int(row["attempts"]),
        backend_task_id=row["backend_task_id"],
        error=row["error"],
        # Schema version 5: what the worker reported.
        started_at=utc(row.get("started_at")),
        runtime=None if row.get("runtime") is None else float(row["runtime"]),
        worker=row.get("worker"),
        retries=int(row.get("retries") or 0),
    )


def occurrence_from_row(row: Mapping[str, Any]) -> Occurrence:
    """An occurrence from a pending-execution row joined with its schedule's columns. Raises
    DamagedRow when those columns cannot be decoded (see :func:`decode_pending`)."""
    scheduled_at = utc(row["scheduled_at"])
    assert scheduled_at is not None
    task, args, kwargs, routing = _payload(row, row["schedule_name"])
    kind = ExecutionKind(row["kind"])
    return Occurrence(
        due_at=_due_at(row, kind, scheduled_at),
        execution_id=int(row["execution_id"]),
        schedule_id=int(row["schedule_id"]),
        schedule_name=row["schedule_name"],
        task=task,
        args=tuple(args),
        kwargs=kwargs,
        routing=routing,
        scheduled_at=scheduled_at,
        idempotency_key=row["idempotency_key"],
        kind=kind,
        fencing_token=None if row["fencing_token"] is None else int(row["fencing_token"]),
        attempts=int(row["attempts"]),
        misfire_grace=_grace(row.get("misfire_grace")),
    )


def _due_at(row: Mapping[str, Any], kind: ExecutionKind, scheduled_at: datetime) -> datetime | None:
    """When a pending row is due: a backfill at its request (its instant is long past, and
    its retry grace counts from the request), a scheduled occurrence at its jittered instant
    (recomputed: the offset is a pure function), anything else at its instant (None)."""
    if kind is ExecutionKind.BACKFILL:
        return utc(row.get("claimed_at"))
    if kind is ExecutionKind.SCHEDULED:
        jitter = _check_seconds_or_none(row.get("jitter"))
        if jitter:
            return jittered(row["schedule_name"], scheduled_at, jitter)
    return None


def _check_seconds_or_none(value: Any) -> timedelta | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return min(timedelta(seconds=seconds), MAX_JITTER)


def decode_pending(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[Occurrence], list[tuple[int, str]]]:
    """Pending rows as occurrences, and ``(execution id, error)`` for those whose schedule
    cannot be decoded: nothing can submit them, so the store ends them as ``submit_failed``
    instead of letting one damaged schedule stop every resubmission."""
    out: list[Occurrence] = []
    failed: list[tuple[int, str]] = []
    for row in rows:
        try:
            out.append(occurrence_from_row(row))
        except DamagedRow as exc:
            failed.append((int(row["execution_id"]), str(exc)))
    return out, failed


def _grace(value: Any) -> timedelta | None:
    """A pending row's schedule grace; None when absent or unreadable (retries by count)."""
    try:
        seconds = float(value)
        return timedelta(seconds=seconds) if seconds >= 0 else None
    except (TypeError, ValueError, OverflowError):
        return None


_DEFINITION_SLOTS = tuple(n for n in Schedule.__slots__ if n not in STATE_FIELDS)
_read_definition = operator.attrgetter(*_DEFINITION_SLOTS)


def _with_state(schedule: Schedule, state: Mapping[str, Any]) -> Schedule:
    """A copy of ``schedule`` with its store-owned state taken from ``state`` (a row), without
    re-validating the definition: it is the one already validated."""
    clone = object.__new__(Schedule)
    setattr_ = object.__setattr__
    for name, value in zip(_DEFINITION_SLOTS, _read_definition(schedule), strict=True):
        setattr_(clone, name, value)
    for name in _TIME_STATE:
        value = state[name]
        setattr_(clone, name, None if value is None else value.astimezone(UTC))
    setattr_(clone, "enabled", bool(state["enabled"]))
    setattr_(clone, "last_status", state["last_status"])
    setattr_(clone, "total_run_count", int(state["total_run_count"]))
    setattr_(clone, "missed_count", int(state["missed_count"]))
    setattr_(clone, "version", int(state["version"]))
    setattr_(clone, "paused", bool(state["paused"]))
    setattr_(clone, "paused_by", state["paused_by"])
    note = state["pause_note"]
    if type(note) is not str:
        raise TypeError("pause_note")
    setattr_(clone, "pause_note", note)
    setattr_(clone, "skipped_count", int(state["skipped_count"]))
    return clone


_TIME_STATE = ("next_run_at", "last_run_at", "created_at", "updated_at", "paused_at")


_SHARED_COLUMNS = (
    "source",
    "task",
    "trigger",
    "timezone",
    "headers",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "expires",
    "misfire_policy",
    "misfire_grace",
    "catch_up_limit",
    "jitter",
    "overlap",
    "max_runtime",
    "pause_on_failure",
)
"""Definition columns many schedules hold alike (one declaration site, one trigger spec, the
default routing and policies): validated once per distinct combination, not once per row."""
_read_shared = operator.itemgetter(*_SHARED_COLUMNS)
# Their types join the key: SQLite's columns take any type, and 1, 1.0 and True are equal
# keys that the checks tell apart (a priority must be an int, not a bool).
_read_numbers = operator.itemgetter(
    "priority", "expires", "misfire_grace", "catch_up_limit", "jitter", "max_runtime",
    "pause_on_failure",
)  # fmt: skip
_read_signature = operator.itemgetter("source", *DEFINITION_COLUMNS)
_read_times = operator.itemgetter(*_TRUSTED_TIMES)
_EMPTY_JSON = frozenset({None, "{}"})


def _shared_definition(
    row: Mapping[str, Any],
) -> tuple[dict[str, Any], tuple[Any, ...], str | None]:
    """The checks of :func:`trusted_schedule_from_row` on the :data:`_SHARED_COLUMNS` of a
    claim-path row (JSON as text): the values they give, the routing options but the headers,
    and the headers' JSON text (None when empty; decoded afresh for each row, so no two
    schedules share a mutable dict). Raises on any problem: the caller then decodes the row
    the full way, which names the column."""
    trigger = _trigger_from_text(row["trigger"])
    _check_zone(row["timezone"], trigger)
    task = _check_task(row["task"])
    headers = row["headers"]
    if headers not in _EMPTY_JSON:
        _json(headers, True, dict, "a JSON object")
    else:
        headers = None
    routing = (
        _check_routing_text(row["queue"]),
        _check_routing_text(row["exchange"]),
        _check_routing_text(row["routing_key"]),
        _check_priority(row["priority"]),
        _check_expires(row["expires"]),
    )
    overlap = OverlapPolicy(row["overlap"])
    jitter = _check_seconds(row["jitter"], none=False, positive=False)
    assert jitter is not None
    max_runtime = _check_seconds(row["max_runtime"], none=True, positive=True)
    if jitter > MAX_JITTER or (overlap is not OverlapPolicy.ALLOW and max_runtime is None):
        raise _Bad("decoded the full way to name the column")
    values = {
        "task": task,
        "trigger": trigger,
        "misfire": MisfirePolicy(row["misfire_policy"]),
        "source": Source(row["source"]),
        "misfire_grace": _check_grace(row["misfire_grace"]),
        "catch_up_limit": _check_catch_up(row["catch_up_limit"]),
        "jitter": jitter,
        "overlap": overlap,
        "max_runtime": max_runtime,
        "pause_on_failure": _check_pause_on_failure(row["pause_on_failure"]),
    }
    return values, routing, headers


class ScheduleCache:
    """Rows of the claim path -> Schedules, validating each definition once.

    Keyed by ``(id, version)``: every change goatbeat makes to a definition bumps the version
    (the compare-and-set depends on it), so a row at a version already seen has its definition
    built already and only its state columns are read. The definition columns as read are kept
    with the entry and compared on every hit, so a column edited by hand without a version bump
    (a restored dump, an ``UPDATE`` in psql) is noticed at once: the row is decoded afresh, and
    quarantined if it no longer decodes. After a committed claim advances a row the store
    re-files the entry under the new version, so a schedule claimed again and again is built
    once. Bounded: the least recently used entries go first.

    A row it has not seen (the first claim of each schedule after a start, every schedule of
    an hourly burst) is decoded with the checks of :func:`trusted_schedule_from_row`, those of
    the columns schedules share (:data:`_SHARED_COLUMNS`) made once per distinct combination
    of their values; a row any check refuses is decoded the full way, which raises
    :class:`~goatbeat.core.errors.DamagedRow` naming the column, as before."""

    def __init__(self, maxsize: int = 20_000, shared_maxsize: int = 1_024) -> None:
        self.maxsize = maxsize
        self.shared_maxsize = shared_maxsize
        self._entries: OrderedDict[tuple[int, int], tuple[tuple[Any, ...] | None, Schedule]] = (
            OrderedDict()
        )
        self._shared: dict[tuple[Any, ...], tuple[dict[str, Any], tuple[Any, ...], str | None]] = {}
        self._lock = threading.Lock()

    def _put(
        self, key: tuple[int, int], signature: tuple[Any, ...] | None, schedule: Schedule
    ) -> None:
        with self._lock:
            self._entries[key] = (signature, schedule)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def from_row(self, row: Mapping[str, Any]) -> Schedule:
        key = (int(row["id"]), int(row["version"]))
        signature = _read_signature(row)
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None or entry[0] != signature:
            cached = self._decode(row)
            schedule = cached
        else:
            cached = entry[1]
            try:
                schedule = _with_state(cached, row)
            except (TypeError, ValueError, AttributeError, OverflowError):
                # A state column damaged by hand (the version unchanged): decoding the whole
                # row names it (DamagedRow), and the claim quarantines the row.
                trusted_schedule_from_row(row, json_text=True)
                raise
        self._put(key, signature, cached)
        return schedule

    def _decode(self, row: Mapping[str, Any]) -> Schedule:
        """:func:`trusted_schedule_from_row` (JSON as text), the same Schedule or the same
        DamagedRow, with the shared columns' checks made once per combination."""
        try:
            return self._decode_fast(row)
        except Exception:  # any refusal: the full decode says which column, or rebuilds it
            return trusted_schedule_from_row(row, json_text=True)

    def _decode_fast(self, row: Mapping[str, Any]) -> Schedule:
        shared_key = (*_read_shared(row), *map(type, _read_numbers(row)))
        shared = self._shared.get(shared_key)
        if shared is None:
            shared = _shared_definition(row)
            with self._lock:
                if len(self._shared) >= self.shared_maxsize:
                    self._shared.clear()  # a crowd of one-of-a-kind definitions: start over
                self._shared[shared_key] = shared
        common_values, routing, headers_text = shared
        args = _json(row["args"], True, list, "a JSON array")
        kwargs = _json(row["kwargs"], True, dict, "a JSON object")
        headers = {} if headers_text is None else _json(headers_text, True, dict, "")
        queue, exchange, routing_key, priority, expires = routing
        start_at, end_at, next_run_at, last_run_at, created_at, updated_at, paused_at = [
            None if value is None else value.astimezone(UTC) for value in _read_times(row)
        ]
        if start_at and end_at and end_at < start_at:
            raise _Bad("decoded the full way to name the column")
        description = row["description"]
        note = row["pause_note"]
        if type(description) is not str or type(note) is not str:
            raise _Bad("decoded the full way to name the column")
        values = {
            **common_values,
            "start_at": start_at,
            "end_at": end_at,
            "next_run_at": next_run_at,
            "last_run_at": last_run_at,
            "created_at": created_at,
            "updated_at": updated_at,
            "paused_at": paused_at,
            "total_run_count": int(row["total_run_count"]),
            "missed_count": int(row["missed_count"]),
            "version": int(row["version"]),
            "skipped_count": int(row["skipped_count"]),
            "name": row["name"],
            "args": tuple(args),
            "kwargs": kwargs,
            "routing": Routing._trusted(
                queue=queue,
                exchange=exchange,
                routing_key=routing_key,
                priority=priority,
                expires=expires,
                headers=headers,
            ),
            "one_off": bool(row["one_off"]),
            "description": description,
            "enabled": bool(row["enabled"]),
            "id": int(row["id"]),
            "last_status": row["last_status"],
            "paused": bool(row["paused"]),
            "paused_by": row["paused_by"],
            "pause_note": note,
        }
        return Schedule._trusted(values)

    def advanced_all(self, schedules: Iterable[Schedule]) -> None:
        """The claim that read ``schedules`` committed each one version further, with the
        same definition: their entries move to the new versions (one acquisition of the
        lock for the batch; an entry evicted meanwhile is built again on its next read)."""
        entries = self._entries
        with self._lock:
            for schedule in schedules:
                assert schedule.id is not None
                entry = entries.pop((schedule.id, schedule.version), None)
                if entry is not None:  # else evicted meanwhile: the next read builds it again
                    entries[(schedule.id, schedule.version + 1)] = entry
            while len(entries) > self.maxsize:
                entries.popitem(last=False)


def decode_due(
    rows: Sequence[Mapping[str, Any]], from_row: Callable[[Mapping[str, Any]], Schedule]
) -> tuple[list[Schedule], list[DamagedSchedule]]:
    """The due rows of a claim as Schedules, and the rows that cannot be decoded (to be
    quarantined by the claim: one damaged row must not stop the others)."""
    good: list[Schedule] = []
    damaged: list[DamagedSchedule] = []
    for row in rows:
        try:
            good.append(from_row(row))
        except DamagedRow as exc:
            damaged.append(damaged_schedule(row, exc))
    return good, damaged


@dataclass(slots=True)
class Advance:
    """The compare-and-set one planned schedule asks for.

    ``plan.run_at`` is split by the overlap policy: ``starts`` are claimed (at most one for
    a schedule whose overlap is not allow), ``buffer`` waits for the running run
    (buffer_one), ``skips`` are recorded as skipped."""

    schedule: Schedule
    plan: Plan
    disable: bool  # a one_off schedule that is being claimed
    starts: list[datetime] = field(default_factory=list)
    buffer: datetime | None = None
    skips: list[datetime] = field(default_factory=list)

    @property
    def last_run_at(self) -> datetime | None:
        return self.plan.run_at[-1] if self.plan.run_at else None

    @property
    def last_status(self) -> str | None:
        if self.starts:
            return ExecutionStatus.CLAIMED.value
        if self.buffer is not None:
            return ExecutionStatus.BUFFERED.value
        if self.skips:
            return ExecutionStatus.SKIPPED.value
        return None


@dataclass(frozen=True, slots=True)
class Planned:
    """One execution a claim inserts."""

    schedule: Schedule
    scheduled_at: datetime
    key: str
    status: str
    due_at: datetime | None
    """The jittered instant of a claimed occurrence of a schedule with jitter."""


@dataclass(slots=True)
class ClaimPlan:
    """A planned claim batch: schedule advances and the executions they bring."""

    advances: list[Advance] = field(default_factory=list)
    schedules_seen: int = 0

    def executions_for(self, advanced_ids: set[int]) -> list[Planned]:
        """Every execution (claimed, buffered, skipped) of the schedules whose
        compare-and-set succeeded, oldest first."""
        out: list[Planned] = []
        claimed = ExecutionStatus.CLAIMED.value
        for adv in self.advances:
            schedule = adv.schedule
            assert schedule.id is not None
            if schedule.id not in advanced_ids:
                continue
            jitter = schedule.jitter
            for at in adv.starts:
                due = jittered(schedule.name, at, jitter) if jitter else None
                out.append(Planned(schedule, at, idempotency_key(schedule.name, at), claimed, due))
            if adv.buffer is not None:
                at = adv.buffer
                key = idempotency_key(schedule.name, at)
                out.append(Planned(schedule, at, key, ExecutionStatus.BUFFERED.value, None))
            for at in adv.skips:
                key = idempotency_key(schedule.name, at)
                out.append(Planned(schedule, at, key, ExecutionStatus.SKIPPED.value, None))
        # Occurrences go out oldest first, whatever order the rows were locked in.
        out.sort(key=lambda p: (p.scheduled_at, p.schedule.id or 0))
        return out

    def missed_for(self, advanced_ids: set[int]) -> int:
        return sum(
            adv.plan.missed
            for adv in self.advances
            if adv.schedule.id is not None and adv.schedule.id in advanced_ids
        )

    def skipped_for(self, advanced_ids: set[int]) -> dict[str, int]:
        return {
            adv.schedule.name: len(adv.skips)
            for adv in self.advances
            if adv.skips and adv.schedule.id in advanced_ids
        }

    def misses_for(self, advanced_ids: set[int]) -> list[Miss]:
        """What :meth:`missed_for` counts, schedule by schedule."""
        return [
            Miss(
                schedule_id=adv.schedule.id,
                schedule_name=adv.schedule.name,
                count=adv.plan.missed,
                first_at=adv.plan.missed_first,
                last_at=adv.plan.missed_last,
            )
            for adv in self.advances
            if adv.plan.missed and adv.schedule.id is not None and adv.schedule.id in advanced_ids
        ]


RunState = tuple[bool, bool]
"""For a schedule whose overlap is not allow: (its last started run is still running, an
occurrence of it is buffered)."""


def split_overlap(
    schedule: Schedule, run_at: Sequence[datetime], state: RunState
) -> tuple[list[datetime], datetime | None, list[datetime]]:
    """``run_at`` as (starts, buffered, skipped) by the schedule's overlap policy, given
    whether its previous run is still running and whether one occurrence already waits.
    Occurrences planned together would overlap each other too: only the oldest starts."""
    policy = schedule.overlap
    if policy is OverlapPolicy.ALLOW or not run_at:
        return list(run_at), None, []
    running, waiting = state
    rest = list(run_at)
    starts = [] if running else [rest.pop(0)]
    buffer = None
    if policy is OverlapPolicy.BUFFER_ONE and not waiting and rest:
        # Temporal's BUFFER_ONE: the first occurrence that finds the run busy waits; later
        # ones are dropped while it does.
        buffer = rest.pop(0)
    return starts, buffer, rest


def plan_batch(
    schedules: Sequence[Schedule],
    now: datetime,
    planner: Planner,
    runs: Mapping[int, RunState] | None = None,
) -> ClaimPlan:
    """Plan every schedule read by a claim. The advances come sorted by id so that stores
    lock rows in one global order. ``runs``: the run state of the schedules whose overlap is
    not allow (absent: nothing running, nothing buffered)."""
    result = ClaimPlan(schedules_seen=len(schedules))
    for schedule in sorted(schedules, key=lambda s: s.id or 0):
        p = planner(schedule, now)
        if not p.due and p.next_run_at == schedule.next_run_at:
            continue
        state = (runs or {}).get(schedule.id or 0, (False, False))
        starts, buffer, skips = split_overlap(schedule, p.run_at, state)
        result.advances.append(
            Advance(
                schedule=schedule,
                plan=p,
                disable=schedule.one_off and bool(p.run_at),
                starts=starts,
                buffer=buffer,
                skips=skips,
            )
        )
    return result


def run_states(rows: Sequence[Mapping[str, Any]], now: datetime) -> dict[int, RunState]:
    """The run state of each due row whose overlap is not allow, from the columns the claim
    reads with it: ``run_status``, ``run_submitted_at``, ``run_claimed_at`` (the run it
    waits for) and ``has_buffered``."""
    out: dict[int, RunState] = {}
    for row in rows:
        if row.get("overlap", "allow") == "allow":
            continue
        try:
            running = run_active(
                row.get("run_status"),
                row.get("run_submitted_at"),
                row.get("run_claimed_at"),
                row.get("max_runtime"),
                now,
            )
            out[int(row["id"])] = (running, bool(row.get("has_buffered")))
        except (TypeError, ValueError, AttributeError, OverflowError):
            continue  # a damaged row: decoding it names the column, and it is quarantined
    return out


def buffer_ready_at(row: Mapping[str, Any]) -> datetime | None:
    """When a buffered occurrence (a ``buffered_runs`` row: ``buffered_at``, ``max_runtime``,
    the run's ``run_status``, ``run_submitted_at``, ``run_claimed_at``) may start: at once
    (its own instant, past) when the run ended, when the run expires by ``max_runtime``, or
    None while the run is claimed and not sent yet (its sending wakes the leader anyway)."""
    status = row.get("run_status")
    if status not in ACTIVE_STATUSES:
        return utc(row["buffered_at"])
    if status == ExecutionStatus.CLAIMED.value or row.get("max_runtime") is None:
        return None
    since = utc(row.get("run_submitted_at") or row.get("run_claimed_at"))
    if since is None:
        return None
    try:
        return since + timedelta(seconds=float(row["max_runtime"]))
    except (TypeError, ValueError, OverflowError):
        return utc(row["buffered_at"])


def run_active(
    status: str | None,
    submitted_at: datetime | None,
    claimed_at: datetime | None,
    max_runtime: float | None,
    now: datetime,
) -> bool:
    """Whether the run an overlap policy waits for is still running at ``now``: claimed (it
    will be sent), or sent and reported neither finished nor older than ``max_runtime``
    (counted from its submission: a worker that died never reports)."""
    if status == ExecutionStatus.CLAIMED.value:
        return True
    if status not in ACTIVE_STATUSES or max_runtime is None:
        return False
    since = submitted_at or claimed_at
    return since is not None and since + timedelta(seconds=float(max_runtime)) > now


def occurrence_for(
    schedule: Schedule,
    *,
    execution_id: int,
    scheduled_at: datetime,
    key: str,
    token: int | None,
    kind: ExecutionKind = ExecutionKind.SCHEDULED,
    due_at: datetime | None = None,
) -> Occurrence:
    assert schedule.id is not None
    return Occurrence(
        due_at=due_at,
        execution_id=execution_id,
        schedule_id=schedule.id,
        schedule_name=schedule.name,
        task=schedule.task,
        args=schedule.args,
        kwargs=schedule.kwargs,
        routing=schedule.routing,
        scheduled_at=scheduled_at,
        idempotency_key=key,
        kind=kind,
        fencing_token=token,
        attempts=0,
        misfire_grace=schedule.misfire_grace,
    )


_PAYLOAD = re.compile(r"\A(?:schedule:[0-9]{1,19}|run:[0-9]{1,19}|lease:[A-Za-z0-9_.:/-]{1,64})\Z")


def validate_payload(payload: object) -> bool:
    """Whether ``payload`` is one of the identifiers the channel carries (see NOTIFY_CHANNEL).
    Receivers treat anything else as a plain wake-up."""
    return isinstance(payload, str) and _PAYLOAD.match(payload) is not None


def check_payload(payload: object) -> str:
    """``payload`` if it is a valid identifier; InvalidValue naming ``payload`` otherwise (we
    never send user text over the channel)."""
    if not validate_payload(payload):
        raise InvalidValue(
            "payload", payload, f"{payload!r} is not schedule:<id>, run:<id> or lease:<name>"
        )
    assert isinstance(payload, str)
    return payload


def lease_payload(name: str) -> str | None:
    payload = f"lease:{name}"
    return payload if validate_payload(payload) else None


def executions_query(
    name: str | None, status: ExecutionStatus | None, limit: int
) -> tuple[str, dict[str, Any]]:
    """The named query (``executions[_by_name][_status]``) and parameters the SQL stores run
    for :meth:`ScheduleStore.executions`."""
    check_positive("limit", limit)
    params: dict[str, Any] = {"limit": limit}
    query = "executions"
    if name is not None:
        params["name"] = name
        query = "executions_by_name"
    if status is not None:
        params["status"] = ExecutionStatus(status).value
        query = "executions_by_name_status" if name is not None else "executions_by_status"
    return query, params


def check_positive(field_name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValue(field_name, value, f"{value!r} must be a positive integer")
    return value


def execution_ids(field_name: str, values: Collection[int]) -> list[int]:
    """``values`` as a list of execution ids; InvalidValue naming the first that is not one."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
        raise InvalidValue(field_name, values, f"{values!r} is not a collection of ids")
    ids = list(values)
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidValue(field_name, value, f"{value!r} is not an execution id")
    return ids


@dataclass(slots=True)
class Replace:
    """A definition change for an existing row, written with compare-and-set on ``version``."""

    id: int
    version: int
    values: dict[str, Any]
    """Definition columns + enabled + next_run_at + last_status; last_run_at and
    published_fingerprint, where None keeps the stored value."""


@dataclass(slots=True)
class PublishActions:
    inserts: list[dict[str, Any]] = field(default_factory=list)
    replaces: list[Replace] = field(default_factory=list)
    fingerprints: list[tuple[int, str]] = field(default_factory=list)
    """(id, fingerprint) of unchanged rows that had none (published before schema 3)."""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    changes: dict[str, list[FieldChange]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.inserts or self.replaces)

    def result(self, *, orphaned: Sequence[str] = (), dry_run: bool = False) -> PublishResult:
        return PublishResult(
            created=self.created,
            updated=self.updated,
            unchanged=self.unchanged,
            changes=self.changes,
            orphaned=list(orphaned),
            dry_run=dry_run,
            refreshed=self.refreshed,
        )


def orphans(
    enabled_names: Iterable[str], schedules: Sequence[Schedule], *, source: Source
) -> list[str]:
    """The orphans a publication of ``schedules`` reports, given the names of the enabled rows
    of its source: for a code publication, those it does not declare, sorted; else none."""
    if Source(source) is not Source.CODE:
        return []
    declared = {s.name for s in schedules}
    return sorted(name for name in enabled_names if name not in declared)


def plan_publish(
    schedules: Sequence[Schedule],
    existing: Mapping[str, Mapping[str, Any]],
    *,
    source: Source,
    now: datetime,
    definitions: Sequence[dict[str, Any] | None] | None = None,
    follow_last_run: bool = False,
    unchanged: Collection[str] = (),
) -> PublishActions:
    """Decide what publishing ``schedules`` writes, given the stored rows with those names
    (rows carry ``published_fingerprint``).

    ``unchanged``: names the store has already found stored with exactly the declared
    definition, of this source, with a fingerprint recorded and not quarantined (PostgreSQL
    compares them in the database); they need no row in ``existing`` and write nothing (and
    their ``definitions`` entry may be None; any other None is computed here).

    Raises InvalidSchedule (field ``name``) when a name belongs to another source, before
    anything is written. The stored ``enabled`` flag always wins over the declared one.
    ``follow_last_run``: see :meth:`goatbeat.core.store.ScheduleStore.publish`."""
    source = Source(source)
    actions = PublishActions()
    if definitions is None:
        definitions = [definition_of(s) for s in schedules]
    for schedule, wanted in zip(schedules, definitions, strict=True):
        if schedule.name in unchanged:
            actions.unchanged.append(schedule.name)
            continue
        if wanted is None:
            wanted = definition_of(schedule)
        row = existing.get(schedule.name)
        if row is None:
            anchor = schedule.last_run_at or now
            actions.inserts.append(
                schedule_to_row(
                    schedule,
                    source=source,
                    enabled=schedule.enabled,
                    next_run_at=first_run(schedule, anchor),
                    definition=wanted,
                    published=True,
                )
            )
            actions.created.append(schedule.name)
            continue
        if row["source"] != source.value:
            raise InvalidSchedule(
                "name",
                schedule.name,
                f"{schedule.name!r} already exists with source {row['source']!r}, "
                f"not {source.value!r}",
            )
        quarantined = row["last_status"] == SCHEDULE_INVALID
        stored = row_definition(row)
        enabled = bool(row["enabled"])
        stored_last: datetime | None = utc(row["last_run_at"])
        later: datetime | None = None
        if follow_last_run and schedule.last_run_at is not None:
            theirs = utc(schedule.last_run_at)
            assert theirs is not None
            later = theirs if stored_last is None or theirs > stored_last else stored_last
        printed = fingerprint(wanted)
        if wanted == stored and not quarantined:
            if later is None or later == stored_last:
                actions.unchanged.append(schedule.name)
                if row.get("published_fingerprint") is None:
                    actions.fingerprints.append((int(row["id"]), printed))
                continue
            # Another scheduler (celery) ran it since: move the phase forward, never back.
            nxt = schedule.first_run_after(later) if enabled else None
            planned = utc(row["next_run_at"])
            if nxt is not None and planned is not None and planned > nxt:
                nxt = planned
            values = dict(wanted)
            values.update(
                enabled=enabled,
                next_run_at=nxt,
                last_run_at=later,
                published_fingerprint=printed,
                last_status=row["last_status"],
            )
            actions.replaces.append(
                Replace(id=int(row["id"]), version=int(row["version"]), values=values)
            )
            actions.refreshed.append(schedule.name)
            continue
        changes = definition_changes(stored, wanted)
        if quarantined:
            changes.append(FieldChange(field="last_status", old=SCHEDULE_INVALID, new=None))
        actions.changes[schedule.name] = changes
        values = dict(wanted)
        values["enabled"] = enabled
        # A changed definition, or a quarantined row (repaired by this publish).
        anchor = now if later is None else later
        values["next_run_at"] = schedule.first_run_after(anchor) if enabled else None
        values["last_status"] = None if quarantined else row["last_status"]
        values["last_run_at"] = later
        values["published_fingerprint"] = printed
        actions.replaces.append(
            Replace(id=int(row["id"]), version=int(row["version"]), values=values)
        )
        actions.updated.append(schedule.name)
    return actions


KEPT_WHEN_NONE = ("last_run_at", "published_fingerprint")
"""Columns a replace leaves as stored when its value is None (SQL: COALESCE)."""


def without_kept(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the None values of :data:`KEPT_WHEN_NONE`: what a store that
    updates a dict in place (memory) applies."""
    return {k: v for k, v in values.items() if not (v is None and k in KEPT_WHEN_NONE)}


def update_values(
    schedule: Schedule,
    row: Mapping[str, Any],
    *,
    now: datetime,
    definition: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Columns :meth:`ScheduleStore.update` writes: the definition, ``enabled``, and a
    ``next_run_at`` recomputed when the definition changed or the schedule was re-enabled."""
    wanted = definition if definition is not None else definition_of(schedule)
    values = dict(wanted)
    # An edit keeps the last run and the published fingerprint (that it differs now is how
    # an edit is told from a publish).
    values["last_run_at"] = None
    values["published_fingerprint"] = None
    values["enabled"] = bool(schedule.enabled)
    quarantined = row["last_status"] == SCHEDULE_INVALID
    values["last_status"] = None if quarantined else row["last_status"]
    if not schedule.enabled:
        values["next_run_at"] = None
    elif wanted != row_definition(row) or not row["enabled"] or quarantined:
        values["next_run_at"] = schedule.first_run_after(now)
    else:
        values["next_run_at"] = row["next_run_at"]
    return values


def enabled_values(
    row: Mapping[str, Any], enabled: bool, *, now: datetime
) -> dict[str, Any] | None:
    """Columns :meth:`ScheduleStore.set_enabled` writes (``enabled``, ``next_run_at``,
    ``last_status``), or None when there is nothing to change.

    Disabling never needs to decode the row, so a damaged one can always be disabled. Enabling
    does: a row that still cannot be decoded raises DamagedRow; one the scheduler quarantined
    and somebody repaired by hand is scheduled again from ``now``."""
    quarantined = row["last_status"] == SCHEDULE_INVALID
    if not enabled:
        if not row["enabled"]:
            return None
        return {"enabled": False, "next_run_at": None, "last_status": row["last_status"]}
    schedule = schedule_from_row(row)
    if row["enabled"] and not quarantined and row["next_run_at"] is not None:
        # Already running. (An enabled row without next_run_at is recomputed: a quarantine
        # whose mark a late submission outcome overwrote, or a trigger that has ended.)
        return None
    return {
        "enabled": True,
        "next_run_at": schedule.first_run_after(now),
        "last_status": None if quarantined else row["last_status"],
    }


# -- pause, resume, backfill -----------------------------------------------------------------

MAX_PAUSE_NOTE = 2000
MAX_PAUSED_BY = 200
PAUSE_WITHDRAWN = "skipped: the schedule was paused while this occurrence waited to start"

FAILURE_PAUSER = "goatbeat"
"""``paused_by`` of a pause that ``pause_on_failure`` made."""


def failure_pause(outcome: str, row: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """``(name, failures in a row)`` when a completion report with ``outcome`` pauses the
    schedule ``row`` (after the report was counted): a failure that brings the failures in a
    row to its ``pause_on_failure``; a schedule already paused stays as it is."""
    if row is None or outcome != ExecutionStatus.FAILED.value or row["paused"]:
        return None
    limit = row["pause_on_failure"]
    failures = int(row.get("consecutive_failures") or 0)
    if limit is None or failures < limit:
        return None
    return str(row["name"]), failures


def pause_after_failures(store: Any, name: str, failures: int) -> None:
    """Pause ``name`` as ``pause_on_failure`` does: by ``goatbeat``, the note saying why; a
    schedule deleted meanwhile is left alone."""
    try:
        store.pause(
            name,
            note=f"paused after {failures} failures in a row (pause_on_failure)",
            by=FAILURE_PAUSER,
        )
    except ScheduleNotFound:
        pass


def check_pause(note: Any, by: Any) -> tuple[str, str | None]:
    """``(note, by)`` as a pause stores them; InvalidValue naming the field otherwise."""
    if not isinstance(note, str):
        raise InvalidValue("note", note, f"{short_repr(note)} is not text")
    if len(note) > MAX_PAUSE_NOTE:
        raise InvalidValue("note", note, f"longer than {MAX_PAUSE_NOTE} characters")
    if "\x00" in note:
        raise InvalidValue("note", note, "contains a NUL character")
    if by is not None:
        if not isinstance(by, str) or "\x00" in by:
            raise InvalidValue("by", by, f"{short_repr(by)} is not a name")
        by = by.strip()[:MAX_PAUSED_BY] or None
    return note.strip(), by


def pause_values(
    row: Mapping[str, Any], *, note: str, by: str | None, now: datetime
) -> dict[str, Any]:
    """The pause columns :meth:`ScheduleStore.pause` writes (a pause keeps its first instant
    when the schedule is paused again, with a new note)."""
    since = utc(row["paused_at"]) if row["paused"] and row["paused_at"] is not None else now
    return {"paused": True, "paused_at": since, "paused_by": by, "pause_note": note}


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """What :meth:`ScheduleStore.resume` writes, and what it tells."""

    values: dict[str, Any]
    """paused, paused_at, paused_by, pause_note, next_run_at, skipped_count."""
    skipped: int = 0
    lower_bound: bool = False
    first_skipped: datetime | None = None

    def result(self, schedule: StoredSchedule, *, catch_up: bool) -> ResumeResult:
        """What the store's ``resume`` returns once these values are written."""
        return ResumeResult(
            schedule=schedule,
            was_paused=True,
            catch_up=catch_up,
            skipped=self.skipped,
            skipped_is_lower_bound=self.lower_bound,
            first_skipped=self.first_skipped,
        )


def resume_values(row: Mapping[str, Any], *, catch_up: bool, now: datetime) -> Resume | None:
    """The columns a resume writes, or None when the row is not paused. From now, the
    instants from the stored ``next_run_at`` to ``now`` are counted as skipped; a damaged row
    is only unpaused (the claim quarantines it when it comes due)."""
    if not row["paused"]:
        return None
    values: dict[str, Any] = {
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "pause_note": "",
        "next_run_at": utc(row["next_run_at"]),
        "skipped_count": int(row["skipped_count"]),
    }
    first = values["next_run_at"]
    if catch_up or not row["enabled"] or first is None:
        return Resume(values=values)
    try:
        schedule = schedule_from_row(row)
    except DamagedRow:
        return Resume(values=values)
    values["next_run_at"] = schedule.first_run_after(now)
    if first > now:
        return Resume(values=values)
    count, lower_bound = count_instants(schedule, first, now)
    values["skipped_count"] += count
    return Resume(
        values=values,
        skipped=count,
        lower_bound=lower_bound,
        first_skipped=first if count else None,
    )


def backfill_instants(
    row: Mapping[str, Any], *, start: datetime, end: datetime, limit: int, now: datetime
) -> list[datetime]:
    """The instants a backfill of ``[start, end)`` submits, checked: InvalidValue naming
    ``start``, ``end`` or ``limit``; DamagedRow for a row that cannot be decoded."""
    check_positive("limit", limit)
    start = to_utc(ensure_aware(start, "start"), "start")
    end = to_utc(ensure_aware(end, "end"), "end")
    if end <= start:
        raise InvalidValue("end", end, f"{iso_z(end)} is not after the start {iso_z(start)}")
    if end > now:
        raise InvalidValue(
            "end",
            end,
            f"{iso_z(end)} is later than now ({iso_z(now)}): a backfill covers past instants only",
        )
    schedule = schedule_from_row(row)
    instants = instants_between(schedule, start, end, limit=limit)
    if len(instants) > limit:
        raise InvalidValue(
            "limit",
            limit,
            f"{iso_z(start)} .. {iso_z(end)} holds more than {limit} instants of "
            f"{schedule.name!r}; narrow the range or raise the limit",
        )
    return instants
