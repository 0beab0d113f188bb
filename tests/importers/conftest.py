"""Fixtures: real django-celery-beat tables (made by its own migrations) on SQLite or PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def make_dcb_tables(url: str, rows: list[dict[str, Any]], raw_sql: list[str] = ()) -> None:  # type: ignore[assignment]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tests.importers.dcb_fixture", url],
        input=json.dumps({"rows": rows, "raw_sql": list(raw_sql)}),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(params=["sqlite", "postgres"])
def dcb_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for django-celery-beat's tables: SQLite file or fresh PostgreSQL db."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


@pytest.fixture
def dcb_tables() -> Callable[..., None]:
    return make_dcb_tables
