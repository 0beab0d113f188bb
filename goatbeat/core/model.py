"""The values goatbeat passes around: schedules, occurrences, executions, lease grants.

All are frozen dataclasses; stores and the scheduler exchange them, never rows or ORM objects.
Constructing a :class:`Schedule` validates every field the way a user would hope: a bad value
raises an :class:`~goatbeat.core.errors.InvalidValue` naming the field, before anything is written.
"""

from __future__ import annotations

import enum
import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.errors import DamagedRow, InvalidSchedule, InvalidValue, short_repr
from goatbeat.core.jitter import MAX_JITTER
from goatbeat.core.jsonvalues import (
    MAX_JSON_DEPTH,
    NOT_PLAIN,
    check_json,
    json_form,
    json_problem,
    plain_copy,
)
from goatbeat.core.timeutil import ensure_aware, iso_z, to_utc
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
]

MAX_NAME_LENGTH = 200
MAX_PAUSE_ON_FAILURE = 1000
MAX_CATCH_UP_LIMIT = 100_000
DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)
DEFAULT_CATCH_UP_LIMIT = 100
SCHEDULE_INVALID = "invalid"
"""``last_status`` of a schedule the scheduler quarantined: its stored row cannot be decoded,
so it is not scheduled (``next_run_at`` cleared) until the row is repaired (see
:class:`DamagedSchedule`)."""


class MisfirePolicy(enum.StrEnum):
    """What to do with occurrences that are *late* (``now - scheduled_at > misfire_grace``)."""

    RUN_ONCE = "run_once"  # one run for everything missed, at the latest missed instant
    SKIP = "skip"  # none; resume at the next future occurrence
    RUN_ALL = "run_all"  # every missed occurrence in order, the latest catch_up_limit of them
    # Whatever the policy, one catch-up never claims more than catch_up_limit occurrences
    # (on-time ones included): see goatbeat.core.misfire.


class OverlapPolicy(enum.StrEnum):
    """What to do with an occurrence due while the schedule's previous run is still running
    (as the backend reports it; a run older than ``max_runtime`` no longer counts)."""

    ALLOW = "allow"  # start it anyway (default; celery beat's behaviour)
    SKIP = "skip"  # record it as skipped
    BUFFER_ONE = "buffer_one"  # at most one waits, and starts when the running one ends


class ExecutionStatus(enum.StrEnum):
    CLAIMED = "claimed"  # recorded, not yet accepted by the backend
    SUBMITTED = "submitted"  # the backend accepted it
    # Not accepted, for good: a permanent error, a refused task, or retries until the
    # occurrence's misfire grace ran out (then also counted in the schedule's missed_count).
    SUBMIT_FAILED = "submit_failed"
    # What the worker saw, for backends that report completion (goatbeat.completion, Django
    # Tasks, inline): the run started, an attempt failed and the backend retries it, the end.
    RUNNING = "running"
    RETRIED = "retried"
    SUCCEEDED = "succeeded"  # the backend reported completion (Django Tasks, inline)
    FAILED = "failed"  # the backend reported the task failed
    # Never sent, on purpose: its schedule's overlap policy skipped it (the previous run was
    # still running), or a pause withdrew it while it waited (jitter, buffer_one).
    SKIPPED = "skipped"
    BUFFERED = "buffered"  # overlap buffer_one: waits for the running run to end
    # Ended badly with no final report from a worker: its backend said the worker died (a
    # killed worker, a hard time limit), or no report came within its bound (max_runtime,
    # else the lost_after setting). Counts as a failure. A late report still wins.
    LOST = "lost"
    # Dropped unrun by the backend because its expires window passed, or inferred once the
    # window passed with no start report.
    EXPIRED = "expired"


OPEN_STATUSES = frozenset({"submitted", "running", "retried"})
"""Statuses of a run the backend holds and has not ended: a worker's report, or the leader's
rule for lost and expired runs (:meth:`~goatbeat.core.store.ScheduleStore.end_lost_runs`),
ends it."""

FAILURE_STATUSES = frozenset({"failed", "lost"})
"""Statuses that count as a failure of the schedule (``failing``, ``pause_on_failure``,
alerts, metrics); counted once per run between them."""

