"""Mistakes in schedules.py: every one reported at once, naming the app and the schedule; they
fail the system checks and the scheduler, not the project's web pages."""

from __future__ import annotations

from typing import Any

import pytest

from goatbeat.django.registry import DeclarationError, DjangoRegistry, discover_into
from tests.django.conftest import manage

BROKEN = "--settings=tests.django.project.settings_broken_schedules"
MODULES = [
    ("reports", "tests.django.project.reports.schedules"),
    ("broken_cron", "tests.django.project.broken_cron.schedules"),
    ("broken_import", "tests.django.project.broken_import.schedules"),
]
PROBLEMS = [
    "app 'broken_cron': schedule 'bad-cron': cron: day-of-week: 8 is out of range 0-7",
    "app 'broken_cron': schedule 'missing-task': task: ",
    "app 'broken_cron': schedule 'daily-report': name: 'daily-report' is declared in app "
    "'reports' and in app 'broken_cron'",
    "app 'broken_import': tests.django.project.broken_import.schedules failed: "
    "ModuleNotFoundError: No module named 'tests.django.project.no_such_module'",
]


def test_discovery_collects_every_problem_naming_app_and_schedule() -> None:
    registry = DjangoRegistry()
    discover_into(registry, MODULES)
    assert len(registry.problems) == len(PROBLEMS)
    for problem, expected in zip(registry.problems, PROBLEMS, strict=True):
        assert problem.startswith(expected), problem
    assert (
        "module 'tests.django.project.reports.tasks' has no attribute 'heartbeet'"
        in registry.problems[1]
    )
    # What is valid is declared all the same; nothing of it may be published meanwhile.
    assert {"daily-report", "weekly-report", "fine"} <= set(registry.names())
    assert registry.declared_in["daily-report"] == "reports"
    with pytest.raises(DeclarationError) as caught:
        registry.publish()
    assert caught.value.problems == registry.problems
    assert str(caught.value).startswith("schedules.py: 4 problems to fix first: app 'broken_cron'")
    for refused in (registry.prune, registry.scheduler, registry.publish_at_start):
        with pytest.raises(DeclarationError):
            refused()


def test_outside_discovery_a_declaration_still_raises_at_once() -> None:
    from goatbeat.core.errors import InvalidCron
    from tests.django.project.mail.tasks import send_email

    with pytest.raises(InvalidCron):
        DjangoRegistry().schedule(name="x", task=send_email, cron="0 9 * * 8")


def test_the_system_checks_list_every_problem(store: Any) -> None:
    done = manage("check", BROKEN)
    assert done.returncode == 1
    assert done.stderr.count("goatbeat.E001") == len(PROBLEMS)
    for expected in PROBLEMS:
        assert expected in done.stderr, expected


def test_the_scheduler_refuses_to_start_and_publishes_nothing(store: Any) -> None:
    checked = manage("goatbeat", BROKEN, "scheduler", "--once")
    assert checked.returncode == 1
    assert "goatbeat.E001" in checked.stderr and "bad-cron" in checked.stderr
    unchecked = manage("goatbeat", BROKEN, "--skip-checks", "scheduler", "--once")
    assert unchecked.returncode == 2
    (line,) = unchecked.stderr.strip().splitlines()
    assert line.startswith("goatbeat: error: schedules.py: 4 problems to fix first: ")
    for expected in PROBLEMS:
        assert expected in line, expected
    assert store.list_schedules() == []


def test_the_project_still_serves_its_pages(store: Any) -> None:
    done = manage(
        "shell",
        BROKEN,
        "-c",
        "from django.test import Client; print(Client().get('/admin/login/').status_code)",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "200"


def test_the_admin_list_says_what_is_wrong_and_marks_nothing_orphaned(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from goatbeat.core.model import Schedule
    from goatbeat.core.triggers import IntervalTrigger
    from goatbeat.django.registry import get_registry

    store.publish(
        [Schedule(name="from-broken-app", task="json.dumps", trigger=IntervalTrigger("1h"))]
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    assert "goatbeat-orphaned" in client.get("/admin/goatbeat/schedule/").content.decode()
    problem = "app 'broken_cron': schedule 'bad-cron': cron: day-of-week: 8 is out of range 0-7"
    monkeypatch.setattr(get_registry(), "problems", [problem])
    body = client.get("/admin/goatbeat/schedule/").content.decode()
    assert "schedules.py files have 1 problem(s)" in body
    assert "schedule &#x27;bad-cron&#x27;" in body
    # Its app's schedules.py is broken: whether the code still declares it is unknown.
    assert "goatbeat-orphaned" not in body
