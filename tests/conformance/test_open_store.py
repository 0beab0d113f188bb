"""open_store: which store a URL names, and clear refusals for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import InvalidValue
from goatbeat.core.store import ScheduleStore
from goatbeat.stores import MemoryStore, SQLiteStore, open_store, redact_url
from goatbeat.stores.schema import latest_version


def test_memory_url_gives_a_memory_store_on_the_given_clock() -> None:
    clock = FakeClock()
    store = open_store("memory://", clock=clock)
    assert isinstance(store, MemoryStore) and isinstance(store, ScheduleStore)
    assert store.now() == clock.now()


def test_sqlite_url_with_three_slashes_is_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///sub/relative.db")
    assert isinstance(store, SQLiteStore)
    store.migrate()
    store.close()
    assert (tmp_path / "sub" / "relative.db").exists()


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: Path) -> None:
    path = tmp_path / "abs.db"
    store = open_store(f"sqlite:///{path}")  # "sqlite:///" + "/tmp/..." = four slashes
    assert isinstance(store, SQLiteStore) and store.path == str(path)
    store.migrate()
    assert store.info() == {
        "kind": "sqlite",
        "database": str(path),
        "schema_version": latest_version("sqlite"),
    }
    store.migrate()  # idempotent
    store.close()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "memory",
        "mysql://u:secret@h/db",
        "sqlite://",
        "sqlite:///",
        "sqlite://x.db",
        "memory://somewhere",
        "sqlite:///x.db?mode=ro",
        "redis://localhost",
    ],
)
def test_unusable_urls_are_refused_naming_the_database_setting(url: str) -> None:
    with pytest.raises(InvalidValue) as excinfo:
        open_store(url)
    assert excinfo.value.field == "database"
    assert "secret" not in str(excinfo.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/beat", "postgresql://app:***@db:5432/beat"),
        ("postgresql://app@db/beat", "postgresql://app@db/beat"),
        ("sqlite:////srv/beat.db", "sqlite:////srv/beat.db"),
    ],
)
def test_redact_url_masks_only_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