ENDED_BY_REPORT = frozenset({"succeeded", "failed", "lost", "expired"})
"""Statuses that end a run (an occurrence buffered behind it may start)."""

ACTIVE_STATUSES = frozenset({"claimed", "submitted", "running", "retried"})
"""Statuses of a run that has not ended: the overlap policy waits for these (``running`` and
``retried`` are the worker's completion reports)."""


class ExecutionKind(enum.StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"  # a past instant submitted on request, under its scheduled key


class Source(enum.StrEnum):
    """Where a schedule's definition lives."""

    CODE = "code"  # declared in code (schedules.py, Beat.schedule); read-only but `enabled`
    ADMIN = "admin"  # created in the admin / API
    CELERY = "celery"  # imported from a beat_schedule, or published by the compat scheduler
    DJANGO_CELERY_BEAT = "django_celery_beat"  # imported from django-celery-beat's tables


@dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """Backend routing options. Submitters reject the ones they cannot honour at publish time."""

    queue: str | None = None
    exchange: str | None = None
    routing_key: str | None = None
    priority: int | None = None
    expires: float | None = None  # seconds after submission after which the task is dropped
    headers: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("queue", "exchange", "routing_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidSchedule(
                    name, value, f"{short_repr(value)} must be a non-empty string"
                )
        if self.priority is not None and (
            isinstance(self.priority, bool) or not isinstance(self.priority, int)
        ):
            raise InvalidSchedule(
                "priority", self.priority, f"{short_repr(self.priority)} is not an integer"
            )
        if self.priority is not None and not -100 <= self.priority <= 255:
            raise InvalidSchedule(
                "priority", self.priority, f"{short_repr(self.priority)} is out of range"
            )
        if self.expires is not None:
            if isinstance(self.expires, bool) or not isinstance(self.expires, (int, float)):
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} is not seconds"
                )
            if isinstance(self.expires, int) and not -(10**15) < self.expires < 10**15:
                # math.isfinite would overflow converting a huge int to float.
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} is out of range"
                )
            if not math.isfinite(self.expires) or self.expires <= 0:
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} must be > 0"
                )
        if not isinstance(self.headers, Mapping):
            raise InvalidSchedule(
                "headers", self.headers, f"{short_repr(self.headers)} is not a mapping"
            )
        check_json("headers", dict(self.headers))
        object.__setattr__(self, "headers", dict(self.headers))

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "exchange": self.exchange,
            "routing_key": self.routing_key,
            "priority": self.priority,
            "expires": self.expires,
            "headers": dict(self.headers),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Routing:
        data = dict(data or {})
        unknown = set(data) - {"queue", "exchange", "routing_key", "priority", "expires", "headers"}
        if unknown:
            raise InvalidSchedule("routing", data, f"unknown option(s) {sorted(unknown)}")
        return cls(**{k: v for k, v in data.items() if not (k == "headers" and v is None)})

    def is_default(self) -> bool:
        return self == Routing()

    @classmethod
    def _trusted(
        cls,
        *,
        queue: str | None,
        exchange: str | None,
        routing_key: str | None,
        priority: int | None,
        expires: float | None,
        headers: dict[str, Any],
    ) -> Routing:
        """For stores (and Beat's declarations without routing options): a Routing from values
        that were validated when they were written (a row goatbeat stored) or are the
        defaults, without running :meth:`__post_init__` again. ``headers`` must be a fresh
        dict the caller does not keep."""
        self = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(self, "queue", queue)
        setattr_(self, "exchange", exchange)
        setattr_(self, "routing_key", routing_key)
        setattr_(self, "priority", priority)
        setattr_(self, "expires", expires)
        setattr_(self, "headers", headers)
        return self


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
        _check_joint(self.start_at, self.end_at, self.overlap, self.max_runtime)

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
        for set_, normalise, value in zip(
            _DECLARED_RULE_SETTERS,
            _DECLARED_NORMALISERS,
            (
                name, task, trigger, args, kwargs, routing, misfire, misfire_grace,
                catch_up_limit, start_at, end_at, source, description, jitter, overlap,
                max_runtime, pause_on_failure,
            ),
            strict=True,
        ):  # fmt: skip
            set_(self, normalise(value))
        _set_one_off(self, one_off)
        _set_enabled(self, enabled)
        for set_, value in _STATE_SETTERS:
            set_(self, value)
        _check_joint(self.start_at, self.end_at, self.overlap, self.max_runtime)
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


