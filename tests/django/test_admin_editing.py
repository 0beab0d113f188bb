"""The admin keeps what was not edited, shows and edits every trigger kind, records every write
in the History, and lets an orphaned code schedule be deleted (Django test client, real
PostgreSQL). Forms are resubmitted as a browser would: every field as the page rendered it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from goatbeat.core.model import ExecutionKind, Schedule, Source
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)
from goatbeat.django.models import Schedule as ScheduleRow

TASK = "tests.django.project.mail.tasks.send_email"
CHANGELIST = "admin:goatbeat_schedule_changelist"
ADD = "admin:goatbeat_schedule_add"


class _Form(HTMLParser):
    """The fields of the admin's change form, as a browser would submit them."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self._in_form = False
        self._select: str | None = None
        self._first_option: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id", "").endswith("_form"):
            self._in_form = True
        if not self._in_form:
            return
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio"):
                if "checked" in a:
                    self.data[name] = a.get("value") or "on"
            else:
                self.data[name] = a.get("value", "")
        elif tag == "select" and name:
            self._select, self._first_option = name, None
        elif tag == "option" and self._select is not None:
            if self._first_option is None:
                self._first_option = a.get("value", "")
                self.data.setdefault(self._select, self._first_option)
            if "selected" in a:
                self.data[self._select] = a.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._in_form = False

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            # Browsers drop the newline right after <textarea>.
            self.data[self._textarea] += data.removeprefix("\n")


def page_form(client: Client, url: str) -> dict[str, str]:
    response = client.get(url)
    assert response.status_code == 200, response.content.decode()[:2000]
    parser = _Form()
    parser.feed(response.content.decode())
    return parser.data


def resubmit(client: Client, url: str, **changes: str) -> Any:
    data = page_form(client, url)
    data.update(changes)
    data["_save"] = "Save"
    return client.post(url, data)


def _publish() -> None:
    call_command("goatbeat", "publish", stdout=StringIO(), stderr=StringIO())


@pytest.fixture
def root(store: Any) -> Client:
    _publish()
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def imported(store: Any, name: str, trigger: Trigger, **kw: Any) -> Schedule:
    return store.create(  # type: ignore[no-any-return]
        Schedule(
            name=name,
            task=TASK,
            trigger=trigger,
            source=Source.DJANGO_CELERY_BEAT,
            description="imported",
            misfire_grace=timedelta(seconds=90.5),
            **kw,
        )
    )


def change_url(schedule: Any) -> str:
    return reverse("admin:goatbeat_schedule_change", args=[schedule.id])


# -- editing keeps what was not edited ------------------------------------------------------------


def test_saving_only_the_description_keeps_an_imported_interval_on_its_phase(
    root: Client, store: Any
) -> None:
    """The defect: changing only the description re-anchored an imported interval, which then
    ran 3 min 43 s off its phase."""
    anchor = datetime(2026, 1, 1, 0, 3, 43, 250_000, tzinfo=UTC)
    before = imported(store, "poll", IntervalTrigger("5m", anchor=anchor))
    row = ScheduleRow.objects.get(name="poll")
    spec_before = row.trigger

    response = resubmit(root, change_url(before), description="polls the feed")

    assert response.status_code == 302, response.content.decode()[:3000]
    after = store.get("poll")
    assert after.description == "polls the feed"
    assert ScheduleRow.objects.get(name="poll").trigger == spec_before
    assert after.trigger == before.trigger and after.trigger.anchor == anchor
    assert after.next_run_at == before.next_run_at  # still on its phase
    assert after.misfire_grace == timedelta(seconds=90.5)


