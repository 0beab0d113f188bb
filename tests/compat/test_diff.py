"""``goatbeat diff``: exit 0 equal, 1 different (with the instants and reasons), 2 error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from goatbeat.cli import cli  # noqa: E402

START = "2026-03-20T00:00:00Z"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


def diff(db: str, app: str, *extra: str) -> tuple[int, str]:
    """``goatbeat diff`` of the Celery app ``app`` against ``db``, from START."""
    return run("diff", "--from-app", app, "--database", db, "--start", START, *extra)


def imported(db: str, app: str) -> None:
    code, out = run("import_celery_beat", "--from-app", app, "--database", db, "--no-check-tasks")
    assert code == 0, out


def test_equal_schedules_exit_0(db: str) -> None:
    imported(db, "tests.compat.diff_apps:clean")
    code, out = diff(db, "tests.compat.diff_apps:clean")
    assert code == 0, out
    assert "EQUAL" in out


def test_changed_schedule_exits_1_naming_the_instants(db: str) -> None:
    imported(db, "tests.compat.diff_apps:clean")
    code, out = diff(db, "tests.compat.diff_apps:changed", "--json")
    assert code == 1, out
    report = json.loads(out)
    morning = next(s for s in report["schedules"] if s["name"] == "morning")
    assert morning["status"] == "different"
    instants = {(f["at"], f["old"], f["new"]) for f in morning["fire_times"]}
    # celery (old) now fires at 10:00 Paris, goatbeat (new) still at 09:00
    assert ("2026-03-20T09:00:00Z", True, False) in instants
    assert ("2026-03-20T08:00:00Z", False, True) in instants
    others = {s["name"]: s["status"] for s in report["schedules"]}
    assert others["weekdays"] == "equal" and others["every-10m"] == "equal"


def test_changed_task_is_a_field_difference(db: str) -> None:
    imported(db, "tests.compat.diff_apps:clean")
    code, out = diff(db, "tests.compat.diff_apps:renamed_task")
    assert code == 1
    assert "task: celery 'pong' -> goatbeat 'ping'" in out


def test_schedule_on_one_side_only(db: str) -> None:
    imported(db, "tests.compat.diff_apps:dst")
    code, out = diff(db, "tests.compat.diff_apps:clean", "--json")
    assert code == 1
    status = {s["name"]: s["status"] for s in json.loads(out)["schedules"]}
    assert status["half-past-two"] == "only_new" and status["morning"] == "only_old"


def test_a_damaged_goatbeat_row_is_reported_as_damaged_not_a_crash(db: str) -> None:
    import sqlite3

    imported(db, "tests.compat.diff_apps:clean")
    with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE goatbeat_schedule SET kwargs = '[1]' WHERE name = 'morning'")
    conn.close()
    code, out = diff(db, "tests.compat.diff_apps:clean", "--json")
    assert code == 1, out
    morning = next(s for s in json.loads(out)["schedules"] if s["name"] == "morning")
    assert morning["status"] == "damaged"
    assert "kwargs column holds [1]" in morning["notes"][0]


def test_spring_forward_difference_carries_the_dst_reason(db: str) -> None:
    imported(db, "tests.compat.diff_apps:dst")
    code, out = diff(db, "tests.compat.diff_apps:dst", "--json")
    assert code == 1, out
    (entry,) = [s for s in json.loads(out)["schedules"] if s["name"] == "half-past-two"]
    on_the_day = [f for f in entry["fire_times"] if f["at"].startswith("2026-03-29")]
    assert on_the_day, entry
    # celery runs 02:30 at 03:30 CEST (01:30Z); goatbeat does not run it then
    assert any(f["at"] == "2026-03-29T01:30:00Z" and f["old"] and not f["new"] for f in on_the_day)
    assert all("spring-forward" in f["reason"] and f["known"] for f in on_the_day)
    # ... and accepting known celery bugs makes the comparison pass
    code, _ = diff(db, "tests.compat.diff_apps:dst", "--accept-known-bugs")
    assert code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--from-app", "tests.compat.no_such_module:app"],
        ["--from-django-celery-beat", "sqlite:////nonexistent/dir/db.sqlite3"],
        ["--from-app", "tests.compat.diff_apps:clean", "--horizon", "soon"],
        [],
    ],
)
def test_errors_exit_2(db: str, args: list[str]) -> None:
    imported(db, "tests.compat.diff_apps:clean")
    code, out = run("diff", *args, "--database", db)
    assert code == 2, out
    assert "error" in out


def test_fall_back_hourly_difference_is_explained() -> None:
    from datetime import UTC, datetime, timedelta

    from celery.schedules import crontab

    from goatbeat.core.model import Schedule, Source
    from goatbeat.diff import compute_diff
    from goatbeat.importers import read_beat_schedule

    (entry,) = read_beat_schedule(
        {"hourly": {"task": "ping", "schedule": crontab(minute=0)}}, timezone="Europe/Paris"
    )
    assert entry.schedule is not None
    new = [
        Schedule(name="hourly", task="ping", trigger=entry.schedule.trigger, source=Source.CELERY)
    ]
    report = compute_diff(
        [entry], new, start=datetime(2026, 10, 24, 12, tzinfo=UTC), horizon=timedelta(days=2)
    )
    (d,) = report.schedules
    # celery skips the second 02:00 (01:00Z, CET); goatbeat runs every real hour
    assert [(f.at, f.old, f.new) for f in d.fire_times] == [
        (datetime(2026, 10, 25, 1, tzinfo=UTC), False, True)
    ]
    assert d.fire_times[0].known and "fall-back" in (d.fire_times[0].reason or "")
