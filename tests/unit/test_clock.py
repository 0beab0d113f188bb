"""The clock test hook: a process-wide wall-clock skew for fault injection."""

from __future__ import annotations

from datetime import timedelta

import pytest


def test_the_offset_env_variable_skews_every_system_clock_of_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from goatbeat.core.clock import OFFSET_ENV, SystemClock

    monkeypatch.setenv(OFFSET_ENV, "-7200")
    skewed = SystemClock()
    assert skewed.offset == timedelta(hours=-2)
    assert SystemClock(offset=timedelta(0)).offset == timedelta(0)  # explicit wins
    for junk in ("soon", "nan", "1e99"):
        monkeypatch.setenv(OFFSET_ENV, junk)
        assert SystemClock().offset == timedelta(0)