@pytest.mark.parametrize(
    "trigger",
    [
        SolarTrigger(event="sunrise", latitude=48.8566, longitude=2.3522),
        CeleryCrontabTrigger("0 9 1-7 * mon", timezone="Europe/Paris"),
        OnceTrigger(datetime(2031, 5, 4, 7, 30, 15, 500, tzinfo=UTC)),
        CronTrigger("*/10 8-18 * * mon-fri", timezone="America/New_York"),
    ],
    ids=["solar", "celery_crontab", "once", "cron"],
)
def test_every_imported_trigger_shows_in_words_and_saves_unchanged(
    root: Client, store: Any, trigger: Trigger
) -> None:
    """The defect: an imported solar schedule showed an empty cron field and could not be
    saved at all."""
    before = imported(store, "imported", trigger)
    spec_before = ScheduleRow.objects.get(name="imported").trigger
    page = root.get(change_url(before)).content.decode()
    words = {
        "solar": "sunrise at 48.8566°N 2.3522°E (latitude 48.8566, longitude 2.3522)",
        "celery_crontab": "At 09:00, between day 1 and 7 of the month, on Monday, when both "
        "days match (celery crontab 0 9 1-7 * mon, Europe/Paris)",
        "once": "Once, at 2031-05-04 07:30:15 UTC",
        "cron": "Every 10 minutes, between 08:00 and 18:59, Monday through Friday "
        "(cron */10 8-18 * * mon-fri, America/New_York)",
    }[trigger.kind]
    assert words in page
    form = page_form(root, change_url(before))
    assert form["trigger_kind"] == trigger.kind

    response = resubmit(root, change_url(before), description="edited")

    assert response.status_code == 302, response.content.decode()[:3000]
    assert ScheduleRow.objects.get(name="imported").trigger == spec_before
    after = store.get("imported")
    assert after.trigger == trigger and after.next_run_at == before.next_run_at


def test_the_form_shows_each_kind_s_fields_from_the_stored_trigger(
    root: Client, store: Any
) -> None:
    anchor = datetime(2026, 1, 1, 0, 3, 43, tzinfo=UTC)
    interval = imported(store, "interval", IntervalTrigger("90m", anchor=anchor))
    solar = imported(
        store, "solar", SolarTrigger(event="dusk_civil", latitude=-33.9, longitude=18.4)
    )
    form = page_form(root, change_url(interval))
    assert (form["every"], form["anchor"]) == ("1h30m", anchor.isoformat())
    form = page_form(root, change_url(solar))
    assert (form["solar_event"], form["latitude"], form["longitude"]) == (
        "dusk_civil",
        "-33.9",
        "18.4",
    )


def test_editing_an_interval_s_period_keeps_its_anchor(root: Client, store: Any) -> None:
    anchor = datetime(2026, 1, 1, 0, 3, 43, 250_000, tzinfo=UTC)
    before = imported(store, "poll", IntervalTrigger("5m", anchor=anchor))

    response = resubmit(root, change_url(before), every="10m")

    assert response.status_code == 302
    assert store.get("poll").trigger == IntervalTrigger("10m", anchor=anchor)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"trigger_kind": "cron", "cron": "30 8 * * *", "timezone": "Europe/Paris"},
            CronTrigger("30 8 * * *", timezone="Europe/Paris"),
        ),
        (
            {"trigger_kind": "interval", "every": "15m", "anchor": "2026-01-01T00:07:00Z"},
            IntervalTrigger("15m", anchor=datetime(2026, 1, 1, 0, 7, tzinfo=UTC)),
        ),
        (
            {"trigger_kind": "once", "at": "2031-01-01 09:00", "timezone": "Europe/Paris"},
            OnceTrigger(datetime(2031, 1, 1, 8, 0, tzinfo=UTC)),
        ),
        (
            {
                "trigger_kind": "solar",
                "solar_event": "sunset",
                "latitude": "48.85",
                "longitude": "2.35",
            },
            SolarTrigger(event="sunset", latitude=48.85, longitude=2.35),
        ),
    ],
    ids=["cron", "interval", "once", "solar"],
)
def test_the_add_form_creates_every_trigger_kind(
    root: Client, store: Any, fields: dict[str, str], expected: Trigger
) -> None:
    form = page_form(root, reverse(ADD))
    form.update(name="added", task=TASK, args="[]", kwargs="{}", headers="{}", **fields)
    form["_save"] = "Save"

    response = root.post(reverse(ADD), form)

    assert response.status_code == 302, response.content.decode()[:3000]
    created = store.get("added")
    assert created.source is Source.ADMIN and created.trigger == expected


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"trigger_kind": "solar", "solar_event": "", "latitude": "1", "longitude": "2"},
            "solar_event",
            "required",
        ),
        (
            {"trigger_kind": "solar", "solar_event": "sunset", "latitude": "95", "longitude": "2"},
            "latitude",
            "95",
        ),
        ({"trigger_kind": "once", "at": "tomorrow"}, "at", "'tomorrow' is not an ISO-8601 instant"),
        ({"trigger_kind": "once", "at": "2001-01-01T00:00:00Z"}, "at", "is already past"),
        ({"trigger_kind": "interval", "every": "5m", "anchor": "soon"}, "anchor", "'soon'"),
    ],
    ids=["solar-event", "latitude", "at", "past-at", "anchor"],
)
def test_a_bad_trigger_value_is_shown_on_its_field(
    root: Client, fields: dict[str, str], field: str, message: str
) -> None:
    form = page_form(root, reverse(ADD))
    form.update(name="bad", task=TASK, args="[]", kwargs="{}", headers="{}", **fields)

    response = root.post(reverse(ADD), form)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in errors[field][0], errors
    assert not ScheduleRow.objects.filter(name="bad").exists()


