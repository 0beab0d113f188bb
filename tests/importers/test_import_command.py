"""``goatbeat import_celery_beat``: report lines, summary, exit status, dry run, idempotence."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from celery import Celery  # noqa: E402

from goatbeat.cli import cli  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


def names_in(db: str) -> set[str]:
    store = open_store(db)
    try:
        store.migrate()
        return {s.name for s in store.list_schedules()}
    finally:
        store.close()


def test_failures_are_listed_by_name_the_rest_import_and_exit_is_1(db: str) -> None:
    code, out = run(
        "import_celery_beat", "--from-app", "tests.importers.celery_app:app", "--database", db
    )
    assert code == 1
    for name in ("bad-unknown-task", "bad-string-schedule", "bad-option", "bad-args"):
        assert f"FAILED  {name}: " in out
    assert "create  daily-report" in out
    assert "summary: " in out and "failed" in out
    assert {"daily-report", "ping-5m", "ping-30s", "sunset"} <= names_in(db)


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gb.sqlite3"
    code, out = run(
        "import_celery_beat",
        "--from-app",
        "tests.importers.celery_app:app",
        "--database",
        f"sqlite:///{path}",
        "--dry-run",
    )
    assert code == 1
    assert "would create  daily-report" in out and "dry run: nothing written" in out
    assert not path.exists() or names_in(f"sqlite:///{path}") == set()


def test_second_run_reports_everything_unchanged(db: str) -> None:
    run("import_celery_beat", "--from-app", "tests.importers.celery_app:app", "--database", db)
    code, out = run(
        "import_celery_beat",
        "--from-app",
        "tests.importers.celery_app:app",
        "--database",
        db,
        "--json",
    )
    report = json.loads(out)
    assert report["created"] == [] and report["updated"] == []
    assert "daily-report" in report["unchanged"]


@pytest.fixture
def big_app() -> Iterator[str]:
    app = Celery("big", set_as_current=False)
    app.conf.beat_schedule = {
        f"job-{i:04d}": {"task": "ping", "schedule": 60 + i} for i in range(450)
    }
    module = types.ModuleType("gb_big_app")
    module.app = app  # type: ignore[attr-defined]
    sys.modules["gb_big_app"] = module
    yield "gb_big_app:app"
    del sys.modules["gb_big_app"]


def test_large_import_shows_progress_and_imports_all(db: str, big_app: str) -> None:
    code, out = run(
        "import_celery_beat", "--from-app", big_app, "--database", db, "--no-check-tasks"
    )
    assert code == 0, out
    assert "importing" in out  # click.progressbar's label
    # Stock beat adds celery.backend_cleanup to an app whose backend keeps results without
    # expiring them (here: none configured, results expire after a day): so does the import.
    assert "451 created" in out
    assert len(names_in(db)) == 451 and "celery.backend_cleanup" in names_in(db)


def test_django_celery_beat_tables_via_the_command(
    db: str, dcb_url: str, dcb_tables: Callable[..., None]
) -> None:
    dcb_tables(
        dcb_url,
        [
            {"name": "ok", "task": "ping", "interval": {"every": 1, "period": "hours"}},
            {"name": "bad", "task": "ping", "crontab": {"hour": "25", "timezone": "UTC"}},
        ],
    )
    code, out = run("import_celery_beat", "--from-django-celery-beat", dcb_url, "--database", db)
    assert code == 1
    assert "create  ok" in out and "FAILED  bad: " in out and "25" in out
    assert names_in(db) == {"ok"}


def test_no_source_is_a_usage_error(db: str) -> None:
    code, out = run("import_celery_beat", "--database", db)
    assert code == 2 and "nothing to import" in out


def test_imported_tasks_outside_the_apps_allow_list_are_failed_lines(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The goatbeat app allows "reports.*" only, and its backend sends tasks by name with no
    # registry in this process (a Celery app whose tasks live in the workers): the celery
    # app's "ping" schedules are refused, "daily-report" is imported.
    module = tmp_path / "gb_allow_app.py"
    module.write_text(
        "from goatbeat.beat import Beat\n"
        "from tests.doubles import AcceptingSubmitter\n"
        "class ByName(AcceptingSubmitter):\n"
        "    name = 'by-name'\n"
        "    def submit(self, occurrence):\n"
        "        return None\n"
        f"beat = Beat({db!r}, submitter=ByName(), settings={{'allowed_tasks': ['reports.*']}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run(
        "--app",
        "gb_allow_app:beat",
        "import_celery_beat",
        "--from-app",
        "tests.importers.celery_app:app",
        "--database",
        db,
    )
    assert code == 1
    assert "create  daily-report" in out
    for name in ("ping-5m", "ping-30s", "sunset"):
        assert f"FAILED  {name}: task: 'ping' is not a known task" in out
    names = names_in(db)
    assert "daily-report" in names and not names & {"ping-5m", "ping-30s", "sunset"}


def test_an_imported_task_that_walks_past_its_pattern_is_a_failed_line(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # #32: "tests.bartasks.*" matched the string "tests.bartasks.os.system", which the app's
    # inline backend would have run as os.system. Now the name must be where its callable is
    # defined; the module's own task imports.
    (tmp_path / "gb_walk_app.py").write_text(
        "from goatbeat.beat import Beat\n"
        f"beat = Beat({db!r}, settings={{'allowed_tasks': ['tests.bartasks.*']}})\n"
    )
    (tmp_path / "gb_walk_celery.py").write_text(
        "from celery import Celery\n"
        "app = Celery('walk', set_as_current=False)\n"
        "app.conf.beat_schedule = {\n"
        "    'evil': {'task': 'tests.bartasks.os.system', 'schedule': 60, 'args': ['true']},\n"
        "    'reexport': {'task': 'tests.bartasks.send_report', 'schedule': 60},\n"
        "    'own': {'task': 'tests.bartasks.touch', 'schedule': 60},\n"
        "}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run(
        "--app", "gb_walk_app:beat", "import_celery_beat", "--from-app", "gb_walk_celery:app",
        "--no-check-tasks", "--database", db,
    )  # fmt: skip
    assert code == 1, out
    assert "create  own" in out
    assert "FAILED  evil: task: 'tests.bartasks.os.system' matches allowed_tasks, but it " \
        "resolves to posix.system, defined elsewhere" in out  # fmt: skip
    assert "FAILED  reexport: " in out and "tests.bartasks.jobs.send_report" in out
    assert names_in(db) == {"own"}


def test_without_an_app_the_import_says_tasks_were_not_checked(db: str) -> None:
    code, out = run(
        "import_celery_beat", "--from-app", "tests.importers.celery_app:app", "--database", db
    )
    assert "tasks not checked against an allow-list" in out
