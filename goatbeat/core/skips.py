"""Which delivery the idempotency guard skipped, on this thread: the worker-side guard
(:mod:`goatbeat.idempotency`) notes it, the completion reports (:mod:`goatbeat.completion`)
read it, so that a skipped delivery is never reported as a success of its own. Both run in
the worker, on the thread that runs the task; they sit on one floor, so the note lives here."""

from __future__ import annotations

import threading

__all__ = ["note_skip", "take_skip"]

_skips = threading.local()


def note_skip(key: str, state: str | None) -> None:
    """The guard skipped this thread's delivery of ``key``, finding the key in ``state``."""
    _skips.last = (key, state)


def take_skip(key: str) -> tuple[bool, str | None]:
    """Whether this thread's delivery of ``key`` was skipped by a guard, and the state of
    the key it found (``"succeeded"``, ``"running"``: a first delivery still running or
    killed mid-body, ...); forgotten once read."""
    last = getattr(_skips, "last", None)
    if last is None or last[0] != key:
        return False, None
    _skips.last = None
    return True, last[1]
