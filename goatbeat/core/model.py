"""The values goatbeat passes around: schedules, occurrences, executions, lease grants.

All are frozen dataclasses; stores and the scheduler exchange them, never rows or ORM objects.
Constructing a :class:`Schedule` validates every field the way a user would hope: a bad value
raises an :class:`~goatbeat.core.errors.InvalidValue` naming the field, before anything is written.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.choices import MisfirePolicy, OverlapPolicy, Source
from goatbeat.core.errors import DamagedRow, short_repr
from goatbeat.core.fieldrules import (
    FIELD_RULES,
    MAX_CATCH_UP_LIMIT,
    MAX_NAME_LENGTH,
    MAX_PAUSE_ON_FAILURE,
    FieldRule,
    check_joint,
)
from goatbeat.core.jsonvalues import MAX_JSON_DEPTH, json_problem
from goatbeat.core.routing import Routing
from goatbeat.core.runs import (
    ACTIVE_STATUSES,
    ENDED_BY_REPORT,
    FAILURE_STATUSES,
    OPEN_STATUSES,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    LeaseGrant,
    Miss,
    Occurrence,
    SubmitOutcome,
    idempotency_key,
    manual_key,
)
from goatbeat.core.timeutil import iso_z
from goatbeat.core.triggers import Trigger

__all__ = [
    "MisfirePolicy",
    "OverlapPolicy",
    "ExecutionStatus",
    "ExecutionKind",
    "Source",
    "Routing",
    "Schedule",
    "DamagedSchedule",
    "StoredSchedule",
    "SCHEDULE_INVALID",
    "Occurrence",
    "Execution",
    "LeaseGrant",
    "Miss",
    "idempotency_key",
    "manual_key",
    "MAX_NAME_LENGTH",
    "MAX_JSON_DEPTH",
    "MAX_PAUSE_ON_FAILURE",
    "MAX_CATCH_UP_LIMIT",
    "FieldRule",
    "FIELD_RULES",
    "ACTIVE_STATUSES",
    # Importable from here as before (they live in goatbeat.core.runs):
    "OPEN_STATUSES",
    "FAILURE_STATUSES",
    "ENDED_BY_REPORT",
    "SubmitOutcome",
]

DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)
DEFAULT_CATCH_UP_LIMIT = 100
SCHEDULE_INVALID = "invalid"
"""``last_status`` of a schedule the scheduler quarantined: its stored row cannot be decoded,
so it is not scheduled (``next_run_at`` cleared) until the row is repaired (see
:class:`DamagedSchedule`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A periodic task: what to run (``task`` + args) and when (``trigger``).

    The first block of fields is the *definition* (what a user declares); the second block is
    state the store owns and fills in (``id``, ``next_run_at``, ``version``...). Two schedules
    with the same :meth:`definition` are the same declaration.
    """

    name: str
    task: str  # dotted path of the callable / the backend's task name
    trigger: Trigger
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    routing: Routing = field(default_factory=Routing)
    misfire: MisfirePolicy = MisfirePolicy.RUN_ONCE
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    start_at: datetime | None = None
    end_at: datetime | None = None
    one_off: bool = False  # disable after the first claimed occurrence (django-celery-beat)
    description: str = ""
    jitter: timedelta = timedelta(0)
    """Each occurrence is sent at its instant plus a deterministic offset in ``[0, jitter)``
    (:mod:`goatbeat.core.jitter`); its idempotency key stays the nominal instant."""
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    max_runtime: timedelta | None = None
    """How long after its submission a run still counts as running for ``overlap`` when its
    worker never reports its end (a worker that died). Required unless overlap is allow."""
    pause_on_failure: int | None = None
    """Pause the schedule after this many consecutive failed runs (as the backend reports
    them); None: never."""
    source: Source = Source.CODE
    enabled: bool = True

    # State owned by the store.
    id: int | None = None
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_status: str | None = None
    total_run_count: int = 0
    missed_count: int = 0
    version: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    paused: bool = False
    """Paused (``pause``): nothing is claimed until ``resume``; unlike ``enabled`` it carries
    who paused it, when, and why."""
    paused_at: datetime | None = None
    paused_by: str | None = None
    pause_note: str = ""
    skipped_count: int = 0
    """Occurrences skipped on purpose: by a pause (counted at ``resume``), and by the overlap
    policy."""

    def __post_init__(self) -> None:
        # Every field through its rule (FIELD_RULES, in this order), then the rules that join
        # two fields: the same checks, values and messages as the declaration fast path
        # (_declared) and, on the columns, the stores' row decoder.
        for set_, normalise, value in zip(
            _RULE_SETTERS, _NORMALISERS, _read_ruled(self), strict=True
        ):
            set_(self, normalise(value))
        check_joint(self.start_at, self.end_at, self.overlap, self.max_runtime)

    @property
    def timezone(self) -> str:
        """The zone the trigger reads wall-clock time in (``"UTC"`` for elapsed-time triggers)."""
        return str(getattr(self.trigger, "timezone", "UTC"))

    def definition(self) -> dict[str, Any]:
        """The declared part, JSON-able; equal definitions mean nothing to republish."""
        return {
            "task": self.task,
            "trigger": self.trigger.to_spec(),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "routing": self.routing.to_dict(),
            "misfire": self.misfire.value,
            "misfire_grace": self.misfire_grace.total_seconds(),
            "catch_up_limit": self.catch_up_limit,
            "start_at": None if self.start_at is None else self.start_at.isoformat(),
            "end_at": None if self.end_at is None else self.end_at.isoformat(),
            "one_off": self.one_off,
            "description": self.description,
            "jitter": self.jitter.total_seconds(),
            "overlap": self.overlap.value,
            "max_runtime": None if self.max_runtime is None else self.max_runtime.total_seconds(),
            "pause_on_failure": self.pause_on_failure,
        }

    def first_run_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after ``instant`` that respects start/end."""
        after = instant
        if self.start_at is not None and self.start_at > after:
            # start_at itself may be a fire instant: search from just before it.
            after = self.start_at - timedelta(microseconds=1)
        nxt = self.trigger.next_after(after)
        if nxt is None or (self.end_at is not None and nxt > self.end_at):
            return None
        return nxt

    def next_fire_times(self, count: int, now: datetime) -> list[datetime]:
        """The next ``count`` fire instants from ``next_run_at`` (from ``now`` when the store
        has not planned one yet; none when disabled and unplanned)."""
        result: list[datetime] = []
        t = self.next_run_at
        if t is None:
            if not self.enabled:
                return result
            t = self.first_run_after(now)
        while t is not None and len(result) < count:
            result.append(t)
            t = self.first_run_after(t)
        return result

    def ended(self, now: datetime) -> bool:
        """Whether it never fires again: past its ``end_at``, or a trigger with no instant
        left before it (a one-off that ran). Says nothing of enabled or paused."""
        if self.end_at is not None and self.end_at <= now:
            return True
        if self.next_run_at is not None:
            return False
        after = now if self.last_run_at is None else max(now, self.last_run_at)
        return self.first_run_after(after) is None

    def state(self, now: datetime) -> str:
        """``ended``, ``paused``, ``disabled`` or ``enabled``: what list and show print."""
        if self.ended(now):
            return "ended"
        if self.paused:
            return "paused"
        return "enabled" if self.enabled else "disabled"

    def evolve(self, **changes: Any) -> Schedule:
        return replace(self, **changes)

    @classmethod
    def _declared(
        cls,
        *,
        name: str,
        task: str,
        trigger: Trigger,
        args: Any,
        kwargs: Any,
        routing: Routing,
        misfire: Any,
        misfire_grace: timedelta,
        catch_up_limit: int,
        start_at: datetime | None,
        end_at: datetime | None,
        one_off: bool,
        description: str,
        jitter: timedelta,
        overlap: Any,
        max_runtime: timedelta | None,
        pause_on_failure: int | None,
        source: Any,
        enabled: bool,
    ) -> Schedule:
        """``Schedule(...)`` of these fields (the state at its defaults), for declarations:
        the same rules (:data:`FIELD_RULES`), the same value and the same errors, without the
        dataclass machinery's cost (a declaration is made tens of thousands of times at a
        large project's start)."""
        self = object.__new__(cls)
        for set_, normalise, kept, kind, default, value in zip(
            _DECLARED_RULE_SETTERS,
            _DECLARED_NORMALISERS,
            _DECLARED_KEPT,
            _DECLARED_DEFAULT_TYPES,
            _DECLARED_DEFAULTS,
            (
                name, task, trigger, args, kwargs, routing, misfire, misfire_grace,
                catch_up_limit, start_at, end_at, source, description, jitter, overlap,
                max_runtime, pause_on_failure,
            ),
            strict=True,
        ):  # fmt: skip
            if type(value) in kept:
                set_(self, value)  # what the normaliser keeps as it is, whatever its value
            elif type(value) is kind and value == default:
                # The field's default as its rule would keep it (a declaration leaves most
                # fields at theirs): the value itself, the normaliser kept it as it is; a
                # new empty dict for kwargs, the normaliser's copy of an empty one.
                set_(self, {} if kind is dict else value)
            else:
                set_(self, normalise(value))
        _set_one_off(self, one_off)
        _set_enabled(self, enabled)
        for set_, value in _STATE_SETTERS:
            set_(self, value)
        if self.overlap is not OverlapPolicy.ALLOW or (
            self.start_at is not None and self.end_at is not None
        ):
            # check_joint finds nothing to refuse otherwise.
            check_joint(self.start_at, self.end_at, self.overlap, self.max_runtime)
        return self

    @classmethod
    def _trusted(cls, values: Mapping[str, Any]) -> Schedule:
        """For stores only: a Schedule from ``values`` (one per field, already in their final
        types: tuple args, dict kwargs, enums, aware UTC datetimes) that were validated when
        they were written, without running :meth:`__post_init__` again.

        Rebuilding the schedules of a claim batch is the claim path's largest cost, and
        re-checking JSON that came out of a JSON column finds nothing new. The stores check
        what a corrupted row could still get wrong (see ``goatbeat.stores.rows``)."""
        self = object.__new__(cls)
        for set_, name in _NAMED_SETTERS:
            set_(self, values[name])
        return self


_SCHEDULE_FIELDS = Schedule.__slots__


_DECLARED_FIELDS = (
    "name", "task", "trigger", "args", "kwargs", "routing", "misfire", "misfire_grace",
    "catch_up_limit", "start_at", "end_at", "one_off", "description", "jitter", "overlap",
    "max_runtime", "pause_on_failure", "source", "enabled",
)  # fmt: skip
"""The fields :meth:`Schedule._declared` takes: the first ones of the class, in its order."""
_STATE_DEFAULTS = tuple(f.default for f in fields(Schedule)[len(_DECLARED_FIELDS) :])
if _SCHEDULE_FIELDS[: len(_DECLARED_FIELDS)] != _DECLARED_FIELDS or any(
    d is MISSING for d in _STATE_DEFAULTS
):  # pragma: no cover - a field added to Schedule must keep this true
    raise TypeError("Schedule's declared fields must come first; the others need a default")
_SETTERS = tuple(getattr(Schedule, name).__set__ for name in _SCHEDULE_FIELDS)
"""Each slot's own setter, bypassing the frozen ``__setattr__`` (cheaper than
``object.__setattr__``, which looks the slot up by name)."""
_NAMED_SETTERS = tuple(zip(_SETTERS, _SCHEDULE_FIELDS, strict=True))
_RULE_SETTERS = tuple(getattr(Schedule, name).__set__ for name in FIELD_RULES)
_NORMALISERS = tuple(rule.normalise for rule in FIELD_RULES.values())
_read_ruled = operator.attrgetter(*FIELD_RULES)
_DECLARED_RULES = tuple(name for name in FIELD_RULES if name in _DECLARED_FIELDS)
"""The declared fields that have a rule, in the rules' order (:meth:`Schedule._declared`
passes them in this order)."""
_DECLARED_RULE_SETTERS = tuple(getattr(Schedule, name).__set__ for name in _DECLARED_RULES)
_DECLARED_NORMALISERS = tuple(FIELD_RULES[name].normalise for name in _DECLARED_RULES)
_DECLARED_KEPT = tuple(FIELD_RULES[name].kept for name in _DECLARED_RULES)


class _NoDefault:
    """The default type of a required field: no value has it, so its rule always runs."""


def _declared_default(name: str) -> tuple[type, Any]:
    """(type, value) of the default of declared field ``name``, already normalised: what
    :meth:`Schedule._declared` compares a value with to skip its rule."""
    spec = Schedule.__dataclass_fields__[name]
    if spec.default is not MISSING:
        default = spec.default
    elif spec.default_factory is not MISSING:
        default = spec.default_factory()
    else:
        return _NoDefault, None
    kept = FIELD_RULES[name].normalise(default)
    if type(kept) is not type(default) or kept != default:  # pragma: no cover - a new field
        raise TypeError(f"Schedule.{name}'s default is not in its rule's final form")
    if (
        isinstance(default, (list, set, dict)) and type(default) is not dict
    ):  # pragma: no cover - _declared copies only a dict default
        raise TypeError(f"Schedule.{name}'s default is mutable: _declared cannot share it")
    return type(default), default


_DECLARED_DEFAULT_TYPES, _DECLARED_DEFAULTS = zip(
    *(_declared_default(name) for name in _DECLARED_RULES), strict=True
)
"""Per declared rule field, its default's type and value (:class:`_NoDefault` for a required
field): a value of exactly that type and equal to it skips the rule's normaliser."""
_set_one_off = _SETTERS[_SCHEDULE_FIELDS.index("one_off")]
_set_enabled = _SETTERS[_SCHEDULE_FIELDS.index("enabled")]
_STATE_SETTERS = tuple(zip(_SETTERS[len(_DECLARED_FIELDS) :], _STATE_DEFAULTS, strict=True))
if set(_DECLARED_FIELDS) - set(_DECLARED_RULES) != {"one_off", "enabled"}:  # pragma: no cover
    raise TypeError("Schedule._declared sets one_off and enabled unchecked, the rest by rule")


@dataclass(frozen=True, slots=True, kw_only=True)
class DamagedSchedule:
    """A stored schedule row that cannot be decoded into a :class:`Schedule`.

    What the stores return for such a row from ``get`` and ``list_schedules`` instead of
    raising, so one damaged row never hides the others. ``column`` names the first column that
    cannot be read, ``value`` is what it holds and ``detail`` what is wrong with it. The state
    fields are read as far as they can be (None or 0 where they cannot); ``columns`` holds every
    definition column as stored, in a JSON-able form, for ``schedule show`` and the admin.

    The scheduler never runs such a row: it quarantines it when it comes due (``last_status``
    :data:`SCHEDULE_INVALID`, ``next_run_at`` cleared, event ``schedule.invalid``). Editing it
    through the store (admin, ``update``, a republish of a code or imported schedule) writes a
    valid definition and schedules it again from now; so does ``set_enabled(name, True)``
    once the column was repaired by hand."""

    name: str
    column: str
    value: Any
    detail: str
    id: int | None = None
    source: str = ""
    task: str = ""
    description: str = ""
    enabled: bool = False
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_status: str | None = None
    total_run_count: int = 0
    missed_count: int = 0
    version: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str | None = None
    pause_note: str = ""
    skipped_count: int = 0
    columns: Mapping[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> DamagedRow:
        """The error naming the schedule and the column, as the claim path raises it."""
        return DamagedRow(self.name, self.column, self.value, self.detail)

    @property
    def quarantined(self) -> bool:
        """Whether the scheduler has already taken it out of scheduling."""
        return self.last_status == SCHEDULE_INVALID

    def describe(self) -> str:
        """``"args column holds {'a': 1}: {'a': 1} is not a JSON array"``."""
        return f"{self.column} column holds {short_repr(self.value)}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: identity, state, and ``damaged`` (column, value, detail)."""
        return {
            "id": self.id,
            "name": self.name,
            "source": self.source,
            "task": self.task,
            "description": self.description,
            "enabled": self.enabled,
            "next_run_at": _iso_or_none(self.next_run_at),
            "last_run_at": _iso_or_none(self.last_run_at),
            "last_status": self.last_status,
            "total_run_count": self.total_run_count,
            "missed_count": self.missed_count,
            "version": self.version,
            "created_at": _iso_or_none(self.created_at),
            "updated_at": _iso_or_none(self.updated_at),
            "paused": self.paused,
            "paused_at": _iso_or_none(self.paused_at),
            "paused_by": self.paused_by,
            "pause_note": self.pause_note,
            "skipped_count": self.skipped_count,
            "damaged": {
                "column": self.column,
                "value": json_safe(self.value),
                "detail": self.detail,
            },
            "columns": {k: json_safe(v) for k, v in self.columns.items()},
        }


StoredSchedule = Schedule | DamagedSchedule
"""What reading a stored schedule gives: a Schedule, or a DamagedSchedule naming what is wrong."""


def json_safe(value: Any) -> Any:
    """``value`` if it survives a strict JSON round trip, its ISO form for an instant, else a
    bounded repr: stored values shown to an operator may be anything."""
    if isinstance(value, datetime):
        return value.isoformat()
    if json_problem(value) is None:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return value
    return short_repr(value)


def _iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else iso_z(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimResult:
    """What one claim batch did."""

    occurrences: list[Occurrence]
    refused: bool = False  # the lease check failed: stale token, expired, not the holder
    conflicts: int = 0  # schedules skipped because a concurrent edit won the compare-and-set
    missed: int = 0  # occurrences dropped by misfire policies in this batch
    schedules_seen: int = 0
    quarantined: list[DamagedSchedule] = field(default_factory=list)
    """Due rows that could not be decoded, taken out of scheduling by this claim (each is
    reported once: a quarantined row is no longer due)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Occurrences the overlap policy recorded as skipped, by schedule name."""
    buffered: int = 0
    """Occurrences left waiting (overlap buffer_one) for their schedule's running run."""
    deferred: int = 0
    """Occurrences claimed but not returned: they wait in the store for their jittered
    instant, and come back through ``pending()`` then."""
    misses: list[Miss] = field(default_factory=list)
    """``missed`` schedule by schedule (only the schedules this claim advanced)."""
