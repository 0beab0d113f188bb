"""What every store shares: validation before writing, Schedule <-> row conversion, planning a
claim batch, and notification payloads.

A *row* here is a plain dict keyed by column name holding Python values (JSON columns as
lists/dicts, instants as aware UTC datetimes, booleans as bool). Each store converts between
its own encoding and rows; everything else (what a definition is, what a claim writes) is
decided once, here, so the three stores cannot drift apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from goatbeat.core.errors import InvalidSchedule, InvalidValue
from goatbeat.core.misfire import Plan
from goatbeat.core.model import (
    MAX_NAME_LENGTH,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    MisfirePolicy,
    Occurrence,
    Routing,
    Schedule,
    Source,
    idempotency_key,
)
from goatbeat.core.triggers import Trigger, trigger_from_spec

__all__ = [
    "Planner",
    "SCHEDULE_COLUMNS",
    "DEFINITION_COLUMNS",
    "validate_schedule",
    "validate_batch",
    "schedule_to_row",
    "definition_of",
    "row_definition",
    "schedule_from_row",
    "execution_from_row",
    "occurrence_from_row",
    "ClaimPlan",
    "plan_batch",
    "validate_payload",
    "check_payload",
    "utc",
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
)

SCHEDULE_COLUMNS = (
    "id",
    "name",
    "source",
    *DEFINITION_COLUMNS,
    "enabled",
    "next_run_at",
    "last_run_at",
    "last_status",
    "total_run_count",
    "missed_count",
    "version",
    "created_at",
    "updated_at",
)

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


def _json_normal(field_name: str, value: Any) -> Any:
    """``value`` as it will read back from a JSON column (tuples become lists...)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidSchedule(field_name, value, f"{value!r} is not JSON-serialisable: {exc}")


def validate_schedule(schedule: Schedule) -> None:
    """Everything a store needs to be true before it writes ``schedule``.

    Schedule's constructor already validates; this re-checks what the store depends on and
    what the constructor cannot see: the trigger must survive the round trip through its spec
    (a custom trigger, or a spec with an unknown zone, would be unreadable later), JSON fields
    must serialise (frozen dataclasses can be bypassed), and values must fit the columns."""
    if not isinstance(schedule, Schedule):
        raise InvalidSchedule("schedule", schedule, f"{schedule!r} is not a Schedule")
    if not isinstance(schedule.name, str) or not schedule.name.strip():
        raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} is not a name")
    if len(schedule.name) > MAX_NAME_LENGTH:
        raise InvalidSchedule("name", schedule.name, f"longer than {MAX_NAME_LENGTH}")
    try:
        spec = schedule.trigger.to_spec()
    except InvalidValue:
        raise
    except Exception as exc:  # a foreign trigger object: report it on the field, not a crash
        raise InvalidSchedule("trigger", schedule.trigger, f"cannot describe trigger: {exc}")
    spec = _json_normal("trigger", spec)
    rebuilt = trigger_from_spec(spec)  # raises InvalidCron / InvalidTimezone / ... by field
    if rebuilt.to_spec() != spec and _json_normal("trigger", rebuilt.to_spec()) != spec:
        raise InvalidSchedule("trigger", spec, "the trigger does not survive its own spec")
    _json_normal("args", list(schedule.args))
    if not isinstance(schedule.kwargs, Mapping) or not all(
        isinstance(k, str) for k in schedule.kwargs
    ):
        raise InvalidSchedule("kwargs", schedule.kwargs, "must be a JSON object")
    _json_normal("kwargs", dict(schedule.kwargs))
    _json_normal("headers", dict(schedule.routing.headers))
    _reject_nul(schedule)
    values = {
        "task": schedule.task,
        "queue": schedule.routing.queue,
        "exchange": schedule.routing.exchange,
        "routing_key": schedule.routing.routing_key,
        "timezone": schedule.timezone,
    }
    for name, limit in _MAX_LENGTHS.items():
        value = values[name]
        if value is not None and len(value) > limit:
            raise InvalidSchedule(name, value, f"{value[:40]!r}... is longer than {limit}")


def _reject_nul(schedule: Schedule) -> None:
    """PostgreSQL cannot store NUL in text or jsonb; refuse it everywhere so every store
    accepts the same schedules."""
    texts = {
        "name": schedule.name,
        "task": schedule.task,
        "description": schedule.description,
        "queue": schedule.routing.queue,
        "exchange": schedule.routing.exchange,
        "routing_key": schedule.routing.routing_key,
    }
    for name, text in texts.items():
        if isinstance(text, str) and "\x00" in text:
            raise InvalidSchedule(name, text, f"{text[:40]!r} contains a NUL character")
    for name, value in (
        ("args", list(schedule.args)),
        ("kwargs", dict(schedule.kwargs)),
        ("headers", dict(schedule.routing.headers)),
    ):
        if _has_nul(value):
            raise InvalidSchedule(name, value, "contains a NUL character")


