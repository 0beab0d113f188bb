"""django-celery-beat's enabled flag at re-import (#27 item 2) and its finished one-offs
(#27 item 3): what the source changed since the last import is followed, an operator's
toggle in goatbeat is kept only while the source kept its flag, and a one-off that ran never
runs again."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from goatbeat.cli import cli  # noqa: E402
from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.diff import compute_diff  # noqa: E402
from goatbeat.importers import import_entries, read_django_celery_beat  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402

NOW = datetime(2026, 12, 1, 22, 20, tzinfo=UTC)
RAN = "2026-12-01T22:19:49.073606+00:00"


@pytest.fixture
def dcb(tmp_path: Path, dcb_tables: Callable[..., None]) -> str:
    url = f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dcb_tables(
        url,
        [
            {"name": "hourly", "task": "ping", "interval": {"every": 1, "period": "hours"}},
            {"name": "nightly", "task": "ping", "crontab": {"minute": "0", "hour": "2"}},
            {
                "name": "oneoff-10s",
                "task": "ping",
                "interval": {"every": 10, "period": "seconds"},
                "one_off": True,
            },
        ],
    )
    return url


def _sql(url: str, statement: str) -> None:
    with closing(sqlite3.connect(url[len("sqlite:///") :])) as conn:
        conn.execute(statement)
        conn.commit()


def _set(url: str, name: str, **columns: object) -> None:
    assignments = ", ".join(
        f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {int(v)}"  # type: ignore[call-overload]
        for k, v in columns.items()
    )
    _sql(url, f"UPDATE django_celery_beat_periodictask SET {assignments} WHERE name = '{name}'")


def _import(url: str, db: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["import_celery_beat", "--from-django-celery-beat", url, "--database", db]
    )
    return result.exit_code, result.output


def _enabled(db: str) -> dict[str, bool]:
    store = open_store(db)
    try:
        return {s.name: s.enabled for s in store.list_schedules()}
    finally:
        store.close()


def test_a_row_disabled_in_the_source_after_the_rehearsal_is_disabled_at_cutover(
    dcb: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    assert _import(dcb, db)[0] == 0
    _set(dcb, "hourly", enabled=0)
    code, out = _import(dcb, db)
    assert code == 0, out
    assert (
        "update  hourly  (the source disabled it since the last import: disabled in goatbeat too)"
        in out
    )
    assert "1 followed the source's enabled flag" in out
    assert _enabled(db)["hourly"] is False
    _set(dcb, "hourly", enabled=1)  # and enabled again: followed again
    code, out = _import(dcb, db)
    assert code == 0 and "the source enabled it since the last import" in out, out
    assert _enabled(db)["hourly"] is True


def test_an_operators_toggle_is_kept_while_the_source_keeps_its_flag(
    dcb: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    assert _import(dcb, db)[0] == 0
    CliRunner().invoke(cli, ["--database", db, "schedule", "disable", "nightly"])
    assert _enabled(db)["nightly"] is False
    code, out = _import(dcb, db)
    assert code == 0, out
    assert _enabled(db)["nightly"] is False
    assert "unchanged nightly" in out
    assert "note    nightly: disabled in goatbeat, enabled in the source: kept" in out
    # The source now disables it too, then enables it: the source changed, goatbeat follows.
    _set(dcb, "nightly", enabled=0)
    assert _import(dcb, db)[0] == 0 and _enabled(db)["nightly"] is False
    _set(dcb, "nightly", enabled=1)
    code, out = _import(dcb, db)
    assert code == 0 and "update  nightly  (the source enabled it" in out, out
    assert _enabled(db)["nightly"] is True


def test_the_dry_run_says_what_the_source_toggle_would_do(dcb: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    assert _import(dcb, db)[0] == 0
    _set(dcb, "hourly", enabled=0)
    result = CliRunner().invoke(
        cli,
        ["import_celery_beat", "--from-django-celery-beat", dcb, "--database", db, "--dry-run"],
    )
    assert "would update  hourly  (the source disabled it" in result.output, result.output
    assert _enabled(db)["hourly"] is True


def test_a_one_off_that_ran_is_imported_finished(dcb: str, tmp_path: Path) -> None:
    # As django-celery-beat leaves it after the run, until its next check one interval later.
    _set(dcb, "oneoff-10s", total_run_count=1, last_run_at=RAN.replace("T", " ")[:26])
    entries = read_django_celery_beat(dcb)
    store = open_store(f"sqlite:///{tmp_path / 'gb.sqlite3'}", clock=FakeClock(NOW))  # type: ignore[call-arg]
    try:
        store.migrate()
        report = import_entries(store, entries)
        row = store.get("oneoff-10s")
        assert not row.enabled and row.next_run_at is None
        assert "a one-off that ran" in dict(report.notes)["oneoff-10s"]
        diff = compute_diff(entries, store.list_schedules(), start=NOW)
        assert {d.name: d.status for d in diff.schedules}["oneoff-10s"] == "equal"
    finally:
        store.close()


def test_a_one_off_that_ran_after_the_rehearsal_is_finished_at_cutover(
    dcb: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    assert _import(dcb, db)[0] == 0
    assert _enabled(db)["oneoff-10s"] is True  # owed: it never ran
    _set(dcb, "oneoff-10s", total_run_count=1, last_run_at=RAN.replace("T", " ")[:26])
    code, out = _import(dcb, db)
    assert code == 0, out
    assert "update  oneoff-10s  (the source disabled it" in out, out
    assert _enabled(db)["oneoff-10s"] is False


def test_an_interval_disabled_on_both_sides_shows_no_run_at_once(dcb: str, tmp_path: Path) -> None:
    _set(dcb, "hourly", enabled=0, last_run_at="2026-11-01 00:00:00")
    entries = read_django_celery_beat(dcb)
    store = open_store(f"sqlite:///{tmp_path / 'gb.sqlite3'}", clock=FakeClock(NOW))  # type: ignore[call-arg]
    try:
        store.migrate()
        import_entries(store, entries)
        diff = compute_diff(entries, store.list_schedules(), start=NOW + timedelta(days=3))
        hourly = next(d for d in diff.schedules if d.name == "hourly")
        assert hourly.status == "equal", hourly.to_dict()
    finally:
        store.close()


def test_a_row_changed_but_never_run_is_not_said_to_have_been_run_by_celery(
    dcb: str, tmp_path: Path
) -> None:
    # #27 item 7: "refresh ... celery ran it since" only when celery ran it, not on date_changed.
    db = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    assert _import(dcb, db)[0] == 0
    _set(dcb, "nightly", date_changed="2030-01-01 00:00:00")
    code, out = _import(dcb, db)
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("refresh nightly"))
    assert "it never ran, and the source changed the row since" in line, out
    assert "celery ran it" not in line
