"""Django Tasks of the test project; they leave a trace the tests can read."""

import os
from pathlib import Path

from tests.django.project.tasks_compat import task


def _trace(line: str) -> None:
    target = os.environ.get("GOATBEAT_TEST_TRACE")
    if target:
        with Path(target).open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@task(queue_name="reports")
def generate_report(kind: str = "daily") -> str:
    _trace(f"report:{kind}")
    return kind


@task(queue_name="reports")
def broken_report() -> None:
    raise RuntimeError("the report generator broke")


@task(backend="immediate")
def immediate_report(kind: str = "now") -> str:
    _trace(f"immediate:{kind}")
    return kind


@task(queue_name="reports")
def slow_report(seconds: float = 3.0) -> None:
    """Outlasts its schedule's interval: the overlap tests read when each run started and
    ended (wall clock, one line each)."""
    import time

    _trace(f"start {time.time():.3f}")
    time.sleep(seconds)
    _trace(f"end {time.time():.3f}")
