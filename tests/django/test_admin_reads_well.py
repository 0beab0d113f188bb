"""The admin reads well (#31), in headless Chromium on the real PostgreSQL: every mistake of a
submit at once; one notion of one-off in the form; every time with its seconds and its zone;
runtimes in words; the schedule page's tools drawn like Django's own; the Pause and Backfill
pages' breadcrumbs as Django draws them; a paused schedule says so instead of a next run.

With GOATBEAT_UPDATE_SCREENSHOTS=1 it regenerates docs/admin-validation-error.png,
docs/admin-paused-schedule.png and docs/admin-execution.png."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.health import Outcome, Role, SchedulerBeat
from tests.django.test_admin_browser import ROOT, _style, screenshot
from tests.django.test_admin_health import _report

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ERRORS_SCREENSHOT = ROOT / "docs" / "admin-validation-error.png"
PAUSED_SCREENSHOT = ROOT / "docs" / "admin-paused-schedule.png"
EXECUTION_SCREENSHOT = ROOT / "docs" / "admin-execution.png"
SECONDS = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_every_mistake_of_a_submit_is_reported_at_once(
    page: Any, live_server: Any, tmp_path: Path
) -> None:
    admin = f"{live_server.url}/admin/goatbeat/schedule/"
    page.goto(admin + "add/")
    # One notion of one-off: the trigger kind, and no separate one_off box.
    assert page.locator("#id_one_off").count() == 0
    kinds = page.locator("#id_trigger_kind option")
    labels = [kinds.nth(i).inner_text() for i in range(kinds.count())]
    assert sum("one-off" in label for label in labels) == 1, labels

    page.fill("#id_name", "office-hours")
    page.fill("#id_task", "os.system")  # not a known task
    page.select_option("#id_trigger_kind", "cron")
    page.fill("#id_cron", "*/15 9-17 * * 8")  # day-of-week 8
    page.fill("#id_args", "[42")  # not JSON
    page.fill("#id_grace", "soon")  # not a duration
    page.click("input[name=_save]")

    def error(field: str) -> str:
        return str(page.locator(f".field-{field} .errorlist").inner_text())

    assert "'os.system' is not a known task" in error("task")
    assert "day-of-week: 8 is out of range 0-7" in error("cron")
    assert "Enter a valid JSON" in error("args")
    assert "'soon' is not a duration" in error("grace")
    assert page.locator(".errornote").count() == 1
    screenshot(page, ERRORS_SCREENSHOT, tmp_path)

    # Fixing them all saves it.
    page.fill("#id_task", "tests.django.project.mail.tasks.send_email")
    page.fill("#id_cron", "*/15 9-17 * * mon-fri")
    page.fill("#id_args", "[42]")
    page.fill("#id_grace", "5m")
    page.click("input[name=_save]")
    page.wait_for_url(admin)


def test_times_have_seconds_and_zones_and_runtimes_are_in_words(
    page: Any, live_server: Any, store: Any, tmp_path: Path
) -> None:
    execution = _report(store, "daily-report", Outcome.SUCCEEDED, runtime=0.016640400000142108)
    store.heartbeat(
        SchedulerBeat(
            scheduler_id="web-1:7:abc",
            role=Role.LEADER,
            lease="scheduler",
            fencing_token=1,
            hostname="web-1",
            pid=7,
            version="0.7.0",
            ttl=timedelta(seconds=40),
        )
    )
    base = f"{live_server.url}/admin/goatbeat/"

    page.goto(base + "execution/")
    row = page.locator("#result_list tbody tr").first.inner_text()
    assert "17 ms" in row and "0.0166" not in row, row
    assert len(SECONDS.findall(row)) == 2, row  # scheduled and finished, with seconds
    header = page.locator("#result_list thead").inner_text().upper()
    assert "SCHEDULED AT (EUROPE/PARIS)" in header and "FINISHED AT (EUROPE/PARIS)" in header

    page.goto(f"{base}execution/{execution.id}/change/")
    for field in ("scheduled_at_zoned", "claimed_at_zoned", "submitted_at_zoned",
                  "started_at_zoned", "finished_at_zoned"):  # fmt: skip
        shown = page.locator(f".field-{field} .readonly").inner_text()
        assert SECONDS.match(shown) and " Europe/Paris (" in shown, (field, shown)
        assert shown.endswith(" UTC)"), (field, shown)
    assert page.locator(".field-runtime_display .readonly").inner_text() == "17 ms"
    screenshot(page, EXECUTION_SCREENSHOT, tmp_path)

    for path, columns in (("lease/", 2), ("schedulerprocess/", 1)):
        page.goto(base + path)
        row = page.locator("#result_list tbody tr").first.inner_text()
        assert len(SECONDS.findall(row)) == columns, (path, row)
        assert "(EUROPE/PARIS)" in page.locator("#result_list thead").inner_text().upper()
        page.locator("#result_list tbody tr th a").first.click()
        page.wait_for_url(re.compile(r".*/change/$"))
        times = page.locator(".readonly").all_inner_texts()
        assert sum(bool(SECONDS.match(t)) for t in times) >= columns, (path, times)


def test_a_paused_schedule_says_so_its_tools_look_like_djangos_and_breadcrumbs_are_right(
    page: Any, live_server: Any, store: Any, tmp_path: Path
) -> None:
    report = store.get("daily-report")
    admin = f"{live_server.url}/admin/goatbeat/schedule/"
    page.goto(f"{admin}{report.id}/change/")
    django_tool = _style(page, ".object-tools a.historylink")
    for tool in ("button.goatbeat-run-now", "button.goatbeat-pause_schedules",
                 "button.goatbeat-backfill_schedule"):  # fmt: skip
        assert _style(page, tool) == django_tool, tool

    page.click("button.goatbeat-backfill_schedule")
    crumbs = page.locator(".breadcrumbs")
    assert crumbs.inner_text().strip() == "Home › Goatbeat › Schedules › daily-report › Backfill"
    page.go_back()

    page.click("button.goatbeat-pause_schedules")
    crumbs = page.locator(".breadcrumbs")
    assert crumbs.inner_text().strip() == (
        "Home › Goatbeat › Schedules › daily-report › Pause schedules"
    )
    hrefs = [crumbs.locator("a").nth(i).get_attribute("href") for i in range(4)]
    assert hrefs == [
        "/admin/",
        "/admin/goatbeat/",
        "/admin/goatbeat/schedule/",
        f"/admin/goatbeat/schedule/{report.id}/change/",
    ]
    page.fill("#id_note", "incident 42")
    page.click("input[name=apply]")
    page.wait_for_url(admin)

    row = page.locator("#result_list tr", has_text="daily-report")
    cell = row.locator("td.field-next_run").inner_text()
    assert cell == "paused", cell  # not the stored next_run_at: nothing runs while paused
    assert store.get("daily-report").next_run_at is not None

    page.goto(f"{admin}{report.id}/change/")
    next_run = page.locator(".field-next_run_zoned .readonly").inner_text()
    assert next_run.startswith("none while paused (paused since "), next_run
    assert "incident 42" in page.locator(".field-pause_state .readonly").inner_text()
    assert page.locator("button.goatbeat-pause_schedules").count() == 0
    for tool in ("button.goatbeat-resume", "button.goatbeat-resume-catch-up"):
        assert _style(page, tool) == django_tool, tool
    screenshot(page, PAUSED_SCREENSHOT, tmp_path)

    page.click("button.goatbeat-resume")
    assert "Resumed daily-report" in page.locator(".messagelist").inner_text()
    assert not store.get("daily-report").paused