# -- history --------------------------------------------------------------------------------------


def _history(row_id: int) -> list[str]:
    return [
        e.get_change_message()
        for e in LogEntry.objects.filter(object_id=str(row_id)).order_by("action_time", "id")
    ]


def test_changing_the_trigger_is_recorded_in_the_history_with_old_and_new(
    root: Client, store: Any
) -> None:
    before = imported(store, "poll", IntervalTrigger("5m"))

    resubmit(root, change_url(before), trigger_kind="cron", cron="30 8 * * *", timezone="UTC")

    [entry] = _history(before.id)
    assert entry == "Changed trigger: every 5m -> cron 30 8 * * * (UTC)."
    history = root.get(reverse("admin:goatbeat_schedule_history", args=[before.id]))
    assert "trigger: every 5m -&gt; cron 30 8 * * * (UTC)" in history.content.decode()
    resubmit(root, change_url(before), description="mornings")
    assert _history(before.id)[-1] == 'Changed description: "imported" -> "mornings".'


def test_enable_disable_and_run_now_leave_history_entries(root: Client, store: Any) -> None:
    ping = store.get("ping")
    selected = {"_selected_action": [str(ping.id)]}
    changelist = reverse(CHANGELIST)

    root.post(changelist, {"action": "disable_schedules", **selected})
    root.post(changelist, {"action": "enable_schedules", **selected})
    root.post(changelist, {"action": "run_now", **selected})
    root.post(reverse("admin:goatbeat_schedule_run", args=[ping.id]))
    resubmit(root, change_url(ping), enabled="")  # the code schedule's one editable field

    entries = _history(ping.id)
    assert entries[:2] == ["Disabled (admin action).", "Enabled (admin action)."]
    assert entries[2].startswith("Run requested now (ping:manual:")
    assert entries[3].startswith("Run requested now (ping:manual:")
    assert entries[4] == "Changed enabled: true -> false."
    assert [e.kind for e in store.executions(name="ping")] == [ExecutionKind.MANUAL] * 2
    assert all(e.user.username == "root" for e in LogEntry.objects.all())


# -- orphaned code schedules ----------------------------------------------------------------------


def _retire(store: Any) -> Any:
    """A code schedule published by a checkout that declared it, no longer declared here."""
    store.publish([Schedule(name="retired", task=TASK, trigger=IntervalTrigger("1h"))])
    return store.get("retired")


@pytest.fixture
def deleter(store: Any) -> Client:
    """A staff user who may view and delete schedules (and nothing else)."""
    _publish()
    user = User.objects.create_user("ops", "ops@example.com", "pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="goatbeat", codename__in=["view_schedule", "delete_schedule"]
        )
    )
    client = Client()
    client.force_login(user)
    return client


