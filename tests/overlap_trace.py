"""The trace the overlap tests' tasks write (``start <time>`` / ``end <time>`` lines, one
per run boundary), read back as runs: shared by the Django Tasks and the Celery tests."""

from __future__ import annotations

from pathlib import Path


def read_runs(trace: Path) -> list[tuple[float, float | None]]:
    """(start, end) of each run, in start order (end None: still running)."""
    if not trace.exists():
        return []
    starts: list[float] = []
    ends: list[float] = []
    for line in trace.read_text().splitlines():
        kind, _, at = line.partition(" ")
        (starts if kind == "start" else ends).append(float(at))
    starts.sort()
    ends.sort()
    return [(s, ends[i] if i < len(ends) else None) for i, s in enumerate(starts)]


def assert_never_overlapped(runs: list[tuple[float, float | None]]) -> None:
    """Each run started after the one before it ended."""
    for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
        assert end is not None and start >= end, runs