# -- the field rules: each written once, for every door a value comes in by -------------------


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
    if not isinstance(value, str) or not value.strip():
        raise InvalidSchedule("name", value, f"{short_repr(value)} must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidSchedule(
            "name", value, f"{short_repr(value)} is longer than {MAX_NAME_LENGTH}"
        )
    if _CONTROL.search(value):
        raise InvalidSchedule("name", value, f"{short_repr(value)} contains control characters")
    return value


def _task(value: Any) -> Any:
    if isinstance(value, str) and _TASK_NAME.match(value) is not None:
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
    if isinstance(value, Routing):
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


def _check_joint(
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
        FieldRule("trigger", _trigger),
        FieldRule("args", _args),
        FieldRule("kwargs", _kwargs),
        FieldRule("routing", _routing),
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
join two fields, :func:`_check_joint`, come after them all). The fields not listed
(``one_off``, ``enabled``, ``id``, the counters...) take their value as given, as before."""


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


def idempotency_key(name: str, scheduled_at: datetime) -> str:
    """``<name>:<scheduled_at UTC ISO-8601 Z>``, unique per occurrence in the executions table."""
    return f"{name}:{iso_z(scheduled_at)}"


def manual_key(name: str, requested_at: datetime) -> str:
    return f"{name}:manual:{iso_z(requested_at)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Occurrence:
    """One claimed run of a schedule, ready for a submitter."""

    execution_id: int
    schedule_id: int
    schedule_name: str
    task: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    routing: Routing
    scheduled_at: datetime
    idempotency_key: str
    kind: ExecutionKind = ExecutionKind.SCHEDULED
    fencing_token: int | None = None
    attempts: int = 0
    misfire_grace: timedelta | None = None
    """The schedule's grace: a failed submission is retried until :attr:`due` plus this
    (a manual run's ``scheduled_at`` is its request). None: unknown (retries by count only)."""
    due_at: datetime | None = None
    """When it is due to be sent, if not at ``scheduled_at``: the jittered instant, or a
    backfill's request. Lateness and the retry grace count from it."""

    @property
    def due(self) -> datetime:
        """``due_at``, else ``scheduled_at``."""
        return self.scheduled_at if self.due_at is None else self.due_at


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """A row of the executions table: the history of one occurrence."""

    id: int
    schedule_id: int | None
    schedule_name: str
    scheduled_at: datetime
    idempotency_key: str
    kind: ExecutionKind
    status: ExecutionStatus
    fencing_token: int | None
    scheduler_id: str | None
    claimed_at: datetime
    submitted_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    backend_task_id: str | None = None
    error: str | None = None
    # Reported by the worker (schema version 5): when the latest attempt started, how long
    # the last finished attempt ran (seconds), which worker ran it, how many attempts the
    # backend retried.
    started_at: datetime | None = None
    runtime: float | None = None
    worker: str | None = None
    retries: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGrant:
    """What the store answers to a successful acquire/renew.

    ``expires_at`` is in the *database* clock; callers must not compare it with their own
    clock. The local deadline is the LeaseManager's business."""

    name: str
    holder: str
    token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitOutcome:
    """The result of one submission, as the scheduler reports it back to the store."""

    execution_id: int
    ok: bool
    backend_task_id: str | None = None
    error: str | None = None
    final: bool = False  # a failure that will not be retried: mark submit_failed
    retry_in: float | None = None
    """Not final: seconds (from the store's now) before the row may be retried; None: at once."""
    missed: bool = False
    """Final because the occurrence's misfire grace ran out: counted in ``missed_count``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Miss:
    """Occurrences of one schedule that a claim's misfire policy dropped (never claimed)."""

    schedule_id: int
    schedule_name: str
    count: int
    first_at: datetime | None = None
    """The earliest and latest instants dropped (None when not known)."""
    last_at: datetime | None = None


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
