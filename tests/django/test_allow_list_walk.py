"""#32 under Django: the router says what a name runs, and the admin form refuses a task an
``allowed_tasks`` pattern matches only as a string (``tests.bartasks.os.system``: the module
imports ``os``). A Celery name stays a name (the worker runs only a registered task under it);
a Django Task is what its ``module_path`` names (what Django's worker imports); any other
callable is where it is defined."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from goatbeat.core.errors import TaskNotAllowed
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.registry import get_registry
from goatbeat.django.submitter import DjangoRoutingSubmitter
from tests.django.test_admin import _add_form

PATTERN = "tests.bartasks.*"
REPORT = "tests.django.project.reports.tasks.generate_report"


@pytest.fixture
def allowed(monkeypatch: pytest.MonkeyPatch) -> Any:
    registry = get_registry()
    monkeypatch.setattr(
        registry, "settings", dataclasses.replace(registry.settings, allowed_tasks=(PATTERN,))
    )
    return registry


@pytest.fixture
def celery_name() -> Iterator[str]:
    """A name registered with the Celery app of the router's Celery backend."""
    app = get_registry().submitter.submitter_for("celery").app  # type: ignore[attr-defined]

    @app.task(name="tests.bartasks.celery_only", shared=False)
    def only() -> None:  # pragma: no cover - never run
        return None

    try:
        yield "tests.bartasks.celery_only"
    finally:
        app.tasks.pop("tests.bartasks.celery_only", None)


@pytest.mark.django_tasks  # the module's own tasks are Django Tasks
def test_the_router_says_what_each_name_runs(celery_name: str) -> None:
    router = get_registry().submitter
    assert isinstance(router, DjangoRoutingSubmitter)
    assert router.task_definition("tests.bartasks.touch") == "tests.bartasks.touch"
    assert router.task_definition("tests.bartasks.os.system") == "posix.system"
    assert router.task_definition(REPORT) == REPORT
    alias = "tests.bartasks.django_alias.generate_report"
    assert router.task_definition(alias) == REPORT  # Django's worker runs the original
    assert router.task_definition(celery_name) == celery_name
    with pytest.raises(LookupError, match="partial object has no __qualname__"):
        router.task_definition("tests.bartasks.partial_shell")


def test_a_pinned_router_asks_its_backend() -> None:
    celery = DjangoRoutingSubmitter(pinned="celery", options={"celery": {"app": "memory://"}})
    rq = DjangoRoutingSubmitter(pinned="rq", options={"rq": {"connection": "redis://127.0.0.1:1"}})
    try:
        # Celery's worker looks the name up in its registry: nothing to walk, nothing imported.
        sys.modules.pop("tests.never_imported", None)
        assert celery.task_definition("tests.never_imported.os.system") == (
            "tests.never_imported.os.system"
        )
        assert "tests.never_imported" not in sys.modules
        assert rq.task_definition("tests.bartasks.os.system") == "posix.system"
    finally:
        celery.close()
        rq.close()


@pytest.mark.parametrize(
    ("task", "why"),
    [
        ("tests.bartasks.os.system", "resolves to posix.system"),
        ("tests.bartasks.run", "resolves to subprocess.run"),
        ("tests.bartasks.popen", "resolves to subprocess.Popen"),
        ("tests.bartasks.caller", "a Caller object has no __qualname__"),
        pytest.param(
            "tests.bartasks.django_alias.generate_report",
            f"resolves to {REPORT}",
            marks=pytest.mark.django_tasks,
        ),
    ],
)
def test_the_registry_refuses_a_walk_under_the_router(allowed: Any, task: str, why: str) -> None:
    with pytest.raises(TaskNotAllowed) as caught:
        allowed.check_task(task)
    assert why in str(caught.value)


@pytest.mark.django_tasks  # the module's own tasks are Django Tasks
def test_the_registry_allows_what_the_pattern_defines(allowed: Any, celery_name: str) -> None:
    allowed.check_task("tests.bartasks.touch")
    allowed.check_task("tests.bartasks.django_alias.own_report")
    allowed.check_task(celery_name)


@pytest.mark.django_tasks  # the module's own tasks are Django Tasks
def test_the_admin_form_refuses_a_walked_task_and_saves_the_modules_own(
    store: Any, allowed: Any
) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    add = reverse("admin:goatbeat_schedule_add")
    response = client.post(
        add, _add_form(task="tests.bartasks.os.system", args='["touch /tmp/goatbeat-pwned"]')
    )
    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert "resolves to posix.system" in errors["task"][0], errors
    assert not ScheduleRow.objects.filter(name="nightly-cleanup").exists()

    own = "tests.bartasks.django_alias.own_report"
    saved = client.post(add, _add_form(task=own, args="[]", queue=""))
    assert saved.status_code == 302, saved.context and saved.context["adminform"].form.errors
    assert store.get("nightly-cleanup").task == own
