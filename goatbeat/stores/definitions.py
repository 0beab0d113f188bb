"""What a schedule's definition is, as the stores keep it: its columns, the checks every
store makes before writing one, the definition normalised as it reads back from a column, and
the fingerprint a publication records.

A *row* is a plain dict keyed by column name holding Python values (JSON columns as
lists/dicts, instants as aware UTC datetimes, booleans as bool). Each dialect converts between
its own encoding and rows; what a definition is, is decided once, here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import InvalidSchedule, InvalidValue, short_repr
from goatbeat.core.model import MAX_NAME_LENGTH, Routing, Schedule, Source
from goatbeat.core.solar import SolarTrigger
from goatbeat.core.store import FieldChange, definition_changes
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
    trigger_from_spec,
)

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

JSON_COLUMNS = frozenset({"trigger", "args", "kwargs", "headers"})
"""The schedule columns that hold JSON (``jsonb`` on PostgreSQL, text on SQLite)."""

SCHEDULE_TIMES = (
    "start_at",
    "end_at",
    "next_run_at",
    "last_run_at",
    "created_at",
    "updated_at",
    "paused_at",
)
"""The instants of a schedule row."""

# Column widths of the schema: checked up front so every store refuses the same values
# (PostgreSQL would fail mid-transaction; SQLite and memory would accept them silently).
_MAX_LENGTHS = {
    "task": 255,
    "queue": 200,
    "exchange": 200,
    "routing_key": 200,
    "timezone": 64,
}


def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


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


class SetFingerprint:
    """The fingerprint of a whole code publication: every declaration's name and definition,
    in name order, so the same code gives the same fingerprint in every process, whichever
    path validated it (a :class:`Comparison` part or a full definition). What
    ``goatbeat_publication`` records to tell an older code set from a newer one.

    The values are JSON values, instants and enum values (what a definition holds), whose
    ``repr`` is the same in every process: it stands for their text at a fraction of the cost
    of JSON (100,000 declarations: 0.25 s on a loaded 2-core machine)."""

    def __init__(self) -> None:
        self._entries: list[str] = []
        self.parts: list[tuple[Any, ...]] = []
        """:meth:`Comparison.add` parts as ``(name, args, kwargs, headers, k)``, ``k`` the
        index of their combination in :attr:`comparison`'s ``shared`` before any renumbering:
        the caller appends them (one call per declaration on the publish path), the text is
        made at :meth:`digest`."""
        self.comparison: Comparison | None = None

    def add_definition(self, name: str, definition: Mapping[str, Any]) -> None:
        shared = repr([definition[c] for c in SHARED_COLUMNS])
        own = (name, definition["args"], definition["kwargs"], definition["headers"])
        self._entries.append(f"{own[0]!r}{own[1]!r}{own[2]!r}{own[3]!r}{shared}")

    def digest(self) -> str:
        if self.parts:
            assert self.comparison is not None
            # Every combination is some part's: its text made once.
            texts = [repr(shared) for shared in self.comparison.shared]
            self._entries += [
                f"{name!r}{args!r}{kwargs!r}{headers!r}{texts[k]}"
                for name, args, kwargs, headers, k in self.parts
            ]
            self.parts.clear()
        # Each entry starts with its name's repr: sorted, the order of the declarations
        # does not matter.
        self._entries.sort()
        text = "\x1e".join(self._entries)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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
    declared_enabled: bool | None = None,
) -> dict[str, Any]:
    """Columns to insert for a new schedule (the store adds id, version and timestamps).
    ``published``: a publish writes it, so its definition's fingerprint is recorded (with
    ``declared_enabled``, the source's flag: :func:`fingerprint`)."""
    row = dict(definition) if definition is not None else definition_of(schedule)
    row.update(
        name=schedule.name,
        source=Source(source).value,
        enabled=bool(enabled),
        next_run_at=utc(next_run_at),
        last_run_at=utc(schedule.last_run_at),
        total_run_count=int(schedule.total_run_count),
        published_fingerprint=fingerprint(row, declared_enabled) if published else None,
        # A new row starts unpaused (a declaration cannot pause: that is an operator's act).
        paused=False,
        paused_at=None,
        paused_by=None,
        pause_note="",
        skipped_count=0,
    )
    return row


def fingerprint(definition: Mapping[str, Any], declared_enabled: bool | None = None) -> str:
    """A hash of a definition (:func:`definition_of` / :func:`row_definition`, whose values
    compare equal exactly when the definitions are the same): what publish records, so an
    edit made since can be told apart from the publish's own write.

    ``declared_enabled``: the source's ``enabled`` flag at that publish, hashed in when given
    (importer publications, ``follow_last_run``), so the next one can tell a change the
    source made to it from an operator's toggle in goatbeat (:func:`published_enabled`)
    without another column. Without it, the hash of the definition alone (code
    publications, and every fingerprint recorded before)."""
    text = definition_text(definition)
    if declared_enabled is not None:
        text += "\nenabled" if declared_enabled else "\ndisabled"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def published_enabled(row: Mapping[str, Any]) -> bool | None:
    """The ``enabled`` flag the source declared at the publish that recorded the row's
    fingerprint; None when unknown: no fingerprint, one recorded without the flag (code
    publications, imports before goatbeat 0.7.1), or a definition edited since."""
    recorded = row.get("published_fingerprint")
    if recorded is None:
        return None
    definition = row_definition(row)
    for flag in (True, False):
        if recorded == fingerprint(definition, flag):
            return flag
    return None


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
    if recorded is None:
        return False
    definition = row_definition(row)
    return recorded not in {fingerprint(definition, flag) for flag in (None, True, False)}


def first_run(schedule: Schedule, anchor: datetime) -> datetime | None:
    """``next_run_at`` of a schedule (re)starting at ``anchor``; None when disabled."""
    if not schedule.enabled:
        return None
    return schedule.first_run_after(anchor)


@lru_cache(maxsize=8192)
def trigger_from_text(text: str) -> Trigger:
    # Triggers are immutable values, so one parsed trigger can serve every row that shares the
    # spec: claiming 10,000 cron schedules should not parse 10,000 cron expressions.
    return trigger_from_spec(json.loads(text))


@lru_cache(maxsize=8192)
def _trigger_from_items(items: tuple[tuple[str, Any], ...]) -> Trigger:
    return trigger_from_spec(dict(items))


def trigger_of(spec: Any) -> Trigger:
    if isinstance(spec, str):
        return trigger_from_text(spec)
    if isinstance(spec, dict):
        # Flat specs (every built-in trigger's) are keyed by their items, ~8x cheaper than
        # dumping them to text; a nested one falls through to the text key.
        try:
            return _trigger_from_items(tuple(sorted(spec.items())))
        except TypeError:  # an unhashable value
            pass
    return trigger_from_text(json.dumps(spec, sort_keys=True))
