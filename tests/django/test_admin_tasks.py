"""The admin's task field offers the tasks the project is known to have (a datalist): exactly
what the allow-list accepts, so nothing offered is refused on save."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.django.registry import get_registry

ADD = "/admin/goatbeat/schedule/add/"


@pytest.fixture
def root(store: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def celery_task() -> Iterator[str]:
    """A task registered with the Celery app goatbeat's Celery backend uses."""
    app = get_registry().submitter.submitter_for("celery").app  # type: ignore[attr-defined]

    @app.task(name="billing.charge")
    def charge() -> None:  # pragma: no cover - never run
        return None

    try:
        yield "billing.charge"
    finally:
        app.tasks.pop("billing.charge", None)


@pytest.fixture
def allowed_tasks(monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    # Under the router, a name a pattern admits must be where its callable is defined (#32):
    # "tests.bartasks.run" is subprocess.run, imported there.
    patterns = ("tests.bartasks.*", "tests.bartasks.jobs.send_report", "tests.bartasks.run")
    registry = get_registry()
    monkeypatch.setattr(
        registry, "settings", dataclasses.replace(registry.settings, allowed_tasks=patterns)
    )
    return patterns


def offered(client: Client) -> list[str]:
    body = client.get(ADD).content.decode()
    assert 'list="goatbeat-known-tasks"' in body
    (datalist,) = re.findall(r'<datalist id="goatbeat-known-tasks">(.*?)</datalist>', body, re.S)
    return re.findall(r'<option value="([^"]*)">', datalist)


def _stored(store: Any, name: str, task: str) -> None:
    store.create(
        Schedule(name=name, task=task, trigger=IntervalTrigger("1h"), source=Source.CELERY)
    )


@pytest.mark.django_tasks
def test_the_task_field_offers_every_known_task(
    root: Client, store: Any, celery_task: str, allowed_tasks: tuple[str, ...]
) -> None:
    _stored(store, "imported", "tests.bartasks.touch")  # allowed by a pattern
    _stored(store, "sneaked-in", "os.system")  # written with SQL, say: never offered
    _stored(store, "walked", "tests.bartasks.os.system")  # matches the pattern: never offered
    tasks = offered(root)
    assert tasks == sorted(tasks)
    assert {
        "tests.django.project.reports.tasks.generate_report",  # declared in code
        "tests.django.project.reports.tasks.immediate_report",  # an installed app's Django Task
        "tests.django.project.mail.tasks.send_email",
        celery_task,  # registered with the Celery app
        "tests.bartasks.touch",  # a stored schedule's, allowed by allowed_tasks
        "tests.bartasks.jobs.send_report",  # a plain name in allowed_tasks
    } <= set(tasks)
    assert "os.system" not in tasks and "tests.bartasks.os.system" not in tasks
    assert "tests.bartasks.run" not in tasks  # a plain name that resolves to subprocess.run
    assert "tests.bartasks.*" not in tasks  # a pattern is not a task
    assert "tests.django.project.reports.tasks._trace" not in tasks  # a helper, not a task
    allow = get_registry().task_allow_list()
    assert all(allow.allows(task) for task in tasks)  # nothing offered is refused on save
