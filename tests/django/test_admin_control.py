"""The admin's schedule control: pause with a note (an intermediate page), resume from now or
catching up (actions and the page's buttons), backfill (a page that previews, then asks the
leader), the control options in the form; each write in the History, the change permission
required."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from goatbeat.core.model import ExecutionKind, OverlapPolicy, Schedule
from goatbeat.core.timeutil import iso_z
from goatbeat.django.models import Schedule as ScheduleRow
from tests.django.test_admin import CHANGELIST, _add_form

SELECTED = "_selected_action"


def _publish() -> None:
    call_command("goatbeat", "schedule", "list", stdout=StringIO(), stderr=StringIO())


@pytest.fixture
def admin_client(store: Any) -> Client:
    _publish()
    client = Client()
    client.force_login(User.objects.create_superuser("alice", "alice@example.com", "pw"))
    return client


def _history(name: str) -> list[str]:
    row = ScheduleRow.objects.get(name=name)
    return [
        e.get_change_message()
        for e in LogEntry.objects.filter(object_id=str(row.pk)).order_by("action_time")
    ]


def _stored(store: Any, name: str) -> Schedule:
    stored = store.get(name)
    assert isinstance(stored, Schedule)
    return stored


def test_pause_asks_for_a_note_then_records_it_with_who_and_when(
    admin_client: Client, store: Any
) -> None:
    ids = [ScheduleRow.objects.get(name=n).pk for n in ("daily-report", "ping")]
    page = admin_client.post(reverse(CHANGELIST), {"action": "pause_schedules", SELECTED: ids})
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="note"' in body and "daily-report" in body and "ping" in body
    assert not _stored(store, "ping").paused  # nothing happens before the page is sent

    done = admin_client.post(
        reverse(CHANGELIST),
        {"action": "pause_schedules", SELECTED: ids, "apply": "1", "note": "incident 42"},
        follow=True,
    )
    assert done.status_code == 200
    for name in ("daily-report", "ping"):
        stored = _stored(store, name)
        assert stored.paused and stored.pause_note == "incident 42"
        assert stored.paused_by == "alice"
        assert stored.paused_at is not None
        assert abs(stored.paused_at - datetime.now(UTC)) < timedelta(minutes=1)
        assert _history(name)[-1] == "Paused: incident 42."
    listing = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "goatbeat-paused" in listing and "incident 42" in listing
    assert "by alice" in listing
    page = admin_client.get(reverse("admin:goatbeat_schedule_change", args=[ids[1]]))
    text = page.content.decode()
    assert "Paused since" in text and "goatbeat-resume" in text
    assert "none while paused" in text


def test_resume_from_the_list_and_from_the_page(admin_client: Client, store: Any) -> None:
    for name in ("daily-report", "ping"):
        store.pause(name, note="x")
    row = ScheduleRow.objects.get(name="ping")
    admin_client.post(
        reverse(CHANGELIST),
        {"action": "resume_schedules", SELECTED: [row.pk]},
        follow=True,
    )
    assert not _stored(store, "ping").paused
    assert _history("ping")[-1].startswith("Resumed from now; ")

    daily = ScheduleRow.objects.get(name="daily-report")
    response = admin_client.post(
        reverse("admin:goatbeat_schedule_resume", args=[daily.pk]), {"catch_up": "1"}
    )
    assert response.status_code == 302
    assert not _stored(store, "daily-report").paused
    assert _history("daily-report")[-1] == "Resumed, catching up the pause by the misfire policy."
    # GET does nothing.
    assert (
        admin_client.get(reverse("admin:goatbeat_schedule_resume", args=[daily.pk])).status_code
        == 405
    )


def test_backfill_previews_the_instants_then_asks_the_leader(
    admin_client: Client, store: Any
) -> None:
    row = ScheduleRow.objects.get(name="daily-report")  # cron 0 9 * * *
    start = (datetime.now(UTC) - timedelta(days=4)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    end = start + timedelta(days=3)
    form = {
        "action": "backfill_schedule",
        SELECTED: [row.pk],
        "start": start.isoformat(),
        "end": end.isoformat(),
        "limit": "10",
    }
    page = admin_client.post(
        reverse(CHANGELIST), {"action": "backfill_schedule", SELECTED: [row.pk]}
    )
    assert page.status_code == 200 and 'name="start"' in page.content.decode()

    preview = admin_client.post(reverse(CHANGELIST), {**form, "preview": "1"})
    body = preview.content.decode()
    assert "errorlist" not in body, body[body.find("errorlist") - 200 :][:600]
    trigger = _stored(store, "daily-report").trigger  # 09:00 in the project's zone
    instants = []
    at = trigger.next_after(start)
    while at is not None and at < end:
        instants.append(at)
        at = trigger.next_after(at)
    assert len(instants) == 3
    for instant in instants:
        assert iso_z(instant) in body
    assert "3 to submit" in body and "goatbeat-backfill" in body
    assert store.executions(name="daily-report") == []  # a preview writes nothing

    admin_client.post(reverse(CHANGELIST), {**form, "apply": "1"}, follow=True)
    backfilled = store.executions(name="daily-report")
    assert sorted(e.scheduled_at for e in backfilled) == instants
    assert {e.kind for e in backfilled} == {ExecutionKind.BACKFILL}
    assert _history("daily-report")[-1].startswith("Backfill requested: 3 instant(s) from ")

    # The same range again: nothing to submit, every instant listed as there already.
    again = admin_client.post(reverse(CHANGELIST), {**form, "preview": "1"}).content.decode()
    assert "0 to submit" in again and "already claimed" in again
    # A range reaching past now is refused on its field.
    late = admin_client.post(
        reverse(CHANGELIST),
        {**form, "end": (datetime.now(UTC) + timedelta(days=1)).isoformat(), "preview": "1"},
    ).content.decode()
    assert "a backfill covers past instants only" in late


def test_control_actions_need_the_change_permission(store: Any) -> None:
    _publish()
    user = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="goatbeat", codename="view_schedule")
    )
    client = Client()
    client.force_login(user)
    row = ScheduleRow.objects.get(name="ping")
    for action in ("pause_schedules", "resume_schedules", "backfill_schedule"):
        client.post(
            reverse(CHANGELIST),
            {"action": action, SELECTED: [row.pk], "apply": "1", "note": "no"},
        )
    assert not _stored(store, "ping").paused
    assert client.post(reverse("admin:goatbeat_schedule_resume", args=[row.pk])).status_code == 403


def test_the_form_takes_the_control_options_and_names_a_missing_max_runtime(
    admin_client: Client, store: Any, settings: Any
) -> None:
    add = reverse("admin:goatbeat_schedule_add")
    refused = admin_client.post(add, _add_form(overlap="skip", jitter_duration="30s"))
    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert "required when overlap is 'skip'" in errors["max_runtime_duration"][0]

    saved = admin_client.post(
        add,
        _add_form(
            overlap="buffer_one",
            max_runtime_duration="1h",
            jitter_duration="30s",
            pause_on_failure="3",
        ),
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    stored = _stored(store, "nightly-cleanup")
    assert (stored.jitter, stored.overlap, stored.max_runtime, stored.pause_on_failure) == (
        timedelta(seconds=30),
        OverlapPolicy.BUFFER_ONE,
        timedelta(hours=1),
        3,
    )
    # An edit that does not touch them keeps them as stored.
    row = ScheduleRow.objects.get(name="nightly-cleanup")
    page = admin_client.get(reverse("admin:goatbeat_schedule_change", args=[row.pk]))
    form = page.context["adminform"].form
    assert form.initial["jitter_duration"] == "30s" and form.initial["max_runtime_duration"] == "1h"
    data = _add_form(
        overlap="buffer_one", max_runtime_duration="1h", jitter_duration="30s", pause_on_failure="3"
    )
    data.pop("name")
    data["description"] = "edited"
    edited = admin_client.post(reverse("admin:goatbeat_schedule_change", args=[row.pk]), data)
    assert edited.status_code == 302
    after = _stored(store, "nightly-cleanup")
    assert (after.jitter, after.max_runtime, after.description) == (
        timedelta(seconds=30),
        timedelta(hours=1),
        "edited",
    )


def test_manage_py_goatbeat_takes_the_same_control_commands(store: Any) -> None:
    _publish()

    def goatbeat(*args: str) -> str:
        out = StringIO()
        call_command("goatbeat", *args, stdout=out, stderr=StringIO())
        return out.getvalue()

    goatbeat("schedule", "pause", "ping", "--note", "incident 42", "--by", "ops")
    stored = _stored(store, "ping")
    assert stored.paused and (stored.pause_note, stored.paused_by) == ("incident 42", "ops")
    listed = {d["name"]: d for d in json.loads(goatbeat("schedule", "list", "--json"))}
    assert listed["ping"]["state"] == "paused" and listed["ping"]["pause_note"] == "incident 42"
    assert json.loads(goatbeat("schedule", "resume", "ping", "--json"))["was_paused"] is True
    added = json.loads(
        goatbeat(
            "schedule", "add", "cleanup", "--task", "tests.django.project.mail.tasks.send_email",
            "--every", "1h", "--jitter", "1m", "--json",
        )
    )  # fmt: skip
    assert added["source"] == "admin" and added["jitter"] == 60
    edited = json.loads(goatbeat("schedule", "edit", "cleanup", "--every", "2h", "--json"))
    assert edited["trigger_description"] == "every 2h"


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, Any]]]:
    return [(r.getMessage(), r.goatbeat) for r in caplog.records if hasattr(r, "goatbeat")]


def test_every_admin_write_logs_the_goatbeat_event_the_cli_and_the_api_log(
    admin_client: Client, store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="goatbeat")
    ping = ScheduleRow.objects.get(name="ping").pk
    for action in ("disable_schedules", "enable_schedules", "run_now"):
        admin_client.post(reverse(CHANGELIST), {"action": action, SELECTED: [ping]})
    assert admin_client.post(reverse("admin:goatbeat_schedule_add"), _add_form()).status_code == 302
    created = _stored(store, "nightly-cleanup")
    change = reverse("admin:goatbeat_schedule_change", args=[created.id])
    edit = _add_form(trigger_kind="interval", every="10m")
    assert admin_client.post(change, edit).status_code == 302
    delete = reverse("admin:goatbeat_schedule_delete", args=[created.id])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302

    events = _events(caplog)
    names = [name for name, _ in events]
    assert names == [
        "schedule.disabled",
        "schedule.enabled",
        "schedule.run_requested",
        "schedule.created",
        "schedule.changed",
        "schedule.deleted",
    ]
    assert events[0][1] == events[1][1] == {"schedule": "ping"}
    assert events[3][1]["schedule"] == "nightly-cleanup" and events[3][1]["source"] == "admin"
    assert "trigger" in events[4][1]["fields"] and events[4][1]["origin"] == "admin"
    assert events[5][1] == {"schedule": "nightly-cleanup", "source": "admin", "origin": "admin"}

    # The command line logs the same events for the same writes.
    caplog.clear()
    for command in ("disable", "enable"):
        call_command("goatbeat", "schedule", command, "ping", stdout=StringIO(), stderr=StringIO())
    assert _events(caplog) == events[:2]