def _has_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
    return False


def validate_batch(schedules: Sequence[Schedule]) -> None:
    """Validate a whole publish batch before anything is written; names must be unique."""
    seen: set[str] = set()
    for schedule in schedules:
        validate_schedule(schedule)
        if schedule.name in seen:
            raise InvalidSchedule("name", schedule.name, f"{schedule.name!r} is declared twice")
        seen.add(schedule.name)


def definition_of(schedule: Schedule) -> dict[str, Any]:
    """The definition columns of ``schedule``, normalised as they read back from a store."""
    routing = schedule.routing
    return {
        "task": schedule.task,
        "trigger": _json_normal("trigger", schedule.trigger.to_spec()),
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
    }


def row_definition(row: Mapping[str, Any]) -> dict[str, Any]:
    """The definition columns of a stored row, comparable with :func:`definition_of`."""
    out = {name: row[name] for name in DEFINITION_COLUMNS}
    out["start_at"] = utc(out["start_at"])
    out["end_at"] = utc(out["end_at"])
    out["one_off"] = bool(out["one_off"])
    out["misfire_grace"] = float(out["misfire_grace"])
    if out["expires"] is not None:
        out["expires"] = float(out["expires"])
    return out


def schedule_to_row(
    schedule: Schedule,
    *,
    source: Source,
    enabled: bool,
    next_run_at: datetime | None,
) -> dict[str, Any]:
    """Columns to insert for a new schedule (the store adds id, version and timestamps)."""
    row = definition_of(schedule)
    row.update(
        name=schedule.name,
        source=Source(source).value,
        enabled=bool(enabled),
        next_run_at=utc(next_run_at),
        last_run_at=utc(schedule.last_run_at),
        total_run_count=int(schedule.total_run_count),
    )
    return row


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


def trigger_of(spec: Any) -> Trigger:
    if isinstance(spec, str):
        return _trigger_from_text(spec)
    return _trigger_from_text(json.dumps(spec, sort_keys=True))


