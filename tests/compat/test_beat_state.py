"""Stock celery beat's schedule file: interval entries keep the phase of their last runs at the
switch (the drop-in scheduler, ``import_celery_beat --schedule-file``, ``diff``). The files are
written by celery's own ``PersistentScheduler``."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from celery import Celery  # noqa: E402
from celery.beat import PersistentScheduler  # noqa: E402
from celery.schedules import crontab  # noqa: E402

from goatbeat.cli import cli  # noqa: E402
from goatbeat.compat.beat import Scheduler  # noqa: E402
from goatbeat.core.errors import InvalidValue  # noqa: E402
from goatbeat.core.triggers import IntervalTrigger  # noqa: E402
from goatbeat.importers.celery_beat import read_beat_state  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402

HOURLY = timedelta(hours=1)
# Stock beat last ran "hourly" 10 minutes ago, at an instant off any round grid.
LAST = (datetime.now(UTC) - timedelta(minutes=10)).replace(microsecond=0) + timedelta(seconds=7.25)


def make_app(database: str) -> Celery:
    app = Celery("state_tests", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.conf.timezone = "Europe/Paris"
    app.conf.goatbeat_database = database
    app.conf.result_expires = None
    app.conf.beat_schedule = {
        "hourly": {"task": "ping", "schedule": HOURLY},
        "morning": {"task": "report", "schedule": crontab(minute=0, hour=9)},
    }
    return app


def write_state(app: Celery, path: Path, last_run_at: datetime) -> None:
    """What stock ``celery beat -s PATH`` leaves behind after running 'hourly' at
    ``last_run_at``."""
    stock = PersistentScheduler(app=app, schedule_filename=str(path))
    stock.schedule["hourly"].last_run_at = last_run_at
    stock.sync()
    stock.close()


def schedule_of(database: str, name: str):  # type: ignore[no-untyped-def]
    store = open_store(database)
    try:
        return store.get(name)
    finally:
        store.close()


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


@pytest.fixture
def state_file(tmp_path: Path, database: str) -> Path:
    path = tmp_path / "celerybeat-schedule"
    write_state(make_app(database), path, LAST)
    return path


def test_the_last_runs_are_read_from_celery_beats_own_file(state_file: Path) -> None:
    runs = read_beat_state(str(state_file))
    assert runs["hourly"] == LAST
    assert runs["hourly"].tzinfo is not None


@pytest.mark.parametrize("content", [None, b"not a dbm file at all"])
def test_a_missing_or_foreign_file_is_an_error_naming_it(tmp_path: Path, content) -> None:
    path = tmp_path / "celerybeat-schedule"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidValue) as info:
        read_beat_state(str(path))
    assert info.value.field == "schedule_file"
    assert str(path) in str(info.value)


def test_the_drop_in_scheduler_continues_stock_beats_phase(database: str, state_file: Path) -> None:
    s = Scheduler(app=make_app(database), schedule_filename=str(state_file))
    s.close()
    hourly = schedule_of(database, "hourly")
    assert hourly.next_run_at == LAST + HOURLY  # the run stock beat would have made next
    assert hourly.trigger == IntervalTrigger(HOURLY, anchor=LAST)


def test_the_phase_is_chosen_once_and_other_replicas_keep_it(
    database: str, state_file: Path, tmp_path: Path
) -> None:
    first = Scheduler(app=make_app(database), schedule_filename=str(state_file))
    first.close()
    before = schedule_of(database, "hourly")
    # Another host: no schedule file there. Then a host whose file says something else.
    elsewhere = Scheduler(app=make_app(database), schedule_filename=str(tmp_path / "none"))
    elsewhere.close()
    other = tmp_path / "other-schedule"
    write_state(make_app(database), other, LAST - timedelta(minutes=25))
    third = Scheduler(app=make_app(database), schedule_filename=str(other))
    third.close()
    after = schedule_of(database, "hourly")
    assert after.trigger == before.trigger
    assert after.next_run_at == before.next_run_at == LAST + HOURLY


def test_without_a_schedule_file_intervals_sit_on_the_fixed_grid(
    database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = tmp_path / "celerybeat-schedule"
    garbage.write_bytes(b"not a dbm file at all")
    caplog.set_level(logging.WARNING)
    s = Scheduler(app=make_app(database), schedule_filename=str(garbage))
    s.close()
    hourly = schedule_of(database, "hourly")
    assert hourly.trigger == IntervalTrigger(HOURLY)
    assert hourly.next_run_at is not None and hourly.next_run_at.timestamp() % 3600 == 0
    assert any("interval phases start afresh" in r.getMessage() for r in caplog.records)


@pytest.fixture
def app_module(database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = types.ModuleType("goatbeat_state_test_app")
    module.app = make_app(database)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    yield f"{module.__name__}:app"


def test_import_and_diff_read_the_schedule_file_too(
    database: str, state_file: Path, app_module: str
) -> None:
    runner = CliRunner()
    common = ["--from-app", app_module, "--database", database, "--schedule-file", str(state_file)]
    result = runner.invoke(cli, ["import_celery_beat", "--no-check-tasks", *common])
    assert result.exit_code == 0, result.output
    assert "last runs of 2 entries" in result.output
    assert schedule_of(database, "hourly").next_run_at == LAST + HOURLY
    compared = runner.invoke(cli, ["diff", "--horizon", "2d", *common])
    assert compared.exit_code == 0, compared.output
    assert "last run is unknown" not in compared.output


def test_an_unreadable_schedule_file_is_one_line_on_the_cli(
    database: str, tmp_path: Path, app_module: str
) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "import_celery_beat",
            "--from-app",
            app_module,
            "--database",
            database,
            "--schedule-file",
            str(tmp_path / "nope"),
        ],
    )
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "schedule_file" in lines[0], result.output
