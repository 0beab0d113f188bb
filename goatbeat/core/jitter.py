"""Deterministic jitter: where, inside ``[instant, instant + jitter)``, an occurrence is sent.

A schedule with ``jitter`` (say 30 s) is still *claimed* at its nominal instant, under the
nominal idempotency key; its submission waits until ``instant + offset``. The offset is a pure
function of the schedule's name, the nominal instant and the jitter, so every replica, a new
leader after a failover, and any later version of goatbeat compute the same one:

    key    = "<name>:<instant in UTC, ISO-8601, Z>"       (the occurrence's idempotency key)
    h      = the first 8 bytes of SHA-256(key as UTF-8), as a big-endian unsigned integer
    offset = floor(h * J / 2**64) microseconds,  J = jitter in whole microseconds

``h`` is uniform over ``[0, 2**64)``, so the offsets are uniform over ``[0, jitter)``; 1,000
schedules sharing ``0 * * * *`` spread over the window instead of hitting the broker at once.
Nothing random and nothing stored: the formula is the contract (tests pin it).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from goatbeat.core.timeutil import iso_z

__all__ = ["MAX_JITTER", "jitter_offset", "jittered"]

MAX_JITTER = timedelta(days=1)
"""The longest jitter a schedule may declare."""

_SPAN = 1 << 64


def jitter_offset(name: str, instant: datetime, jitter: timedelta) -> timedelta:
    """The offset in ``[0, jitter)`` at which the occurrence ``instant`` of schedule ``name``
    is submitted (zero without jitter). See the module docstring for the formula."""
    micros = (jitter.days * 86_400 + jitter.seconds) * 1_000_000 + jitter.microseconds
    if micros <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{name}:{iso_z(instant)}".encode()).digest()
    h = int.from_bytes(digest[:8], "big")
    return timedelta(microseconds=(h * micros) // _SPAN)


def jittered(name: str, instant: datetime, jitter: timedelta) -> datetime:
    """``instant`` plus its :func:`jitter_offset`: when the occurrence is due to be sent."""
    return instant + jitter_offset(name, instant, jitter)
