"""The only place in the core that reads wall-clock or monotonic time.

Everything else receives a :class:`Clock`, so tests drive time with :class:`FakeClock`.

Test hook (fault injection only): the environment variable :data:`OFFSET_ENV` (seconds, may be
negative or fractional) skews the wall clock of every :class:`SystemClock` the process makes
that is not given an offset — the scheduler's, the submitters' — to play a host whose clock
is hours off. The lease and due-ness are judged by the database's clock, so such a replica must
still behave (``tests/chaos``). The monotonic clock is never skewed.
"""

from __future__ import annotations

import math
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "SystemClock", "FakeClock", "OFFSET_ENV", "env_offset"]

OFFSET_ENV = "GOATBEAT_CLOCK_OFFSET"
"""Test hook: seconds added to this process's wall clock (see the module docstring)."""


def env_offset() -> timedelta:
    """The wall-clock skew :data:`OFFSET_ENV` asks for (zero when unset or not a number)."""
    raw = os.environ.get(OFFSET_ENV, "").strip()
    try:
        seconds = float(raw) if raw else 0.0
    except ValueError:
        return timedelta(0)
    if not math.isfinite(seconds) or abs(seconds) > 10 * 365 * 86400:
        return timedelta(0)
    return timedelta(seconds=seconds)


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall-clock time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local deadlines)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (a claimed occurrence waiting for its instant)."""
        ...


class SystemClock:
    """The real clocks. ``offset`` skews the wall clock (fault-injection tests use it to play
    a host whose clock drifted; default: :func:`env_offset`); the monotonic clock is never
    skewed."""

    def __init__(self, offset: timedelta | None = None) -> None:
        self.offset = env_offset() if offset is None else offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        """Time passes at once: sleeping moves both clocks forward by ``seconds``."""
        if seconds > 0:
            self.advance(seconds)

    def advance(self, delta: timedelta | float) -> None:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds

    def set(self, instant: datetime) -> None:
        """Jump the wall clock (monotonic clock moves by the same amount if forward)."""
        with self._lock:
            delta = (instant - self._now).total_seconds()
            self._now = instant
            if delta > 0:
                self._mono += delta
