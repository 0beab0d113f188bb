"""The goatbeat exception hierarchy.

Every error goatbeat raises on purpose descends from :class:`GoatbeatError`; each one
also inherits the builtin a caller would naturally catch::

    GoatbeatError
    ├── InvalidValue (ValueError)          a value that cannot be used; names field and value
    │   ├── InvalidCron                     a cron expression
    │   ├── InvalidTimezone                 an IANA zone name
    │   ├── InvalidDuration                 "30s", "1h30m", ...
    │   ├── InvalidCoordinate               latitude / longitude / solar event
    │   └── InvalidSchedule                 any other schedule field (args, name, misfire...)
    │       ├── UnsupportedOption           a routing option the submitter cannot honour
    │       ├── DamagedRow                  a stored row that cannot be read back; names the
    │       │                               schedule and the column
    │       └── TaskNotAllowed              a task outside the allow-list (allowed_tasks)
    ├── ConfigError (ValueError)            settings; carries every problem at once
    ├── NotFound (LookupError)
    │   └── ScheduleNotFound
    ├── ConflictError                       a compare-and-set lost (concurrent edit)
    ├── LeaseLost                           the caller no longer holds the lease
    ├── StoreError                          the store failed (connection lost, ...)
    └── SubmitError                         the backend refused or failed a submission
        ├── RetryableSubmitError            try again later (broker down, timeout)
        └── PermanentSubmitError            will never work (unknown task, bad args)
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any


class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        try:
            return super().repr_int(x, level)
        except ValueError:
            # Past sys.get_int_max_str_digits() even repr() refuses; the size is still useful.
            return f"<int of {x.bit_length()} bits>"


_SHORT = _ShortRepr(maxlevel=4, maxstring=80, maxother=80, maxlong=40, maxlist=10, maxdict=10)


def short_repr(value: Any) -> str:
    """A bounded ``repr`` for error messages: user values may be huge, deeply nested or
    unprintable, and a message must never fail to build or flood a log."""
    return _SHORT.repr(value)


class GoatbeatError(Exception):
    """Root of every error goatbeat raises on purpose."""


class InvalidValue(GoatbeatError, ValueError):
    """A value that cannot be used. The message names the field and the bad value."""

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class InvalidCron(InvalidValue):
    """A cron expression that cannot be parsed or never matches."""


class InvalidTimezone(InvalidValue):
    """A time zone name unknown to zoneinfo."""


class InvalidDuration(InvalidValue):
    """A duration such as ``"30s"`` that cannot be parsed or is out of range."""


class InvalidCoordinate(InvalidValue):
    """A latitude, longitude or solar event that is out of range or unknown."""


class InvalidSchedule(InvalidValue):
    """Any other invalid schedule field: name, task, args, kwargs, misfire policy..."""


class UnsupportedOption(InvalidSchedule):
    """A schedule option (priority, exchange, ...) the configured submitter cannot honour."""


class DamagedRow(InvalidSchedule):
    """A stored schedule row that cannot be decoded: damaged behind goatbeat's back (a
    hand-edited column, a restored dump, a bug). ``field`` is the column, ``value`` what it
    holds, ``schedule`` the row's name, ``detail`` what is wrong with the value."""

    def __init__(self, schedule: Any, column: str, value: Any, detail: str) -> None:
        self.schedule = schedule
        self.column = column
        self.detail = detail
        super().__init__(
            column,
            value,
            f"stored schedule {short_repr(schedule)} has a damaged {column} column: {detail}",
        )


class TaskNotAllowed(InvalidSchedule):
    """A schedule stored outside code names a task that is not a known task: neither declared
    in code, nor registered with a backend, nor matching ``allowed_tasks``."""


class ConfigError(GoatbeatError, ValueError):
    """Invalid settings. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid goatbeat settings: " + "; ".join(self.problems))


class NotFound(GoatbeatError, LookupError):
    """Something looked up by name does not exist."""


class ScheduleNotFound(NotFound):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"schedule: no schedule named {name!r}")


class ConflictError(GoatbeatError):
    """A compare-and-set lost: somebody changed the row meanwhile."""


class LeaseLost(GoatbeatError):
    """The caller does not (or no longer) hold the lease, or its fencing token is stale."""


class StoreError(GoatbeatError):
    """The store failed: connection lost, database restarted, ..."""


class SubmitError(GoatbeatError):
    """A submission to the task backend failed."""


class RetryableSubmitError(SubmitError):
    """The backend may accept the same submission later (broker unreachable, timeout)."""


class PermanentSubmitError(SubmitError):
    """The backend will never accept this submission (unknown task, unserializable args)."""