def test_an_orphaned_code_schedule_is_marked_and_can_be_deleted(
    deleter: Client, store: Any
) -> None:
    """The defect: deleting a code schedule removed from the code told a superuser they lacked
    the permission."""
    retired = _retire(store)
    listing = deleter.get(reverse(CHANGELIST)).content.decode()
    assert listing.count('<strong class="goatbeat-orphaned">orphaned</strong>') == 1
    orphans = deleter.get(reverse(CHANGELIST), {"in_code": "orphaned"}).content.decode()
    assert "retired" in orphans and "daily-report" not in orphans
    page = deleter.get(change_url(retired)).content.decode()
    assert "no longer declared in this project&#x27;s code" in page
    url = reverse("admin:goatbeat_schedule_delete", args=[retired.id])
    assert deleter.get(url).status_code == 200

    response = deleter.post(url, {"post": "yes"})

    assert response.status_code == 302
    assert not ScheduleRow.objects.filter(name="retired").exists()


def test_a_code_schedule_still_declared_cannot_be_deleted_and_the_page_says_why(
    root: Client, store: Any
) -> None:
    daily = store.get("daily-report")
    page = root.get(change_url(daily)).content.decode()
    assert "It cannot be deleted here, since the next publication would recreate it" in page
    assert reverse("admin:goatbeat_schedule_delete", args=[daily.id]) not in page
    assert root.post(
        reverse("admin:goatbeat_schedule_delete", args=[daily.id]), {"post": "yes"}
    ).status_code in (302, 403)
    retired = _retire(store)
    response = root.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [daily.id, retired.id], "post": "yes"},
        follow=True,
    )
    assert "Not deleted: daily-report is declared in code" in response.content.decode()
    assert set(ScheduleRow.objects.values_list("name", flat=True)) >= {"daily-report", "retired"}
    # The orphan alone goes through Django's own confirmation and deletion.
    response = root.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [retired.id], "post": "yes"},
    )
    assert response.status_code == 302
    assert not ScheduleRow.objects.filter(name="retired").exists()
    assert ScheduleRow.objects.filter(name="daily-report").exists()


def test_the_admin_passes_django_s_system_checks() -> None:
    from django.core import checks

    assert checks.run_checks(tags=["admin"]) == []


def test_reimporting_never_overwrites_an_admin_edit_without_saying_so(
    root: Client, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.management.base import CommandError
    from django.test import override_settings

    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.django.project.settings")
    beat_schedule = {
        "nightly": {"task": TASK, "schedule": timedelta(minutes=10), "args": (1,)},
    }
    source = ["--from-app", "tests.django.project.celery_app:app", "--no-check-tasks"]
    with override_settings(CELERY_BEAT_SCHEDULE=beat_schedule):
        call_command(
            "goatbeat", "import_celery_beat", *source, stdout=StringIO(), stderr=StringIO()
        )
        nightly = store.get("nightly")
        response = resubmit(root, change_url(nightly), trigger_kind="interval", every="15m")
        assert response.status_code == 302, response.content.decode()[:2000]

        out = StringIO()
        with pytest.raises(CommandError):  # exit status 1: there is a conflict to look at
            call_command("goatbeat", "import_celery_beat", *source, stdout=out, stderr=out)
        assert "conflict  nightly: edited in goatbeat since it was imported" in out.getvalue()
        assert store.get("nightly").trigger == IntervalTrigger("15m")  # the edit stands

        out = StringIO()
        call_command(
            "goatbeat", "import_celery_beat", *source, "--overwrite", stdout=out, stderr=out
        )
    assert "update  nightly" in out.getvalue()
    assert store.get("nightly").trigger.every == timedelta(minutes=10)  # type: ignore[attr-defined]


def test_an_imported_one_off_flag_is_shown_and_kept_and_the_form_has_no_second_one_off(
    root: Client, store: Any
) -> None:
    """One notion of one-off in the form (the trigger kind): django-celery-beat's one_off flag
    is no longer a box of its own; an imported row that has it says so and keeps it."""
    before = imported(store, "once-only", IntervalTrigger("1h"), one_off=True)
    page = root.get(change_url(before)).content.decode()
    assert 'name="one_off"' not in page
    assert "imported with django-celery-beat&#x27;s one_off" in page
    response = resubmit(root, change_url(before), description="runs once")
    assert response.status_code == 302, response.content.decode()[:3000]
    after = store.get("once-only")
    assert after.one_off is True and after.description == "runs once"
    added = root.get(reverse("admin:goatbeat_schedule_add")).content.decode()
    assert 'name="one_off"' not in added
