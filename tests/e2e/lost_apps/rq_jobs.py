"""An RQ job that hangs until its work horse is killed (kill -9)."""

from __future__ import annotations

from tests.e2e.lost_apps._hang import hang as _hang


def hang() -> None:
    _hang()
