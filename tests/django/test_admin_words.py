"""The admin in words: cron expressions described by cron-descriptor with goatbeat's meaning,
goatbeat's own description as the fallback, every time with its zone."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import (
    CeleryCrontabTrigger,
    CronTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
)
from goatbeat.django.words import cron_in_words, in_words, instant, shows_seconds


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 9 * * 1-5", "At 09:00, Monday through Friday"),
        ("0 9 * * MON-fri", "At 09:00, Monday through Friday"),
        ("0 9 * * 7", "At 09:00, only on Sunday"),
        (
            "*/15 9-17 * * mon-fri",
            "Every 15 minutes, between 09:00 and 17:59, Monday through Friday",
        ),
        ("@daily", "At 00:00"),
        ("*/10 * * * * *", "Every 10 seconds"),
        ("30 */10 * * * *", "At 30 seconds past the minute, every 10 minutes"),
        ("0 9 L * *", "At 09:00, on the last day of the month"),
        ("0 9 15W * *", "At 09:00, on the weekday nearest day 15 of the month"),
        ("0 9 * * 5L", "At 09:00, on the last Friday of the month"),
        ("0 9 * * 5#2", "At 09:00, on the second Friday of the month"),
        # Both day fields restricted: cron fires on either...
        ("0 9 1 * 1-5", "At 09:00, on day 1 of the month, or Monday through Friday"),
        ("0 9 1,15 * mon,fri", "At 09:00, on day 1 and 15 of the month, or on Monday and Friday"),
        # ... unless one starts with "*", as Vixie cron (and goatbeat) read it.
        ("0 9 */2 * 1-5", "At 09:00, every 2 days, Monday through Friday, when both days match"),
    ],
)
def test_a_cron_expression_in_words(expression: str, words: str) -> None:
    assert CronTrigger(expression)  # a valid goatbeat expression
    assert cron_in_words(expression) == words


def test_celery_crontab_days_are_described_as_both_matching() -> None:
    trigger = CeleryCrontabTrigger("0 9 1-7 * mon", timezone="Europe/Paris")
    assert in_words(trigger) == (
        "At 09:00, between day 1 and 7 of the month, on Monday, when both days match "
        "(celery crontab 0 9 1-7 * mon, Europe/Paris)"
    )


def test_without_cron_descriptor_goatbeat_describes_it_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cron_descriptor", None)  # as if not installed
    trigger = CronTrigger("0 9 * * 1-5", timezone="Europe/Paris")
    assert cron_in_words("0 9 * * 1-5") is None
    assert in_words(trigger) == "cron 0 9 * * 1-5 (Europe/Paris)"


def test_an_expression_cron_descriptor_refuses_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cron_descriptor

    class Refusing:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise cron_descriptor.FormatError("cannot describe this")

    monkeypatch.setattr(cron_descriptor, "ExpressionDescriptor", Refusing)
    assert in_words(CronTrigger("0 9 * * 5#2")) == "cron 0 9 * * 5#2 (UTC)"


def test_other_triggers_in_words() -> None:
    at = datetime(2031, 5, 4, 7, 30, 15, tzinfo=UTC)
    assert in_words(OnceTrigger(at), "Europe/Paris") == (
        "Once, at 2031-05-04 09:30:15 Europe/Paris (07:30:15 UTC)"
    )
    assert in_words(IntervalTrigger("5m")) == "Every 5m"
    assert in_words(SolarTrigger(event="sunset", latitude=48.85, longitude=2.35)) == (
        "sunset at 48.85°N 2.35°E"
    )


def test_instants_carry_their_zone_and_utc() -> None:
    morning = datetime(2026, 12, 1, 8, 0, 5, tzinfo=UTC)
    assert instant(morning, "Europe/Paris") == "2026-12-01 09:00 Europe/Paris (08:00 UTC)"
    assert instant(morning, "UTC", seconds=True) == "2026-12-01 08:00:05 UTC"
    late = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    assert instant(late, "Asia/Tokyo") == "2026-12-02 08:30 Asia/Tokyo (2026-12-01 23:30 UTC)"
    assert instant(None, "UTC") == "-"


@pytest.mark.parametrize(
    ("trigger", "seconds"),
    [
        (IntervalTrigger("30s"), True),
        (IntervalTrigger("5m"), False),
        (IntervalTrigger("5m", anchor=datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)), True),
        (CronTrigger("*/10 * * * * *"), True),
        (CronTrigger("0 */5 * * * *"), False),
        (CronTrigger("0 9 * * *"), False),
        (SolarTrigger(event="sunrise", latitude=1, longitude=1), True),
    ],
)
def test_seconds_show_where_a_schedule_fires_off_whole_minutes(trigger: Any, seconds: bool) -> None:
    assert shows_seconds(trigger) is seconds


@pytest.fixture
def root(store: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_list_describes_each_cron_and_labels_its_times(root: Client, store: Any) -> None:
    store.create(
        Schedule(
            name="office",
            task="tests.django.project.mail.tasks.send_email",
            trigger=CronTrigger("0 9 * * 1-5", timezone="Europe/Paris"),
            source=Source.ADMIN,
        )
    )
    fast = store.create(
        Schedule(
            name="fast",
            task="tests.django.project.mail.tasks.send_email",
            trigger=IntervalTrigger("15s"),
            source=Source.ADMIN,
        )
    )
    body = root.get("/admin/goatbeat/schedule/").content.decode()
    assert (
        'At 09:00, Monday through Friday<br><small class="goatbeat-expression">'
        "cron 0 9 * * 1-5, Europe/Paris</small>"
    ) in body
    assert "Next run (Europe/Paris)" in body and "Last run (Europe/Paris)" in body
    assert fast.next_run_at is not None
    local = fast.next_run_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert local.strftime("%Y-%m-%d %H:%M:%S") in body  # seconds: it fires every 15 s


def test_the_change_page_gives_times_in_the_schedule_zone_and_utc(root: Client, store: Any) -> None:
    office = store.create(
        Schedule(
            name="office",
            task="tests.django.project.mail.tasks.send_email",
            trigger=CronTrigger("0 9 * * 1-5", timezone="America/New_York"),
            source=Source.ADMIN,
        )
    )
    body = root.get(f"/admin/goatbeat/schedule/{office.id}/change/").content.decode()
    assert office.next_run_at is not None
    assert instant(office.next_run_at, "America/New_York") in body  # the next run
    assert "09:00 America/New_York (" in body and " UTC)</time>" in body  # the preview
    run = store.request_run("office")
    body = root.get(f"/admin/goatbeat/schedule/{office.id}/change/").content.decode()
    assert instant(run.scheduled_at, "America/New_York", seconds=True) in body  # executions
    assert "At 09:00, Monday through Friday (cron 0 9 * * 1-5, America/New_York)" in body


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (None, "-"),
        (0.016640400000142108, "17 ms"),
        (0.9996, "1 second"),
        (1, "1 second"),
        (2.35, "2.4 seconds"),
        (59.96, "1 minute"),
        (184, "3 minutes 4 seconds"),
        (3725, "1 hour 2 minutes"),
        (7200.4, "2 hours"),
        (90061, "1 day 1 hour"),
    ],
)
def test_durations_are_in_words(seconds: float | None, words: str) -> None:
    from goatbeat.django.words import duration_in_words

    assert duration_in_words(seconds) == words
