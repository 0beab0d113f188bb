"""``manage.py goatbeat`` as a Django command: Django's standard options are parsed and
honoured, the options that make no sense in a Django project are refused naming the reason,
and ``demo`` never runs on the project's database.

Each behaviour is checked through ``call_command`` and through ``manage.py`` as a real
subprocess against the test project and the throwaway PostgreSQL."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.django.conftest import manage


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


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ["--app", "examples.demo:beat", "schedule", "list"],
            "--app cannot be used with manage.py",
        ),
        (
            ["--database", "sqlite:///x.db", "schedule", "list"],
            "--database cannot be used with manage.py",
        ),
    ],
)
def test_app_and_database_are_refused_naming_the_reason(
    store: Any, args: list[str], reason: str
) -> None:
    with pytest.raises(CommandError, match=reason):
        call_command("goatbeat", *args, stdout=StringIO(), stderr=StringIO())


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


def test_help_under_django_hides_app_database_and_demo_and_lists_django_options(
    store: Any,
) -> None:
    helped = manage("goatbeat", "--help")
    assert helped.returncode == 0
    for hidden in ("--app", "--database", "demo"):
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
