"""``manage.py goatbeat ...`` (one implementation with the ``goatbeat`` command)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from goatbeat.core.instance import split_instance
from goatbeat.core.model import ExecutionKind, ExecutionStatus, Schedule, Source
from goatbeat.core.triggers import IntervalTrigger


def goatbeat(*args: str) -> str:
    out = StringIO()
    call_command("goatbeat", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_schedule_list_json_publishes_code_schedules_and_lists_every_schedule(store: Any) -> None:
    store.create(
        Schedule(
            name="admin-made",
            task="tests.django.project.mail.tasks.send_email",
            trigger=IntervalTrigger("1h"),
            source=Source.ADMIN,
        )
    )
    listed = json.loads(goatbeat("schedule", "list", "--json"))
    by_name = {row["name"]: row for row in listed}
    assert set(by_name) == {"admin-made", "broken-report", "daily-report", "ping", "weekly-report"}
    assert by_name["daily-report"]["source"] == "code"
    assert by_name["daily-report"]["trigger"] == {
        "kind": "cron",
        "expression": "0 9 * * *",
        "timezone": "Europe/Paris",
    }
    assert by_name["daily-report"]["next_run_at"] is not None
    assert by_name["ping"]["args"] == [42]
    assert by_name["admin-made"]["source"] == "admin"
    assert store.get("ping").source is Source.CODE


def test_schedule_run_asks_for_a_manual_run(store: Any) -> None:
    goatbeat("publish")
    out = goatbeat("schedule", "run", "daily-report")
    assert "daily-report" in out
    (execution,) = store.executions(name="daily-report")
    assert execution.kind is ExecutionKind.MANUAL
    assert execution.status is ExecutionStatus.CLAIMED


def test_schedule_run_of_an_unknown_name_is_a_command_error(store: Any) -> None:
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        goatbeat("schedule", "run", "nope")


def test_schedule_prune_disables_code_schedules_no_longer_declared(store: Any) -> None:
    store.publish(
        [
            Schedule(
                name="retired",
                task="tests.django.project.mail.tasks.send_email",
                trigger=IntervalTrigger("1h"),
            )
        ]
    )
    goatbeat("publish")
    out = goatbeat("schedule", "prune")
    assert "retired" in out
    assert store.get("retired").enabled is False
    assert store.get("daily-report").enabled is True


@pytest.mark.django_tasks
def test_scheduler_once_submits_requested_runs_to_django_tasks(store: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    goatbeat("publish")
    goatbeat("schedule", "run", "ping")
    out = goatbeat("scheduler", "--once")
    assert json.loads(out.strip().splitlines()[-1])["leader"] is True
    (execution,) = store.executions(name="ping")
    assert execution.status is ExecutionStatus.SUBMITTED
    task = DBTaskResult.objects.get(id=execution.backend_task_id)
    assert task.task_path == "tests.django.project.mail.tasks.send_email"
    assert task.args_kwargs == {"args": [42], "kwargs": {}}
    assert task.queue_name == "default"
    # The lease was released on the way out so another scheduler may take over at once.
    holder, _token, _expires, expired = store.read_lease("scheduler")
    assert split_instance(holder)[0] == "test-scheduler" and expired


def test_migrate_subcommand_is_idempotent_on_a_django_migrated_database(store: Any) -> None:
    assert "schema up to date" in goatbeat("migrate")


def test_no_arguments_prints_the_goatbeat_help() -> None:
    out = goatbeat()
    for command in ("scheduler", "schedule", "migrate"):
        assert command in out


def test_standalone_goatbeat_uses_the_django_project_without_app(
    store: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from goatbeat.cli import cli

    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.django.project.settings")
    cli.main(args=["schedule", "list", "--json"], standalone_mode=False)
    names = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert names == {"broken-report", "daily-report", "ping", "weekly-report"}


def test_import_celery_beat_delegates_to_the_migration_toolkit(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from django.test import override_settings

    # manage.py always sets it; the importer reads the project's settings when it is set.
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.django.project.settings")
    beat_schedule = {
        "every-ten-minutes": {
            "task": "tests.django.project.mail.tasks.send_email",
            "schedule": timedelta(minutes=10),
            "args": (1,),
        }
    }
    with override_settings(CELERY_BEAT_SCHEDULE=beat_schedule):
        source = ["--from-app", "tests.django.project.celery_app:app", "--no-check-tasks"]
        preview = goatbeat("import_celery_beat", *source, "--dry-run")
        assert "would create  every-ten-minutes" in preview
        assert [s.name for s in store.list_schedules(source=Source.CELERY)] == []
        goatbeat("import_celery_beat", *source)
    imported = store.get("every-ten-minutes")
    assert imported.source is Source.CELERY
    assert imported.args == (1,)
    assert imported.trigger.to_spec()["every"] == 600


def test_the_real_command_line_gives_click_the_arguments_and_the_exit_status(store: Any) -> None:
    from tests.django.conftest import manage

    listed = manage("goatbeat", "schedule", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {row["name"] for row in json.loads(listed.stdout)} >= {"daily-report", "ping"}
    helped = manage("goatbeat", "--help")
    assert helped.returncode == 0 and "scheduler" in helped.stdout
    unknown = manage("goatbeat", "schedule", "run", "nope")
    assert unknown.returncode == 2
    assert "goatbeat: error: schedule: no schedule named 'nope'" in unknown.stderr


def test_manage_py_goatbeat_publish_says_what_it_did_and_logs_the_events(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store.publish(
        [
            Schedule(
                name="retired",
                task="tests.django.project.mail.tasks.send_email",
                trigger=IntervalTrigger("1h"),
            )
        ]
    )
    err = StringIO()
    call_command("goatbeat", "publish", "--dry-run", stdout=StringIO(), stderr=err)
    assert "publish --dry-run" in err.getvalue() and "nothing written" in err.getvalue()
    assert [s.name for s in store.list_schedules()] == ["retired"]

    err = StringIO()
    with caplog.at_level("INFO", logger="goatbeat"):
        call_command("goatbeat", "publish", stdout=StringIO(), stderr=err)

    report = err.getvalue()
    assert "  create  daily-report" in report.splitlines()
    assert "  orphaned  retired: enabled, no longer declared" in report
    assert store.get("daily-report").source is Source.CODE
    # Django's LOGGING gets the events even though the command printed them in words.
    orphaned = [r for r in caplog.records if r.getMessage() == "schedule.orphaned"]
    assert [r.goatbeat["schedule"] for r in orphaned] == ["retired"]  # type: ignore[attr-defined]
    assert orphaned[0].levelname == "WARNING"
