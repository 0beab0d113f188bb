"""goatbeat's logs under a Django project's LOGGING: each event once, with its fields.

``manage.py goatbeat`` runs as a real subprocess with a settings module per setup: the seed's
LOGGING recipe verbatim, a single root handler, and no LOGGING at all. With the project's
handlers in place the command adds none of its own, so no line is printed twice and a JSON
handler's output stays one object per line."""

from __future__ import annotations

import json
import logging
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from goatbeat.core.model import Schedule
from goatbeat.core.observability import JsonFormatter, log_event
from goatbeat.core.triggers import IntervalTrigger
from tests.django.conftest import manage


def _scheduler_once(settings_module: str, *args: str) -> Any:
    done = manage(
        "goatbeat",
        f"--settings=tests.django.project.{settings_module}",
        "--skip-checks",
        *args,
        "scheduler",
        "--once",
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("settings_module", ["settings_seed_logging", "settings_root_logging"])
def test_under_a_project_logging_each_event_is_one_json_object_once(
    store: Any, settings_module: str
) -> None:
    done = _scheduler_once(settings_module)
    lines = done.stderr.splitlines()
    assert lines, "the scheduler logged nothing"
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(record, dict) for record in records)
    assert len(set(lines)) == len(lines), "a line was printed twice"
    events = [r["event"] for r in records if r.get("logger") == "goatbeat"]
    for event in ("schedule.published", "lease.acquired", "lease.released"):
        assert events.count(event) == 1, (event, events)
    acquired = next(r for r in records if r["event"] == "lease.acquired")
    assert acquired["scheduler_id"] == "test-scheduler"
    assert isinstance(acquired["fencing_token"], int)


def test_the_project_logging_level_holds_unless_verbosity_asks(store: Any) -> None:
    # The test project's own LOGGING: a JSON handler on the goatbeat logger at WARNING,
    # propagating to a root without handlers.
    quiet = manage("goatbeat", "--skip-checks", "scheduler", "--once")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.strip() == ""
    debug = manage("goatbeat", "--skip-checks", "-v", "3", "scheduler", "--once")
    assert debug.returncode == 0, debug.stderr
    records = [json.loads(line) for line in debug.stderr.splitlines()]
    events = [r["event"] for r in records]
    assert events.count("lease.acquired") == 1 and "lease.renewed" not in events
    assert len(set(debug.stderr.splitlines())) == len(debug.stderr.splitlines())


def test_without_a_project_logging_goatbeat_prints_its_own_lines_once(store: Any) -> None:
    done = _scheduler_once("settings_no_logging")
    lines = done.stderr.splitlines()
    acquired = [line for line in lines if " lease.acquired " in line]
    assert len(acquired) == 1 and "scheduler_id=test-scheduler" in acquired[0]
    assert len(set(lines)) == len(lines)
    as_json = _scheduler_once("settings_no_logging", "--log-format", "json")
    records = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert [r["event"] for r in records].count("lease.acquired") == 1


def test_the_project_handlers_get_the_fields_as_record_attributes(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store.publish(
        [
            Schedule(
                name="retired",
                task="tests.django.project.mail.tasks.send_email",
                trigger=IntervalTrigger("1h"),
            )
        ]
    )
    with caplog.at_level(logging.INFO, logger="goatbeat"):
        call_command("goatbeat", "publish", stdout=StringIO(), stderr=StringIO())
    (orphaned,) = [r for r in caplog.records if r.getMessage() == "schedule.orphaned"]
    # As `extra`: a project's formatter reads %(schedule)s like any other record attribute.
    assert orphaned.schedule == "retired"  # type: ignore[attr-defined]
    line = logging.Formatter("%(message)s %(schedule)s").format(orphaned)
    assert line == "schedule.orphaned retired"
    (published,) = [r for r in caplog.records if r.getMessage() == "schedule.published"]
    # A field named like a LogRecord attribute keeps the attribute and travels prefixed.
    assert published.goatbeat_created == ["daily-report", "weekly-report", "broken-report", "ping"]  # type: ignore[attr-defined]
    assert isinstance(published.created, float)


def test_the_json_formatter_takes_goatbeat_events_and_plain_records_with_extra() -> None:
    formatter = JsonFormatter()
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    target = logging.getLogger("goatbeat")
    handler = Keep()
    previous = target.level
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        log_event("lease.acquired", scheduler_id="web-1", fencing_token=7)
        logging.getLogger("goatbeat.project").info(
            "report.sent", extra={"recipients": 3, "note": "two\nlines"}
        )
        try:
            raise RuntimeError("boom\nsecond line")
        except RuntimeError:
            logging.getLogger("goatbeat.project").exception("report.failed")
    finally:
        target.removeHandler(handler)
        target.setLevel(previous)
    lines = [formatter.format(record) for record in captured]
    assert all("\n" not in line for line in lines)  # one object per line, always
    event, plain, failed = (json.loads(line) for line in lines)
    assert event["event"] == "lease.acquired" and event["fencing_token"] == 7
    assert plain["event"] == "report.sent" and plain["recipients"] == 3
    assert plain["note"] == "two\nlines"
    assert "boom" in failed["exception"]


def test_the_standalone_command_on_a_django_project_defers_to_its_logging(store: Any) -> None:
    import os
    import subprocess
    import sys

    from django.db import connection

    from tests.django.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "goatbeat", "scheduler", "--once"],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.django.project.settings_root_logging",
            "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        },
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    logged = [line for line in done.stderr.splitlines() if line.startswith("{")]
    assert [json.loads(line)["event"] for line in logged].count("lease.acquired") == 1
    assert logged == done.stderr.splitlines()  # nothing but JSON: no second, plain copy
