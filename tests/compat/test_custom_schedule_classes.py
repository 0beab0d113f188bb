"""Custom schedule classes (#27 item 1): refused in the importer, the drop-in and diff, never
run as their parent class."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from celery import Celery  # noqa: E402

from goatbeat.cli import cli  # noqa: E402
from goatbeat.compat.beat import Scheduler  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402
from tests.compat.custom_schedules import beat_schedule, install_app  # noqa: E402


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


@pytest.fixture
def apps() -> Iterator[tuple[str, str]]:
    """(the app as the team has it now, the same app with the parents instead)."""
    yield install_app("gb_custom_now", custom=True), install_app("gb_custom_was", custom=False)
    sys.modules.pop("gb_custom_now", None)
    sys.modules.pop("gb_custom_was", None)


def _failed(out: str) -> dict[str, str]:
    lines = [line.split("  ", 1)[1] for line in out.splitlines() if line.startswith("FAILED  ")]
    return dict(line.split(": ", 1) for line in lines)


def test_the_importer_fails_each_custom_class_naming_entry_and_class(
    db: str, apps: tuple[str, str]
) -> None:
    now, _ = apps
    code, out = run("import_celery_beat", "--from-app", now, "--database", db, "--no-check-tasks")
    assert code == 1, out
    failed = _failed(out)
    assert failed.keys() == {"office-hours", "daily-but-christmas"}, out
    assert "custom schedule class OfficeHoursEvery10Min" in failed["office-hours"]
    assert "OfficeHoursEvery10Min.is_due" in failed["office-hours"]
    assert "custom schedule class DailyButChristmas" in failed["daily-but-christmas"]
    assert "create  plain" in out
    store = open_store(db)
    try:
        assert {s.name for s in store.list_schedules()} == {"plain"}
    finally:
        store.close()


def test_reimporting_over_an_earlier_import_as_the_parent_says_that_row_still_runs(
    db: str, apps: tuple[str, str]
) -> None:
    now, was = apps
    code, out = run("import_celery_beat", "--from-app", was, "--database", db, "--no-check-tasks")
    assert code == 0, out
    code, out = run("import_celery_beat", "--from-app", now, "--database", db, "--no-check-tasks")
    assert code == 1, out
    reason = _failed(out)["office-hours"]
    assert "the schedule imported earlier under this name is left as it was" in reason
    assert "goatbeat schedule disable office-hours" in reason


def _make_app(url: str, *, custom: bool) -> Celery:
    app = Celery("custom_dropin", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.conf.timezone = "UTC"
    app.conf.goatbeat_database = url
    app.conf.result_expires = None
    app.conf.beat_schedule = beat_schedule(custom=custom)
    return app


def test_the_drop_in_logs_a_failed_line_and_disables_what_it_published_as_the_parent(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    Scheduler(app=_make_app(db, custom=False)).close()
    with caplog.at_level(logging.ERROR):
        s = Scheduler(app=_make_app(db, custom=True))
    try:
        assert dict(s.problems).keys() == {"office-hours", "daily-but-christmas"}
    finally:
        s.close()
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("goatbeat: FAILED  office-hours: ") and "OfficeHoursEvery10Min.is_due" in m
        for m in lines
    ), lines
    assert any("DailyButChristmas.is_due" in m for m in lines), lines
    store = open_store(db)
    try:
        enabled = {s.name: s.enabled for s in store.list_schedules()}
    finally:
        store.close()
    assert enabled == {"office-hours": False, "daily-but-christmas": False, "plain": True}


def test_diff_reports_a_refused_entry_until_it_is_accepted_by_name(
    db: str, apps: tuple[str, str]
) -> None:
    now, was = apps
    run("import_celery_beat", "--from-app", was, "--database", db, "--no-check-tasks")
    args = ["diff", "--from-app", now, "--database", db, "--horizon", "30d"]
    args += ["--start", "2026-12-01T00:00:00Z"]
    code, out = run(*args)
    assert code == 1, out
    rows = {
        line.split()[0]: line.split(None, 1)[1]
        for line in out.splitlines()[2:]
        if line[:1] not in (" ", "") and ":" not in line.split()[0]
    }
    assert rows["office-hours"] == "refused" and rows["daily-but-christmas"] == "refused", out
    assert rows["plain"] == "equal", out
    assert "--accept-refused office-hours" in out
    code, out = run(*args, "--accept-refused", "office-hours")
    assert code == 1, out  # the other one is still refused
    assert "office-hours         refused (accepted)" in out
    code, out = run(
        *args, "--accept-refused", "office-hours", "--accept-refused", "daily-but-christmas"
    )
    assert code == 0, out
    assert "accepted refused: daily-but-christmas, office-hours" in out
    code, out = run(*args, "--accept-refused", "plain")
    assert code == 2 and "no entry of that name is refused" in out, out
