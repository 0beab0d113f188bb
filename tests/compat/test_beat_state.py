"""Stock celery beat's last runs: interval entries keep their phase at the switch (the drop-in
scheduler's ``goatbeat_last_runs``, ``import_celery_beat --last-runs``, ``diff --last-runs``).

goatbeat never unpickles, so beat's ``celerybeat-schedule`` shelve is dumped to JSON with the
recipe docs/migration shows; the test runs that very recipe, taken from the page, on a file
written by celery's own ``PersistentScheduler``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from goatbeat.importers.celery_beat import read_last_runs  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migration" / "celery-beat-schedule.md"
HOURLY = timedelta(hours=1)
# Stock beat last ran "hourly" 10 minutes ago, at an instant off any round grid.
LAST = (datetime.now(UTC) - timedelta(minutes=10)).replace(microsecond=0) + timedelta(seconds=7.25)


def make_app(database: str, **conf: Any) -> Celery:
    app = Celery("state_tests", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.conf.timezone = "Europe/Paris"
    app.conf.goatbeat_database = database
    app.conf.result_expires = None
    app.conf.beat_schedule = {
        "hourly": {"task": "ping", "schedule": HOURLY},
        "morning": {"task": "report", "schedule": crontab(minute=0, hour=9)},
    }
    for key, value in conf.items():
        app.conf[key] = value
    return app


def write_json(path: Path, runs: dict[str, datetime]) -> Path:
    path.write_text(json.dumps({k: v.isoformat() for k, v in runs.items()}))
    return path


def schedule_of(database: str, name: str) -> Any:
    store = open_store(database)
    try:
        return store.get(name)
    finally:
        store.close()


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


@pytest.fixture
def last_runs(tmp_path: Path) -> Path:
    return write_json(tmp_path / "last-runs.json", {"hourly": LAST})


def test_the_documented_recipe_dumps_stock_beats_last_runs(tmp_path: Path, database: str) -> None:
    stock = PersistentScheduler(
        app=make_app(database), schedule_filename=str(tmp_path / "celerybeat-schedule")
    )
    stock.schedule["hourly"].last_run_at = LAST
    stock.sync()
    stock.close()
    block = re.search(r"```console\n\$ (python -c .*? > last-runs\.json)\n```", GUIDE.read_text())
    assert block is not None, "the recipe is gone from docs/migration/celery-beat-schedule.md"
    command = block.group(1).replace("python -c", f"{sys.executable} -c", 1)
    subprocess.run(command, shell=True, cwd=tmp_path, check=True, timeout=60)  # noqa: S602
    runs = read_last_runs(str(tmp_path / "last-runs.json"))
    assert runs["hourly"] == LAST
    assert set(runs) >= {"hourly", "morning"}


def test_naive_instants_are_utc_as_celery_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"hourly": "2026-11-30T08:15:07.250000"}))
    assert read_last_runs(str(path)) == {"hourly": datetime(2026, 11, 30, 8, 15, 7, 250000, UTC)}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "must hold an object"),
        ('{"hourly": "yesterday"}', "entry 'hourly' has 'yesterday'"),
        ('{"hourly": 12}', "entry 'hourly' has 12"),
    ],
)
def test_a_bad_file_is_an_error_naming_what_is_wrong(
    tmp_path: Path, content: str | None, says: str
) -> None:
    path = tmp_path / "runs.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InvalidValue) as info:
        read_last_runs(str(path))
    assert info.value.field == "last_runs"
    assert says in str(info.value)


def test_the_drop_in_scheduler_continues_stock_beats_phase(database: str, last_runs: Path) -> None:
    s = Scheduler(app=make_app(database, goatbeat_last_runs=str(last_runs)))
    s.close()
    hourly = schedule_of(database, "hourly")
    assert hourly.next_run_at == LAST + HOURLY  # the run stock beat would have made next
    assert hourly.trigger == IntervalTrigger(HOURLY, anchor=LAST)


def test_the_phase_is_chosen_once_and_other_replicas_keep_it(
    database: str, last_runs: Path, tmp_path: Path
) -> None:
    first = Scheduler(app=make_app(database, goatbeat_last_runs=str(last_runs)))
    first.close()
    before = schedule_of(database, "hourly")
    # Another host without the file, then one whose copy says something else.
    Scheduler(app=make_app(database)).close()
    other = write_json(tmp_path / "other.json", {"hourly": LAST - timedelta(minutes=25)})
    Scheduler(app=make_app(database, goatbeat_last_runs=str(other))).close()
    after = schedule_of(database, "hourly")
    assert after.trigger == before.trigger
    assert after.next_run_at == before.next_run_at == LAST + HOURLY


def test_without_last_runs_intervals_sit_on_the_fixed_grid(database: str) -> None:
    Scheduler(app=make_app(database)).close()
    hourly = schedule_of(database, "hourly")
    assert hourly.trigger == IntervalTrigger(HOURLY)
    assert hourly.next_run_at is not None and hourly.next_run_at.timestamp() % 3600 == 0


@pytest.fixture
def app_module(database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    module = types.ModuleType("goatbeat_state_test_app")
    module.app = make_app(database)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    yield f"{module.__name__}:app"


def test_import_and_diff_take_the_last_runs_too(
    database: str, last_runs: Path, app_module: str
) -> None:
    runner = CliRunner()
    common = ["--from-app", app_module, "--database", database, "--last-runs", str(last_runs)]
    result = runner.invoke(cli, ["import_celery_beat", "--no-check-tasks", *common])
    assert result.exit_code == 0, result.output
    assert "last runs of 1 entries" in result.output
    assert schedule_of(database, "hourly").next_run_at == LAST + HOURLY
    compared = runner.invoke(cli, ["diff", "--horizon", "2d", *common])
    assert compared.exit_code == 0, compared.output
    assert "last run is unknown" not in compared.output


def test_an_unreadable_last_runs_file_is_one_line_on_the_cli(
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
            "--last-runs",
            str(tmp_path / "nope.json"),
        ],
    )
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "last_runs" in lines[0], result.output
