"""The demo app behind ``./dev demo`` (``goatbeat --app examples.demo:beat demo``).

SQLite file next to where you run it, tasks run in-process by the inline submitter, and
schedules short enough to watch: every 2 s, a 6-field cron every 5 s, and one that fails on
purpose every 7 s so you can see how failures look. The demo command migrates the database
itself; run it twice and the second run picks up where the first stopped.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from goatbeat.beat import Beat

beat = Beat("sqlite:///goatbeat-demo.db", submitter="inline")

_beats = itertools.count(1)


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]


def heartbeat(label: str) -> None:
    """Prints a numbered heartbeat: proof the task ran, and when."""
    print(f"    [task] {label} #{next(_beats)} ran at {_now()}Z", flush=True)


def report(kind: str, *, recipients: int = 1) -> None:
    print(f"    [task] {kind} report sent to {recipients} recipient(s) at {_now()}Z", flush=True)


def flaky() -> None:
    """Fails every time: the execution is recorded as failed with the error."""
    raise RuntimeError("this task fails on purpose, to show what a failure looks like")


beat.schedule(
    name="heartbeat-2s",
    task=heartbeat,
    every="2s",
    args=["heartbeat"],
    description="an interval schedule: every 2 seconds",
)
beat.schedule(
    name="report-cron-5s",
    task=report,
    cron="*/5 * * * * *",
    args=["status"],
    kwargs={"recipients": 3},
    description="a 6-field cron expression (seconds first): every 5 seconds",
)
beat.schedule(
    name="flaky-7s",
    task=flaky,
    every="7s",
    misfire="skip",
    description="fails on purpose; see `goatbeat --app examples.demo:beat schedule show flaky-7s`",
)