def schedule_from_row(row: Mapping[str, Any]) -> Schedule:
    """Rebuild a Schedule (definition and state) from a stored row."""
    expires = row["expires"]
    return Schedule(
        name=row["name"],
        task=row["task"],
        trigger=trigger_of(row["trigger"]),
        args=tuple(row["args"]),
        kwargs=row["kwargs"],
        routing=Routing(
            queue=row["queue"],
            exchange=row["exchange"],
            routing_key=row["routing_key"],
            priority=row["priority"],
            expires=None if expires is None else float(expires),
            headers=row["headers"] or {},
        ),
        misfire=MisfirePolicy(row["misfire_policy"]),
        misfire_grace=timedelta(seconds=float(row["misfire_grace"])),
        catch_up_limit=int(row["catch_up_limit"]),
        start_at=row["start_at"],
        end_at=row["end_at"],
        one_off=bool(row["one_off"]),
        description=row["description"],
        source=Source(row["source"]),
        enabled=bool(row["enabled"]),
        id=int(row["id"]),
        next_run_at=row["next_run_at"],
        last_run_at=row["last_run_at"],
        last_status=row["last_status"],
        total_run_count=int(row["total_run_count"]),
        missed_count=int(row["missed_count"]),
        version=int(row["version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


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
    )


def occurrence_from_row(row: Mapping[str, Any]) -> Occurrence:
    """An occurrence from a pending-execution row joined with its schedule's columns."""
    scheduled_at = utc(row["scheduled_at"])
    assert scheduled_at is not None
    expires = row["expires"]
    return Occurrence(
        execution_id=int(row["execution_id"]),
        schedule_id=int(row["schedule_id"]),
        schedule_name=row["schedule_name"],
        task=row["task"],
        args=tuple(row["args"]),
        kwargs=dict(row["kwargs"]),
        routing=Routing(
            queue=row["queue"],
            exchange=row["exchange"],
            routing_key=row["routing_key"],
            priority=row["priority"],
            expires=None if expires is None else float(expires),
            headers=row["headers"] or {},
        ),
        scheduled_at=scheduled_at,
        idempotency_key=row["idempotency_key"],
        kind=ExecutionKind(row["kind"]),
        fencing_token=None if row["fencing_token"] is None else int(row["fencing_token"]),
        attempts=int(row["attempts"]),
    )


@dataclass(slots=True)
class Advance:
    """The compare-and-set one planned schedule asks for."""

    schedule: Schedule
    plan: Plan
    disable: bool  # a one_off schedule that is being claimed

    @property
    def last_run_at(self) -> datetime | None:
        return self.plan.run_at[-1] if self.plan.run_at else None

    @property
    def last_status(self) -> str | None:
        return ExecutionStatus.CLAIMED.value if self.plan.run_at else None


@dataclass(slots=True)
class ClaimPlan:
    """A planned claim batch: schedule advances and the executions they bring."""

    advances: list[Advance] = field(default_factory=list)
    schedules_seen: int = 0

    def executions_for(self, advanced_ids: set[int]) -> list[tuple[Schedule, datetime, str]]:
        """(schedule, scheduled_at, idempotency key) of every planned instant of the
        schedules whose compare-and-set succeeded."""
        out: list[tuple[Schedule, datetime, str]] = []
        for adv in self.advances:
            assert adv.schedule.id is not None
            if adv.schedule.id in advanced_ids:
                for at in adv.plan.run_at:
                    out.append((adv.schedule, at, idempotency_key(adv.schedule.name, at)))
        # Occurrences go out oldest first, whatever order the rows were locked in.
        out.sort(key=lambda item: (item[1], item[0].id or 0))
        return out

    def missed_for(self, advanced_ids: set[int]) -> int:
        return sum(
            adv.plan.missed
            for adv in self.advances
            if adv.schedule.id is not None and adv.schedule.id in advanced_ids
        )


def plan_batch(schedules: Sequence[Schedule], now: datetime, planner: Planner) -> ClaimPlan:
    """Plan every schedule read by a claim. The advances come sorted by id so that stores
    lock rows in one global order."""
    result = ClaimPlan(schedules_seen=len(schedules))
    for schedule in sorted(schedules, key=lambda s: s.id or 0):
        p = planner(schedule, now)
        if not p.due and p.next_run_at == schedule.next_run_at:
            continue
        result.advances.append(
            Advance(schedule=schedule, plan=p, disable=schedule.one_off and bool(p.run_at))
        )
    return result


def occurrence_for(
    schedule: Schedule,
    *,
    execution_id: int,
    scheduled_at: datetime,
    key: str,
    token: int | None,
    kind: ExecutionKind = ExecutionKind.SCHEDULED,
) -> Occurrence:
    assert schedule.id is not None
    return Occurrence(
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
    )


_PAYLOAD = re.compile(r"\A(?:schedule:[0-9]{1,19}|run:[0-9]{1,19}|lease:[A-Za-z0-9_.:-]{1,64})\Z")


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


def check_positive(field_name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidValue(field_name, value, f"{value!r} must be a positive integer")
    return value


@dataclass(slots=True)
class Replace:
    """A definition change for an existing row, written with compare-and-set on ``version``."""

    id: int
    version: int
    values: dict[str, Any]  # definition columns + enabled + next_run_at


@dataclass(slots=True)
class PublishActions:
    inserts: list[dict[str, Any]] = field(default_factory=list)
    replaces: list[Replace] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.inserts or self.replaces)


def plan_publish(
    schedules: Sequence[Schedule],
    existing: Mapping[str, Mapping[str, Any]],
    *,
    source: Source,
    now: datetime,
) -> PublishActions:
    """Decide what publishing ``schedules`` writes, given the stored rows with those names.

    Raises InvalidSchedule (field ``name``) when a name belongs to another source, before
    anything is written. The stored ``enabled`` flag always wins over the declared one."""
    source = Source(source)
    actions = PublishActions()
    for schedule in schedules:
        row = existing.get(schedule.name)
        if row is None:
            anchor = schedule.last_run_at or now
            actions.inserts.append(
                schedule_to_row(
                    schedule,
                    source=source,
                    enabled=schedule.enabled,
                    next_run_at=first_run(schedule, anchor),
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
        wanted = definition_of(schedule)
        if wanted == row_definition(row):
            actions.unchanged.append(schedule.name)
            continue
        enabled = bool(row["enabled"])
        values = dict(wanted)
        values["enabled"] = enabled
        values["next_run_at"] = schedule.first_run_after(now) if enabled else None
        actions.replaces.append(
            Replace(id=int(row["id"]), version=int(row["version"]), values=values)
        )
        actions.updated.append(schedule.name)
    return actions


def update_values(schedule: Schedule, row: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """Columns :meth:`ScheduleStore.update` writes: the definition, ``enabled``, and a
    ``next_run_at`` recomputed when the definition changed or the schedule was re-enabled."""
    wanted = definition_of(schedule)
    values = dict(wanted)
    values["enabled"] = bool(schedule.enabled)
    if not schedule.enabled:
        values["next_run_at"] = None
    elif wanted != row_definition(row) or not row["enabled"]:
        values["next_run_at"] = schedule.first_run_after(now)
    else:
        values["next_run_at"] = row["next_run_at"]
    return values
