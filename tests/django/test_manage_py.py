"""``manage.py goatbeat`` as a Django command: Django's standard options are parsed and
honoured, the options that make no sense in a Django project are refused naming the reason,
and ``demo`` never runs on the project's database.

Each behaviour is checked through ``call_command`` and through ``manage.py`` as a real
subprocess against the test project and the throwaway PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.django.conftest import ROOT, SETTINGS_MODULE, manage


def _events(stderr: str) -> list[str]:
    """The event names of the JSON log lines (the test project logs goatbeat as JSON)."""
    return [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]


def test_settings_option_is_honoured_by_manage_py(store: Any) -> None:
    # The environment names a settings module that does not exist: only --settings can work.
    done = manage(
        "goatbeat",
        "--settings=tests.django.project.settings",
        "schedule",
        "list",
        "--json",
        env={"DJANGO_SETTINGS_MODULE": "tests.django.project.no_such_settings"},
    )
    assert done.returncode == 0, done.stderr
    assert {row["name"] for row in json.loads(done.stdout)} >= {"daily-report", "ping"}
    # After the subcommand, too, as Django allows for every command.
    later = manage(
        "goatbeat", "schedule", "list", "--json", "--settings", "tests.django.project.settings"
    )
    assert later.returncode == 0, later.stderr


def test_verbosity_sets_goatbeat_log_level(store: Any) -> None:
    quiet = manage("goatbeat", "schedule", "list")
    assert quiet.returncode == 0, quiet.stderr
    assert "schedule.published" not in _events(quiet.stderr)  # INFO: hidden by default
    verbose = manage("goatbeat", "-v", "2", "schedule", "list")
    assert verbose.returncode == 0, verbose.stderr
    assert "schedule.published" in _events(verbose.stderr)
    debug = manage("goatbeat", "publish", "--verbosity=3")
    assert debug.returncode == 0, debug.stderr
    assert {"schedule.published"} <= set(_events(debug.stderr))


def test_standard_django_flags_are_accepted(store: Any) -> None:
    for flags in (["--no-color"], ["--force-color"], ["--skip-checks"], ["--pythonpath", "."]):
        done = manage("goatbeat", *flags, "schedule", "list", "--json")
        assert done.returncode == 0, (flags, done.stderr)
        assert {row["name"] for row in json.loads(done.stdout)} >= {"daily-report"}
    both = manage("goatbeat", "--no-color", "--force-color", "schedule", "list")
    assert both.returncode != 0
    assert "--no-color and --force-color" in both.stderr
    bad = manage("goatbeat", "-v", "7", "schedule", "list")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "goatbeat: error: -v/--verbosity: '7' is not one of 0, 1, 2, 3"
    ]


def test_traceback_shows_the_traceback_of_a_goatbeat_error(store: Any) -> None:
    plain = manage("goatbeat", "schedule", "run", "nope")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    traced = manage("goatbeat", "--traceback", "schedule", "run", "nope")
    assert traced.returncode != 0
    assert "Traceback" in traced.stderr and "ScheduleNotFound" in traced.stderr


def test_call_command_honours_verbosity_and_accepts_django_options(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("DEBUG", logger="goatbeat"):
        call_command(
            "goatbeat", "publish", verbosity=0, no_color=True, stdout=StringIO(), stderr=StringIO()
        )
    assert not [r for r in caplog.records if r.levelname == "INFO"]
    caplog.clear()
    call_command("goatbeat", "-v", "2", "publish", stdout=StringIO(), stderr=StringIO())
    assert "schedule.published" in [r.getMessage() for r in caplog.records]
    caplog.clear()
    call_command(
        "goatbeat", "schedule", "list", "--verbosity", "2", stdout=StringIO(), stderr=StringIO()
    )
    assert "schedule.published" in [r.getMessage() for r in caplog.records]


def test_app_is_refused_naming_the_reason(store: Any) -> None:
    with pytest.raises(CommandError, match="--app cannot be used with manage.py"):
        call_command(
            "goatbeat",
            "--app",
            "examples.demo:beat",
            "schedule",
            "list",
            stdout=StringIO(),
            stderr=StringIO(),
        )


def _tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_database_is_the_target_of_manage_py_goatbeat(store: Any, tmp_path: Path) -> None:
    # #27 item 6: the README says an explicit --database is always the target.
    target = tmp_path / "other.sqlite3"
    url = f"sqlite:///{target}"
    done = manage("goatbeat", "--database", url, "migrate")
    assert done.returncode == 0, done.stderr
    assert "goatbeat_schedule" in _tables(target)
    listed = manage("goatbeat", "--database", url, "schedule", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {row["name"] for row in json.loads(listed.stdout)} >= {"daily-report", "ping"}
    once = manage("goatbeat", "--database", url, "scheduler", "--once")
    assert once.returncode == 0, once.stderr
    assert store.list_schedules() == []  # GOATBEAT['database'] untouched
    with closing(sqlite3.connect(target)) as conn:
        assert conn.execute("SELECT count(*) FROM goatbeat_lease").fetchone()[0] >= 1


def test_database_is_the_target_with_django_settings_module_exported(
    store: Any, tmp_path: Path
) -> None:
    from django.db import connection

    target = tmp_path / "exported.sqlite3"
    done = subprocess.run(
        [sys.executable, "-m", "goatbeat", "--database", f"sqlite:///{target}", "migrate"],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        },
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "goatbeat_schedule" in _tables(target)
    assert store.list_schedules() == []


def test_a_database_that_is_neither_url_nor_alias_is_one_line(store: Any) -> None:
    done = manage("goatbeat", "--database", "nosuchalias", "schedule", "list")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "neither a URL nor an alias of DATABASES" in line


def test_demo_never_runs_on_the_project_database(store: Any) -> None:
    done = manage("goatbeat", "demo", "--duration", "1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("goatbeat: error: demo "), done.stderr
    assert "Django project" in lines[0]
    assert store.list_schedules() == []
    with pytest.raises(CommandError, match="demo"):
        call_command("goatbeat", "demo", "--duration", "1", stdout=StringIO(), stderr=StringIO())
    assert store.list_schedules() == []


def test_help_under_django_hides_app_and_demo_and_lists_django_options(
    store: Any,
) -> None:
    helped = manage("goatbeat", "--help")
    assert helped.returncode == 0
    for hidden in ("--app", "demo"):
        assert hidden not in helped.stdout, hidden
    for shown in ("scheduler", "--verbosity", "--settings", "--no-color"):
        assert shown in helped.stdout, shown
    django_help = manage("help", "goatbeat")
    assert django_help.returncode == 0
    assert "scheduler" in django_help.stdout and "--app" not in django_help.stdout


@pytest.mark.postgres
def test_scheduler_before_migrate_says_to_run_manage_py_migrate(pg_dsn: str) -> None:
    from urllib.parse import urlsplit

    empty = {"GOATBEAT_TEST_DB_NAME": urlsplit(pg_dsn).path.lstrip("/")}
    for args in (["--once"], []):  # without --once it used to retry forever
        done = manage("goatbeat", "scheduler", *args, env=empty)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("goatbeat: error: goatbeat's tables are missing from postgres ")
        assert line.endswith(": run `python manage.py migrate` first")


def test_export_runs_as_manage_py_goatbeat_on_the_projects_database(store: Any) -> None:
    # The project's code schedules, as beat_schedule code (--source code: by default the
    # export takes imported schedules and those made in goatbeat only).
    assert manage("goatbeat", "publish").returncode == 0
    export = ["goatbeat", "export", "--to", "beat-schedule", "--source", "code"]
    refused = manage(*export)  # its crontabs run in Paris; the project's Celery app, in UTC
    assert refused.returncode == 1
    assert "FAILED  daily-report: timezone: 'Europe/Paris'" in refused.stderr
    done = manage(*export, "--timezone", "Europe/Paris")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "export   daily-report" in done.stderr
    namespace: dict[str, Any] = {}
    exec(compile(done.stdout, "<export>", "exec"), namespace)  # noqa: S102
    assert "daily-report" in namespace["beat_schedule"]
    # Without --target, the rows go to Django's default database: this project has no
    # django-celery-beat tables, which is one line, not a traceback.
    rows = manage("goatbeat", "export", "--to", "django-celery-beat")
    assert rows.returncode == 1, rows.stdout + rows.stderr
    assert "to: django-celery-beat's tables (Django's default database) (dry run)" in rows.stdout
    assert (
        rows.stderr.strip()
        .splitlines()[-1]
        .startswith("goatbeat: error: cannot read django_celery_beat_periodictask")
    ), rows.stderr
