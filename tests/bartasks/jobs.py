"""A module of the tasks package: defines a task the package re-exports, and imports shutil."""

from __future__ import annotations

import shutil  # noqa: F401 - tests.bartasks.jobs.shutil.rmtree must stay out of reach
from pathlib import Path


def send_report(path: str) -> None:
    Path(path).touch()
