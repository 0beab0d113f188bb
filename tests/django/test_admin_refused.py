"""The admin shows a refused schedule (#30 item 7): one whose task the scheduler does not know
(a row from a release not rolled out here) is marked refused in the list, with since when and,
on hover, why; the *refused* filter finds it; its page says why, since when and what brings it
back. Once a scheduler that knows the task leads again, the marker is gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.django.models import Schedule as ScheduleRow
from tests.django.test_admin import CHANGELIST

UNKNOWN = "tests.django.project.mail.tasks.not_released_here"
MARKER = '<strong class="goatbeat-refused"'


def test_a_refused_schedule_is_marked_in_the_list_the_filter_and_its_page(store: Any) -> None:
    call_command("goatbeat", "schedule", "list", stdout=StringIO(), stderr=StringIO())
    store.create(
        Schedule(
            name="new-report",
            task=UNKNOWN,
            trigger=IntervalTrigger("1h"),
            source=Source.ADMIN,
            last_run_at=datetime.now(UTC) - timedelta(hours=1),
        )
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    before = client.get(reverse(CHANGELIST)).content.decode()
    assert MARKER not in before

    # This project's scheduler does not know the task: it refuses the schedule.
    call_command("goatbeat", "scheduler", "--once", stdout=StringIO(), stderr=StringIO())
    (refusal,) = store.refusals().schedules
    assert refusal.name == "new-report" and refusal.since is not None
    assert refusal.reason is not None and "is not a known task" in refusal.reason

    listing = client.get(reverse(CHANGELIST)).content.decode()
    assert listing.count(MARKER) == 1
    assert f'{MARKER} title="refused: &#x27;{UNKNOWN}&#x27; is not a known task' in listing
    assert "refused</strong> since " in listing
    filtered = client.get(reverse(CHANGELIST), {"refused": "yes"}).content.decode()
    assert "new-report" in filtered and "daily-report" not in filtered
    assert "refused (does not run)" in filtered  # the filter's choice

    row = ScheduleRow.objects.get(name="new-report")
    page = client.get(reverse("admin:goatbeat_schedule_change", args=[row.pk])).content.decode()
    assert '<strong class="goatbeat-refused">Refused</strong> since ' in page
    assert "is not a known task" in page and "It does not run." in page
    assert "runs it again by itself once it leads" in page
    other = ScheduleRow.objects.get(name="daily-report")
    assert (
        "not refused"
        in client.get(reverse("admin:goatbeat_schedule_change", args=[other.pk])).content.decode()
    )

    # A scheduler that knows the task schedules it again: the marker goes.
    store.set_enabled("new-report", True)  # what a readmitting scheduler does
    assert MARKER not in client.get(reverse(CHANGELIST)).content.decode()
