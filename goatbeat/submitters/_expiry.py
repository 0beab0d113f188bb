"""When a schedule's ``expires`` starts counting; shared by the Celery, Dramatiq and RQ submitters.

``expires`` (seconds) is how long the backend may hold a task before dropping it unrun. By
default (``expires_from="submission"``) it counts from the moment goatbeat hands the occurrence
to the backend, as celery beat's ``options={"expires": ...}`` does: an occurrence submitted late
(a scheduler catching up after a failover, a submission retried after a broker outage) still
gets the whole window.

With ``expires_from="scheduled"`` it counts from the occurrence's scheduled instant — "drop it
if it is this late": the backend gets what is left of the window, and an occurrence already
past it is not sent at all (a :class:`~goatbeat.core.errors.PermanentSubmitError` saying so:
the execution is ``submit_failed`` with that reason, visible in ``schedule list`` and the admin).
"""

from __future__ import annotations

from typing import Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import InvalidValue, PermanentSubmitError
from goatbeat.core.model import Occurrence

__all__ = ["EXPIRES_FROM", "check_expires_from", "clock_or_system", "expires_left"]

EXPIRES_FROM = ("submission", "scheduled")


def check_expires_from(value: Any) -> str:
    if value not in EXPIRES_FROM:
        raise InvalidValue(
            "expires_from", value, f"{value!r} is not one of {', '.join(map(repr, EXPIRES_FROM))}"
        )
    result: str = value
    return result


def clock_or_system(clock: Clock | None) -> Clock:
    return SystemClock() if clock is None else clock


def expires_left(occurrence: Occurrence, expires_from: str, clock: Clock) -> float | None:
    """Seconds the backend may still hold ``occurrence``; None without ``expires``. Raises
    PermanentSubmitError when it counts from the scheduled instant and nothing is left."""
    expires = occurrence.routing.expires
    if expires is None or expires_from == "submission":
        return expires
    late = max(0.0, (clock.now() - occurrence.scheduled_at).total_seconds())
    left = expires - late
    if left <= 0:
        raise PermanentSubmitError(
            f"expires: {occurrence.idempotency_key} is {late:.3f}s past its instant, beyond "
            f"expires={expires:g}s counted from the scheduled instant "
            "(expires_from='scheduled'); not sent"
        )
    return left
