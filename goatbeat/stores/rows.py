"""Rows read back into values: a stored schedule row into a Schedule (checked as a
declaration would be, or cheaply on the claim path, or cached by version), a damaged one into a
DamagedSchedule naming the column, and execution rows into Executions and Occurrences.
"""

from __future__ import annotations

import json
import math
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.errors import DamagedRow, InvalidValue, short_repr
from goatbeat.core.jitter import MAX_JITTER, jittered
from goatbeat.core.model import (
    ACTIVE_STATUSES,
    FIELD_RULES,
    MAX_CATCH_UP_LIMIT,
    MAX_PAUSE_ON_FAILURE,
    DamagedSchedule,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    Occurrence,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
    StoredSchedule,
)
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import Trigger
from goatbeat.stores.definitions import (
    DEFINITION_COLUMNS,
    SCHEDULE_TIMES,
    STATE_FIELDS,
    trigger_of,
    utc,
)


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

_TRUSTED_TIMES = SCHEDULE_TIMES  # a schedule row's time columns (stores/definitions.py)
_COUNTERS = ("total_run_count", "missed_count", "version", "skipped_count")


class _Bad(Exception):
    """One column's problem, turned into DamagedRow by the caller that knows the column."""


def _check_expires(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, str)):
        raise _Bad(f"{short_repr(value)} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise _Bad(f"{short_repr(value)} must be a finite number of seconds > 0")
    return seconds


_NO_TIME = timedelta(0)
_SECONDS = frozenset({"misfire_grace", "jitter", "max_runtime"})
"""The fields stored as a number of seconds (the field is a timedelta)."""
_NOT = {
    "catch_up_limit": f"an integer in 1..{MAX_CATCH_UP_LIMIT}",
    "pause_on_failure": f"an integer in 1..{MAX_PAUSE_ON_FAILURE}",
    "task": "a task name",
    "description": "text",
    "pause_note": "text",
}
"""What a column of the other fields checked as stored must be, as a refusal says it."""


def _checked(field: str, value: Any) -> Any:
    """The column of ``field`` as the field's value, held to the field's rule
    (:data:`~goatbeat.core.model.FIELD_RULES`), which the value as stored already meets (a
    column of seconds turned into its timedelta first); a refusal names the column's form."""
    rule = FIELD_RULES[field]
    if field not in _SECONDS:
        if not rule.check(value):
            raise _Bad(f"{short_repr(value)} is not {_NOT[field]}")
        return value
    if value is None and rule.check(None):
        return None
    if isinstance(value, (bool, str)) or value is None:
        raise _Bad(f"{short_repr(value)} is not a number of seconds")
    seconds = float(value)
    if math.isfinite(seconds) and seconds >= 0:  # (a negative under 1 µs rounds to 0)
        delta = timedelta(seconds=seconds)
        if rule.check(delta):
            return delta
        if delta > _NO_TIME:
            # Of the fields of seconds only jitter has an upper bound.
            raise _Bad(f"{short_repr(value)} is longer than a day")
    strict = not rule.check(_NO_TIME)
    raise _Bad(
        f"{short_repr(value)} must be a finite number of seconds {'>' if strict else '>='} 0"
    )


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
    column; the claim quarantines that row and goes on with the others. The checks are those
    of :class:`ScheduleCache`: :func:`_shared_checks`, then :func:`_row_checks`."""
    try:
        shared = _shared_checks(row, json_text)
    except DamagedRow as exc:
        raise _first_damage(row, json_text, exc) from None
    return _row_checks(row, json_text, shared)


def _first_damage(row: Mapping[str, Any], json_text: bool, exc: DamagedRow) -> DamagedRow:
    """Of ``exc`` (a column the schedules share refused) and the first of the row's own
    columns refused, the one in the column read first (:data:`_READ_ORDER`)."""
    try:
        _row_checks(row, json_text, None)
    except DamagedRow as own:
        if _READ_ORDER[own.column] < _READ_ORDER[exc.column]:
            return own
    return exc


_READ_ORDER = {
    column: i
    for i, column in enumerate(
        ("trigger", "timezone", "task", "args", "kwargs", "headers", "queue", "exchange",
         "routing_key", "priority", "expires", "misfire_policy", "source", "misfire_grace",
         "catch_up_limit", *_TRUSTED_TIMES, *_COUNTERS, "description", "jitter", "overlap",
         "max_runtime", "pause_on_failure", "pause_note")
    )
}  # fmt: skip
"""The columns of a schedule row in the order they are checked: of two damaged ones, the
first is named, however the checks are split."""

_Shared = tuple[dict[str, Any], tuple[Any, ...], Any]
_FAULTS = (InvalidValue, _Bad, TypeError, ValueError, AttributeError, OverflowError)
"""What a check raises for a damaged column (a trigger's own error names the field inside the
spec, "timezone: ...": its message is kept)."""


def _shared_checks(row: Mapping[str, Any], json_text: bool) -> _Shared:
    """The checks of the :data:`_SHARED_COLUMNS` (made once per distinct combination on the
    claim path): the values they give, the routing options but the headers, and the headers
    as stored (JSON text or decoded; None when empty). Raises DamagedRow naming the column."""
    column = "trigger"
    try:
        spec = row["trigger"]
        if not json_text and isinstance(spec, str):
            raise _Bad(f"{short_repr(spec)} is not a JSON object")
        trigger = trigger_of(spec)
        column = "timezone"
        _check_zone(row["timezone"], trigger)
        column = "task"
        values: dict[str, Any] = {"task": _checked("task", row["task"]), "trigger": trigger}
        routing, headers = _routing_checks(row, row.get("name"), json_text)
        column = "misfire_policy"
        values["misfire"] = MisfirePolicy(row["misfire_policy"])
        column = "source"
        values["source"] = Source(row["source"])
        for column in ("misfire_grace", "catch_up_limit", "jitter"):
            values[column] = _checked(column, row[column])
        column = "overlap"
        values["overlap"] = overlap = OverlapPolicy(row["overlap"])
        column = "max_runtime"
        values["max_runtime"] = _checked("max_runtime", row["max_runtime"])
        if overlap is not OverlapPolicy.ALLOW and values["max_runtime"] is None:
            raise _Bad(f"NULL, but overlap {overlap.value!r} needs it")
        column = "pause_on_failure"
        values["pause_on_failure"] = _checked("pause_on_failure", row["pause_on_failure"])
    except DamagedRow:
        raise
    except _FAULTS as exc:
        raise DamagedRow(row.get("name"), column, row.get(column), str(exc)) from None
    return values, routing, headers


def _row_checks(row: Mapping[str, Any], json_text: bool, shared: _Shared | None) -> Schedule:
    """The checks of a row's own columns (args, kwargs, instants, counters, texts), and the
    Schedule they make with ``shared`` (:func:`_shared_checks`); with ``shared`` None, the
    checks only (raising DamagedRow naming the column; the return value is then None)."""
    column = "args"
    try:
        args = _json(row["args"], json_text, list, "a JSON array")
        column = "kwargs"
        kwargs = _json(row["kwargs"], json_text, dict, "a JSON object")
        values = {}
        for column in _TRUSTED_TIMES:
            value = row[column]
            values[column] = None if value is None else value.astimezone(UTC)
        column = "end_at"
        start_at, end_at = values["start_at"], values["end_at"]
        if start_at and end_at and end_at < start_at:
            raise _Bad(f"{end_at.isoformat()} is before start_at")
        for column in _COUNTERS:
            values[column] = int(row[column])
        column = "description"
        description = row["description"]
        if type(description) is not str:
            _checked("description", description)
        column = "pause_note"
        note = row["pause_note"]
        if type(note) is not str:
            _checked("pause_note", note)
    except _FAULTS as exc:
        raise DamagedRow(row.get("name"), column, row.get(column), str(exc)) from None
    if shared is None:
        return None  # type: ignore[return-value]
    common, (queue, exchange, routing_key, priority, expires), headers = shared
    if headers is None:
        headers = {}
    elif json_text:  # decoded afresh for each row: no two schedules share a mutable dict
        headers = _json(headers, True, dict, "")
    values |= common
    values["name"] = row["name"]
    values["args"] = tuple(args)
    values["kwargs"] = kwargs
    values["routing"] = Routing._trusted(
        queue=queue,
        exchange=exchange,
        routing_key=routing_key,
        priority=priority,
        expires=expires,
        headers=headers,
    )
    values["one_off"] = bool(row["one_off"])
    values["description"] = description
    values["enabled"] = bool(row["enabled"])
    values["id"] = int(row["id"])
    values["last_status"] = row["last_status"]
    values["paused"] = bool(row["paused"])
    values["paused_by"] = row["paused_by"]
    values["pause_note"] = note
    return Schedule._trusted(values)


def _routing_checks(
    row: Mapping[str, Any], name: Any, json_text: bool
) -> tuple[tuple[Any, ...], Any]:
    """The routing columns checked: queue, exchange, routing key, priority and expires, and
    the headers as stored (JSON text or decoded; None when NULL or empty JSON text). Raises
    DamagedRow naming schedule ``name`` and the column."""
    column = "headers"
    try:
        headers = row["headers"]
        if json_text and headers == "{}":
            headers = None
        elif headers is not None:
            _json(headers, json_text, dict, "a JSON object")
        for column in ("queue", "exchange", "routing_key"):
            value = row[column]
            if value is not None and (type(value) is not str or not value):
                raise _Bad(f"{short_repr(value)} must be a non-empty string or NULL")
        column = "priority"
        priority = row["priority"]
        if priority is not None and (type(priority) is not int or not -100 <= priority <= 255):
            raise _Bad(f"{short_repr(priority)} is not an integer in -100..255")
        column = "expires"
        expires = _check_expires(row["expires"])
    except _FAULTS as exc:
        raise DamagedRow(name, column, row.get(column), str(exc)) from None
    return (row["queue"], row["exchange"], row["routing_key"], priority, expires), headers


def _payload(row: Mapping[str, Any], name: Any) -> tuple[str, list[Any], dict[str, Any], Routing]:
    """What a submission carries (task, args, kwargs, routing) on the pending (resubmission)
    path, checked column by column as a schedule row's are."""
    column = "task"
    try:
        task = _checked("task", row["task"])
        column = "args"
        args = _json(row["args"], False, list, "a JSON array")
        column = "kwargs"
        kwargs = _json(row["kwargs"], False, dict, "a JSON object")
    except _FAULTS as exc:
        raise DamagedRow(name, column, row.get(column), str(exc)) from None
    (queue, exchange, routing_key, priority, expires), headers = _routing_checks(row, name, False)
    routing = Routing._trusted(
        queue=queue,
        exchange=exchange,
        routing_key=routing_key,
        priority=priority,
        expires=expires,
        headers={} if headers is None else headers,
    )
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


_TIME_STATE = tuple(c for c in SCHEDULE_TIMES if c in STATE_FIELDS)


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
        self._shared: dict[tuple[Any, ...], _Shared] = {}
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
        shared_key = (*_read_shared(row), *map(type, _read_numbers(row)))
        try:
            shared = self._shared[shared_key]
        except TypeError:  # an unhashable column (goatbeat writes none): checked unshared
            return trusted_schedule_from_row(row, json_text=True)
        except KeyError:
            try:
                shared = _shared_checks(row, True)
            except DamagedRow as exc:
                raise _first_damage(row, True, exc) from None
            with self._lock:
                if len(self._shared) >= self.shared_maxsize:
                    self._shared.clear()  # a crowd of one-of-a-kind definitions: start over
                self._shared[shared_key] = shared
        return _row_checks(row, True, shared)

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
