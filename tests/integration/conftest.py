"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh goatbeat database URL: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/goatbeat.db"
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn
