"""The admin: writes through the store, the same validation as code, permissions enforced."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from goatbeat.core.model import ExecutionKind, ExecutionStatus, Schedule, Source
from goatbeat.django.models import Schedule as ScheduleRow

CHANGELIST = "admin:goatbeat_schedule_changelist"
INLINE = {  # the management form of the read-only executions inline
    "executions-TOTAL_FORMS": "0",
    "executions-INITIAL_FORMS": "0",
    "executions-MIN_NUM_FORMS": "0",
    "executions-MAX_NUM_FORMS": "0",
}


def _publish() -> None:
    call_command("goatbeat", "schedule", "list", stdout=StringIO(), stderr=StringIO())


@pytest.fixture
def superuser_client(store: Any) -> Client:
    _publish()
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def viewer_client(store: Any) -> Client:
    """A staff user who may view schedules but not change them."""
    _publish()
    user = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="goatbeat", codename__in=["view_schedule", "view_execution"]
        )
    )
    client = Client()
    client.force_login(user)
    return client


def _add_form(**overrides: str) -> dict[str, str]:
    data = {
        **INLINE,
        "name": "nightly-cleanup",
        "task": "tests.django.project.mail.tasks.send_email",
        "trigger_kind": "cron",
        "cron": "30 2 * * *",
        "every": "",
        "timezone": "Europe/Paris",
        "args": "[7]",
        "kwargs": "{}",
        "headers": "{}",
        "misfire_policy": "skip",
        "grace": "5m",
        "catch_up_limit": "100",
        "enabled": "on",
        "description": "",
        "queue": "default",
    }
    data.update(overrides)
    return data


def test_the_list_shows_schedules_with_filters(superuser_client: Client) -> None:
    response = superuser_client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    body = response.content.decode()
    for name in ("daily-report", "weekly-report", "ping"):
        assert name in body
    for filter_name in ("enabled", "source", "last_status", "misfire_policy"):
        assert f"?{filter_name}" in body or f"{filter_name}__exact" in body
    filtered = superuser_client.get(reverse(CHANGELIST), {"source__exact": "admin"})
    assert "daily-report" not in filtered.content.decode()


def test_creating_a_cron_schedule_saves_it_through_the_store(
    superuser_client: Client, store: Any
) -> None:
    response = superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    assert response.status_code == 302, response.content.decode()[:3000]
    created = store.get("nightly-cleanup")
    assert created.source is Source.ADMIN
    assert created.trigger.to_spec() == {
        "kind": "cron",
        "expression": "30 2 * * *",
        "timezone": "Europe/Paris",
    }
    assert created.args == (7,)
    assert created.misfire_grace.total_seconds() == 300
    # next_run_at follows the scheduling rules: the first 02:30 Paris time after now.
    assert created.next_run_at == created.first_run_after(store.now())


def test_a_bad_cron_expression_is_shown_on_the_cron_field(superuser_client: Client) -> None:
    response = superuser_client.post(
        reverse("admin:goatbeat_schedule_add"), _add_form(cron="0 9 * * 8")
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "day-of-week: 8 is out of range 0-7" in errors["cron"][0]
    assert not ScheduleRow.objects.filter(name="nightly-cleanup").exists()


def test_other_core_errors_land_on_their_own_fields(superuser_client: Client) -> None:
    response = superuser_client.post(
        reverse("admin:goatbeat_schedule_add"),
        _add_form(trigger_kind="interval", every="soon", timezone="Mars/Olympus"),
    )
    form = response.context["adminform"].form
    assert "every" in form.errors
    bad_zone = superuser_client.post(
        reverse("admin:goatbeat_schedule_add"), _add_form(timezone="Mars/Olympus")
    )
    assert "Mars/Olympus" in bad_zone.context["adminform"].form.errors["timezone"][0]
    bad_task = superuser_client.post(
        reverse("admin:goatbeat_schedule_add"), _add_form(task="tests.nowhere.task")
    )
    assert "task" in bad_task.context["adminform"].form.errors


def test_editing_an_admin_schedule_recomputes_next_run(
    superuser_client: Client, store: Any
) -> None:
    superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    before = store.get("nightly-cleanup")
    url = reverse("admin:goatbeat_schedule_change", args=[before.id])
    page = superuser_client.get(url)
    body = page.content.decode()
    assert "Next 10 fire times" in body
    assert body.count("<li><time datetime=") == 10
    response = superuser_client.post(url, _add_form(trigger_kind="interval", every="10m"))
    assert response.status_code == 302
    after = store.get("nightly-cleanup")
    assert after.trigger.to_spec()["kind"] == "interval"
    assert after.version > before.version
    assert after.next_run_at == after.first_run_after(after.updated_at)


def test_code_schedules_are_read_only_except_enabled(superuser_client: Client, store: Any) -> None:
    daily = store.get("daily-report")
    url = reverse("admin:goatbeat_schedule_change", args=[daily.id])
    page = superuser_client.get(url)
    form = page.context["adminform"].form
    assert list(form.fields) == ["enabled"]
    # A POST that tries to change the definition changes only `enabled`.
    response = superuser_client.post(url, {**INLINE, "cron": "* * * * *", "task": "evil.task"})
    assert response.status_code == 302
    after = store.get("daily-report")
    assert after.enabled is False and after.next_run_at is None
    assert after.task == daily.task and after.trigger == daily.trigger


def test_actions_enable_disable_and_run_now(superuser_client: Client, store: Any) -> None:
    ids = [str(store.get(n).id) for n in ("ping", "daily-report")]
    changelist = reverse(CHANGELIST)
    superuser_client.post(changelist, {"action": "disable_schedules", "_selected_action": ids})
    assert not store.get("ping").enabled and not store.get("daily-report").enabled
    superuser_client.post(changelist, {"action": "enable_schedules", "_selected_action": ids})
    assert store.get("ping").enabled and store.get("ping").next_run_at is not None
    superuser_client.post(changelist, {"action": "run_now", "_selected_action": ids[:1]})
    (execution,) = store.executions(name="ping")
    assert execution.kind is ExecutionKind.MANUAL


def test_a_user_without_change_permission_cannot_run_actions_even_by_direct_post(
    viewer_client: Client, store: Any
) -> None:
    ping = store.get("ping")
    changelist = reverse(CHANGELIST)
    page = viewer_client.get(changelist)
    assert page.status_code == 200
    assert "run_now" not in page.content.decode()
    for action in ("disable_schedules", "run_now"):
        viewer_client.post(changelist, {"action": action, "_selected_action": [str(ping.id)]})
    assert store.get("ping").enabled is True
    assert store.executions(name="ping") == []
    run = viewer_client.post(reverse("admin:goatbeat_schedule_run", args=[ping.id]))
    assert run.status_code == 403
    change = viewer_client.post(
        reverse("admin:goatbeat_schedule_change", args=[ping.id]), {**INLINE, "enabled": ""}
    )
    assert change.status_code == 403
    assert store.get("ping").enabled is True
    assert store.executions(name="ping") == []


def test_run_now_button_requests_a_run(superuser_client: Client, store: Any) -> None:
    ping = store.get("ping")
    response = superuser_client.post(reverse("admin:goatbeat_schedule_run", args=[ping.id]))
    assert response.status_code == 302
    assert [e.kind for e in store.executions(name="ping")] == [ExecutionKind.MANUAL]
    assert (
        superuser_client.get(reverse("admin:goatbeat_schedule_run", args=[ping.id])).status_code
        == 405
    )


def test_executions_are_read_only_history_filterable_by_status(
    superuser_client: Client, store: Any
) -> None:
    store.request_run("ping")
    store.request_run("daily-report")
    (execution,) = store.executions(name="daily-report")
    store.record_finished(execution.idempotency_key, succeeded=False, error="boom")
    listing = reverse("admin:goatbeat_execution_changelist")
    claimed = superuser_client.get(listing, {"status__exact": "claimed"}).content.decode()
    assert "ping" in claimed and "daily-report" not in claimed
    failed = superuser_client.get(listing, {"status__exact": "failed"}).content.decode()
    assert "daily-report" in failed
    assert superuser_client.get(reverse("admin:goatbeat_execution_add")).status_code == 403
    change = reverse("admin:goatbeat_execution_change", args=[execution.id])
    superuser_client.post(change, {"status": "succeeded"})
    (again,) = store.executions(name="daily-report")
    assert again.status is ExecutionStatus.FAILED


# -- damaged rows ---------------------------------------------------------------------------------


def _damage(name: str, **columns: Any) -> None:
    """Overwrite columns by hand, behind the store's back (JSON columns take JSON text)."""
    from django.db import connections

    from goatbeat.django import conf

    with connections[conf.get().database].cursor() as cursor:
        for column, value in columns.items():
            cast = "::jsonb" if column in ("trigger", "args", "kwargs", "headers") else ""
            cursor.execute(
                f"UPDATE goatbeat_schedule SET {column} = %s{cast} WHERE name = %s", [value, name]
            )


def test_damaged_rows_are_listed_and_marked_not_a_server_error(
    superuser_client: Client, store: Any
) -> None:
    superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    _damage("nightly-cleanup", args='{"a": 1}')
    _damage("ping", trigger='{"kind": "nope"}')

    page = superuser_client.get(reverse(CHANGELIST))

    assert page.status_code == 200
    body = page.content.decode()
    assert body.count('<strong class="goatbeat-damaged">damaged</strong>') == 2
    assert "args column holds {&#x27;a&#x27;: 1}" in body
    assert "trigger column holds {&#x27;kind&#x27;: &#x27;nope&#x27;}" in body
    assert "daily-report" in body


def test_a_damaged_admin_schedule_is_repaired_on_its_change_page(
    superuser_client: Client, store: Any
) -> None:
    superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    before = store.get("nightly-cleanup")
    _damage("nightly-cleanup", timezone="Mars/Olympus", catch_up_limit=0)
    url = reverse("admin:goatbeat_schedule_change", args=[before.id])

    page = superuser_client.get(url)
    assert page.status_code == 200
    body = page.content.decode()
    assert "timezone column holds &#x27;Mars/Olympus&#x27;" in body
    assert "none: the stored row is damaged" in body
    # Saving it unchanged is refused on the damaged fields; saving valid values repairs it.
    unchanged = superuser_client.post(url, _add_form(timezone="Mars/Olympus", catch_up_limit="0"))
    assert unchanged.status_code == 200
    assert set(unchanged.context["adminform"].form.errors) == {"timezone"}
    assert store.get("nightly-cleanup").last_status is None  # untouched

    response = superuser_client.post(url, _add_form())

    assert response.status_code == 302
    repaired = store.get("nightly-cleanup")
    assert repaired.timezone == "Europe/Paris" and repaired.catch_up_limit == 100
    assert repaired.next_run_at == repaired.first_run_after(repaired.updated_at)
    assert "goatbeat-damaged" not in superuser_client.get(url).content.decode()


def test_a_catch_up_limit_of_zero_is_refused_not_replaced_by_the_default(
    superuser_client: Client,
) -> None:
    response = superuser_client.post(
        reverse("admin:goatbeat_schedule_add"), _add_form(catch_up_limit="0")
    )
    assert response.status_code == 200
    assert "catch_up_limit" in response.context["adminform"].form.errors


def test_a_damaged_code_schedule_can_be_disabled_and_not_enabled(
    superuser_client: Client, store: Any
) -> None:
    ping = store.get("ping")
    _damage("ping", kwargs="[1]")
    url = reverse("admin:goatbeat_schedule_change", args=[ping.id])
    assert superuser_client.get(url).status_code == 200

    refused = superuser_client.post(url, {**INLINE, "enabled": "on"})
    assert refused.status_code == 200
    assert "kwargs column holds [1]" in refused.context["adminform"].form.errors["enabled"][0]
    changelist = reverse(CHANGELIST)
    superuser_client.post(
        changelist, {"action": "disable_schedules", "_selected_action": [ping.id]}
    )
    assert store.get("ping").enabled is False
    response = superuser_client.post(
        changelist, {"action": "enable_schedules", "_selected_action": [ping.id]}, follow=True
    )
    assert response.status_code == 200
    assert (
        "stored schedule &#x27;ping&#x27; has a damaged kwargs column" in response.content.decode()
    )
    assert store.get("ping").enabled is False
    _publish()  # a redeploy rewrites a code schedule from its declaration
    repaired = store.get("ping")
    assert isinstance(repaired, Schedule) and repaired.enabled is False


def test_a_damaged_schedule_can_be_deleted_from_the_admin(
    superuser_client: Client, store: Any
) -> None:
    superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    row = store.get("nightly-cleanup")
    _damage("nightly-cleanup", headers='"x"')
    url = reverse("admin:goatbeat_schedule_delete", args=[row.id])
    assert superuser_client.get(url).status_code == 200
    response = superuser_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not ScheduleRow.objects.filter(name="nightly-cleanup").exists()


def test_failed_and_missed_runs_show_in_the_list_and_the_history(
    superuser_client: Client, store: Any
) -> None:
    from goatbeat.core.model import SubmitOutcome

    store.request_run("ping")
    (occurrence,) = store.pending(limit=10)
    error = "missed: not accepted within its misfire grace (60s) after 7 attempts; last error: x"
    store.record_outcomes(
        [
            SubmitOutcome(
                execution_id=occurrence.execution_id, ok=False, final=True, missed=True, error=error
            )
        ]
    )
    schedules = reverse(CHANGELIST)
    missed = superuser_client.get(schedules, {"last_status": "missed"}).content.decode()
    assert "ping" in missed and "daily-report" not in missed
    assert ScheduleRow.objects.get(name="ping").missed_count == 1
    history = reverse("admin:goatbeat_execution_changelist")
    failed = superuser_client.get(history, {"status__exact": "submit_failed"}).content.decode()
    assert "ping" in failed and "missed: not accepted within its misfire grace" in failed


@pytest.fixture
def editor_client(store: Any) -> Client:
    """A staff user who may add and change schedules, nothing more (not a superuser)."""
    _publish()
    user = User.objects.create_user("editor", "editor@example.com", "pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="goatbeat",
            codename__in=["view_schedule", "add_schedule", "change_schedule", "view_execution"],
        )
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "task",
    ["os.system", "shutil.rmtree", "subprocess.getoutput", "tests.django.untrusted_module.run"],
)
def test_a_direct_post_cannot_schedule_a_task_outside_the_allow_list(
    editor_client: Client, store: Any, task: str
) -> None:
    import sys

    sys.modules.pop("tests.django.untrusted_module", None)
    response = editor_client.post(
        reverse("admin:goatbeat_schedule_add"), _add_form(task=task, args='["rm -rf /"]')
    )
    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert "task" in errors and "is not a known task" in errors["task"][0], errors
    assert "allowed_tasks" in errors["task"][0]
    assert not ScheduleRow.objects.filter(name="nightly-cleanup").exists()
    assert "tests.django.untrusted_module" not in sys.modules  # never imported


def test_a_direct_post_cannot_change_a_task_to_one_outside_the_allow_list(
    editor_client: Client, superuser_client: Client, store: Any
) -> None:
    created = superuser_client.post(reverse("admin:goatbeat_schedule_add"), _add_form())
    assert created.status_code == 302
    row = ScheduleRow.objects.get(name="nightly-cleanup")
    change = reverse("admin:goatbeat_schedule_change", args=[row.id])
    response = editor_client.post(change, _add_form(task="os.system"))
    assert response.status_code == 200
    assert "task" in response.context["adminform"].form.errors
    assert store.get("nightly-cleanup").task == "tests.django.project.mail.tasks.send_email"


def test_known_tasks_are_the_projects_django_tasks_and_allowed_tasks_adds_more(
    store: Any, settings: Any
) -> None:
    import sys

    from goatbeat.core.errors import TaskNotAllowed
    from goatbeat.django import conf
    from goatbeat.django.registry import get_registry, rediscover

    registry = get_registry()
    # Django Task objects of the installed apps are known, declared in code or not.
    registry.check_task("tests.django.project.reports.tasks.generate_report")
    registry.check_task("tests.django.project.mail.tasks.send_email")
    sys.modules.pop("tests.django.untrusted_module", None)
    with pytest.raises(TaskNotAllowed):
        registry.check_task("tests.django.untrusted_module.run")
    assert "tests.django.untrusted_module" not in sys.modules
    settings.GOATBEAT = {**settings.GOATBEAT, "allowed_tasks": ["tests.django.untrusted_*"]}
    conf.reset()
    try:
        rediscover().check_task("tests.django.untrusted_module.run")
    finally:
        conf.reset()
        rediscover()
