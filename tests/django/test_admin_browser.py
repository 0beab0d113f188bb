"""The admin in headless Chromium, served by a live server on the real PostgreSQL.

With GOATBEAT_UPDATE_SCREENSHOTS=1 it also regenerates the pictures under docs/: the schedule
list, a schedule's page, the executions list and a solar schedule (test_admin_reads_well.py:
the validation errors, a paused schedule, an execution). The ``page`` fixture is conftest's.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "admin-schedules.png"
PAGE_SCREENSHOT = ROOT / "docs" / "admin-schedule-page.png"
EXECUTIONS_SCREENSHOT = ROOT / "docs" / "admin-executions.png"
# docs/admin-validation-error.png: test_admin_reads_well.py (every error of a submit at once).
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def screenshot(page: Any, docs_picture: Path, tmp_path: Path) -> None:
    """The committed docs picture is refreshed on request only, so a test run leaves the work
    tree clean: GOATBEAT_UPDATE_SCREENSHOTS=1 ./dev test tests/django -m browser"""
    shot = (
        docs_picture
        if os.environ.get("GOATBEAT_UPDATE_SCREENSHOTS")
        else tmp_path / docs_picture.name
    )
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


_TOOL_STYLE = [
    "backgroundColor",
    "color",
    "fontSize",
    "fontWeight",
    "fontFamily",
    "textTransform",
    "letterSpacing",
    "borderRadius",
    "paddingTop",
    "paddingLeft",
    "height",
    "lineHeight",
    "boxSizing",
    "display",
]


def _style(page: Any, selector: str) -> dict[str, str]:
    return dict(
        page.eval_on_selector(
            selector,
            "(el, keys) => Object.fromEntries(keys.map(k => [k, getComputedStyle(el)[k]]))",
            _TOOL_STYLE,
        )
    )


def test_create_a_cron_schedule_see_a_validation_error_and_run_it_now(
    page: Any, live_server: Any, store: Any, tmp_path: Path
) -> None:
    from goatbeat.core.model import Schedule, Source
    from goatbeat.core.triggers import IntervalTrigger

    store.create(
        Schedule(
            name="queue-depth",
            task="tests.django.project.mail.tasks.send_email",
            args=(7,),
            trigger=IntervalTrigger("30s"),
            source=Source.ADMIN,
        )
    )
    admin = f"{live_server.url}/admin/goatbeat/schedule/"
    page.goto(admin + "add/")
    # The task field offers the project's tasks.
    offered = page.locator("datalist#goatbeat-known-tasks option")
    known = [offered.nth(i).get_attribute("value") for i in range(offered.count())]
    assert "tests.django.project.mail.tasks.send_email" in known
    assert page.locator("#id_task").get_attribute("list") == "goatbeat-known-tasks"
    page.fill("#id_name", "office-hours")
    page.fill("#id_task", "tests.django.project.mail.tasks.send_email")
    page.select_option("#id_trigger_kind", "cron")
    page.fill("#id_cron", "*/15 9-17 * * 8")
    page.fill("#id_args", "[42]")
    page.click("input[name=_save]")
    error = page.locator(".field-cron .errorlist")
    assert "day-of-week: 8 is out of range 0-7" in error.inner_text()

    page.fill("#id_cron", "*/15 9-17 * * mon-fri")
    page.click("input[name=_save]")
    page.wait_for_url(admin)
    assert page.locator("#result_list").get_by_text("office-hours").count() == 1
    created = store.get("office-hours")
    assert created.next_run_at == created.first_run_after(created.updated_at)
    row = page.locator("#result_list tr", has_text="office-hours")
    assert "Every 15 minutes, between 09:00 and 17:59, Monday through Friday" in row.inner_text()
    header = page.locator("#result_list thead").inner_text()
    assert "NEXT RUN (EUROPE/PARIS)" in header.upper()

    row.locator("input[name=_selected_action]").check()
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    assert "Run requested for office-hours" in page.locator(".messagelist").inner_text()

    out = StringIO()
    call_command("goatbeat", "scheduler", "--once", stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue().strip().splitlines()[-1])["leader"] is True
    page.goto(f"{admin}{created.id}/change/")
    inline = page.locator("#executions-group")
    assert "submitted" in inline.inner_text()
    assert "manual" in inline.inner_text()
    upcoming = page.locator("ol.goatbeat-upcoming li")
    assert upcoming.count() == 10
    assert " Europe/Paris (" in upcoming.first.inner_text()
    assert upcoming.first.inner_text().endswith(" UTC)")
    # "Run now" looks like Django's own object-tools buttons (History) on the same page.
    assert _style(page, "button.goatbeat-run-now") == _style(page, ".object-tools a.historylink")
    screenshot(page, PAGE_SCREENSHOT, tmp_path)

    page.goto(f"{live_server.url}/admin/goatbeat/execution/")
    assert page.locator("#result_list").get_by_text("office-hours").count() >= 1
    screenshot(page, EXECUTIONS_SCREENSHOT, tmp_path)

    page.goto(admin)
    page.click("#toggle-nav-sidebar")  # room for every column in the picture
    fast = page.locator("#result_list tr", has_text="queue-depth").inner_text()
    assert re.search(r"\d\d:\d\d:\d\d", fast), fast  # fires every 30 s: seconds shown
    screenshot(page, SCREENSHOT, tmp_path)


SOLAR_SCREENSHOT = ROOT / "docs" / "admin-solar-schedule.png"


def test_a_solar_schedule_page_and_an_add_form_for_each_trigger_kind(
    page: Any, live_server: Any, store: Any, tmp_path: Path
) -> None:
    from goatbeat.core.model import Schedule, Source
    from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger, SolarTrigger

    admin = f"{live_server.url}/admin/goatbeat/schedule/"
    task = "tests.django.project.mail.tasks.send_email"
    solar = store.create(
        Schedule(
            name="lights-on",
            task=task,
            trigger=SolarTrigger(event="sunset", latitude=48.8566, longitude=2.3522),
            source=Source.DJANGO_CELERY_BEAT,
        )
    )
    page.goto(f"{admin}{solar.id}/change/")
    current = page.locator(".field-current_trigger").inner_text()
    assert "sunset at 48.8566°N 2.3522°E (latitude 48.8566, longitude 2.3522)" in current
    assert page.locator("#id_trigger_kind").input_value() == "solar"
    assert page.locator("#id_latitude").is_visible() and not page.locator("#id_cron").is_visible()
    screenshot(page, SOLAR_SCREENSHOT, tmp_path)
    page.fill("#id_description", "porch lights")
    page.click("input[name=_save]")
    page.wait_for_url(admin)
    after = store.get("lights-on")
    assert after.description == "porch lights"
    assert after.trigger == solar.trigger and after.next_run_at == solar.next_run_at

    kinds = {
        "cron": ({"#id_cron": "30 8 * * *"}, CronTrigger("30 8 * * *", timezone="Europe/Paris")),
        "interval": (
            {"#id_every": "15m", "#id_anchor": "2026-01-01T00:07:00Z"},
            IntervalTrigger("15m", anchor=datetime(2026, 1, 1, 0, 7, tzinfo=UTC)),
        ),
        "once": (
            {"#id_at": "2031-01-01T09:00:00+01:00"},
            OnceTrigger(datetime(2031, 1, 1, 8, 0, tzinfo=UTC)),
        ),
        "solar": (
            {"#id_latitude": "-33.9", "#id_longitude": "18.4"},
            SolarTrigger(event="dawn_civil", latitude=-33.9, longitude=18.4),
        ),
    }
    for kind, (fields, expected) in kinds.items():
        page.goto(admin + "add/")
        page.fill("#id_name", f"added-{kind}")
        page.fill("#id_task", task)
        page.select_option("#id_trigger_kind", kind)
        # Only the chosen kind's fields show.
        assert page.locator("#id_cron").is_visible() == (kind == "cron")
        assert page.locator("#id_every").is_visible() == (kind == "interval")
        assert page.locator("#id_at").is_visible() == (kind == "once")
        assert page.locator("#id_solar_event").is_visible() == (kind == "solar")
        if kind == "solar":
            page.select_option("#id_solar_event", "dawn_civil")
        for selector, value in fields.items():
            page.fill(selector, value)
        page.click("input[name=_save]")
        page.wait_for_url(admin)
        assert store.get(f"added-{kind}").trigger == expected, kind
