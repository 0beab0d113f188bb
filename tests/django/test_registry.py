"""schedules.py discovery, DjangoRegistry and call()."""

from __future__ import annotations

from datetime import timedelta

import pytest

from goatbeat.core.errors import InvalidCron, InvalidSchedule, InvalidValue
from goatbeat.core.model import Source
from goatbeat.core.triggers import CronTrigger, IntervalTrigger
from goatbeat.django import DjangoRegistry, call
from goatbeat.django.registry import get_registry, rediscover


def test_every_apps_schedules_py_is_discovered_at_startup() -> None:
    registry = get_registry()
    assert set(registry.names()) == {"daily-report", "weekly-report", "broken-report", "ping"}
    # The "plain" app has a schedules.py without register(): skipped, not an error.
    assert all(s.source is Source.CODE for s in registry.schedules)


def test_declarations_keep_task_trigger_arguments_and_routing() -> None:
    by_name = {s.name: s for s in get_registry().schedules}
    daily = by_name["daily-report"]
    assert daily.task == "tests.django.project.reports.tasks.generate_report"
    # Cron schedules without a zone read wall-clock time in TIME_ZONE.
    assert daily.trigger == CronTrigger("0 9 * * *", timezone="Europe/Paris")
    assert by_name["weekly-report"].args == ("weekly",)
    ping = by_name["ping"]
    assert ping.args == (42,)
    assert ping.routing.queue == "default"
    assert ping.trigger == IntervalTrigger(timedelta(minutes=5))


@pytest.mark.django_tasks
def test_the_registry_remembers_which_backend_runs_each_task_object() -> None:
    backends = get_registry().backends
    assert backends["tests.django.project.reports.tasks.generate_report"] == "django_tasks"
    assert backends["tests.django.project.mail.tasks.send_email"] == "django_tasks"


def test_rediscovery_builds_the_same_registry() -> None:
    first = sorted(get_registry().names())
    assert sorted(rediscover().names()) == first


def test_call_binds_arguments_and_rejects_them_twice() -> None:
    from tests.django.project.mail.tasks import send_email

    beat = DjangoRegistry()
    declared = beat.schedule(name="x", task=call(send_email, 7, extra=1), every="1h")
    assert declared.args == (7,) and declared.kwargs == {"extra": 1}
    with pytest.raises(InvalidSchedule, match="args"):
        beat.schedule(name="y", task=call(send_email, 7), args=[8], every="1h")


def test_invalid_declarations_fail_naming_the_field() -> None:
    from tests.django.project.mail.tasks import send_email

    beat = DjangoRegistry()
    with pytest.raises(InvalidCron) as caught:
        beat.schedule(name="bad", task=send_email, cron="0 9 * * 8")
    assert caught.value.field == "cron" and "out of range" in str(caught.value)
    with pytest.raises(InvalidValue) as caught_priority:
        # Django Tasks priorities run from -100 to 100: the backend says no at declaration.
        beat.schedule(name="urgent", task=send_email, every="1m", priority=500)
    assert caught_priority.value.field == "priority"
    beat.schedule(name="ok", task=send_email, every="1m")
    with pytest.raises(InvalidSchedule, match="declared twice"):
        beat.schedule(name="ok", task=send_email, every="1m")


def test_a_dotted_path_that_is_not_a_task_is_refused_at_declaration() -> None:
    beat = DjangoRegistry()
    with pytest.raises(InvalidSchedule) as caught:
        beat.schedule(name="nope", task="tests.django.project.reports.tasks.missing", every="1m")
    assert caught.value.field == "task"


def test_a_misspelt_task_names_the_module_and_the_missing_attribute() -> None:
    import tests.django.project.reports.tasks  # noqa: F401  (imported: an attribute of its package)

    beat = DjangoRegistry()
    with pytest.raises(InvalidSchedule) as caught:
        beat.schedule(name="beat", task="tests.django.project.reports.tasks.heartbeet", every="1m")
    message = str(caught.value)
    assert "module 'tests.django.project.reports.tasks' has no attribute 'heartbeet'" in message
    assert "'tasks.heartbeet'" not in message
