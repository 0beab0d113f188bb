"""The admin's task field offers the tasks the project is known to have (a datalist)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import IntervalTrigger

ADD = "/admin/goatbeat/schedule/add/"


@pytest.fixture
def root(store: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def celery_app() -> Iterator[Any]:
    from celery import Celery, _state

    previous = _state.get_current_app()
    app = Celery("offered", set_as_current=True)

    @app.task(name="billing.charge")
    def charge() -> None:  # pragma: no cover - never run
        return None

    try:
        yield app
    finally:
        previous.set_current()


@pytest.fixture
def dramatiq_broker() -> Iterator[Any]:
    import dramatiq
    import dramatiq.broker
    from dramatiq.brokers.stub import StubBroker

    previous = dramatiq.broker.global_broker
    broker = StubBroker()
    dramatiq.set_broker(broker)
    dramatiq.actor(lambda: None, actor_name="mailing.digest", broker=broker)
    try:
        yield broker
    finally:
        dramatiq.broker.global_broker = previous


def offered(client: Client) -> list[str]:
    body = client.get(ADD).content.decode()
    assert 'list="goatbeat-known-tasks"' in body
    (datalist,) = re.findall(r'<datalist id="goatbeat-known-tasks">(.*?)</datalist>', body, re.S)
    return re.findall(r'<option value="([^"]*)">', datalist)


def test_the_task_field_offers_every_known_task(
    root: Client, store: Any, celery_app: Any, dramatiq_broker: Any
) -> None:
    store.create(
        Schedule(
            name="imported",
            task="legacy.tasks.cleanup",
            trigger=IntervalTrigger("1h"),
            source=Source.CELERY,
        )
    )
    tasks = offered(root)
    assert tasks == sorted(tasks)
    assert {
        "tests.django.project.reports.tasks.generate_report",  # declared in code
        "tests.django.project.reports.tasks.immediate_report",  # a Django Task of an app
        "tests.django.project.mail.tasks.send_email",
        "legacy.tasks.cleanup",  # a stored schedule's
        "billing.charge",  # registered with the Celery app
        "mailing.digest",  # declared on the Dramatiq broker
    } <= set(tasks)
    assert not [t for t in tasks if t.startswith("celery.")]  # Celery's own built-ins
    assert "tests.django.project.reports.tasks._trace" not in tasks  # a helper, not a task


def test_an_allow_list_narrows_what_is_offered(
    root: Client, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goatbeat.django import known_tasks

    monkeypatch.setattr(
        known_tasks,
        "allowed_patterns",
        lambda: ["tests.django.project.mail.*", "ops.tasks.rotate_logs"],
    )
    assert offered(root) == ["ops.tasks.rotate_logs", "tests.django.project.mail.tasks.send_email"]
