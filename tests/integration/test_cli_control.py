"""``goatbeat schedule add/edit/enable/disable/pause/resume/backfill`` through click's runner,
on a real SQLite file and an app module written to a temporary directory. Mistakes are one
line with a non-zero status, never a traceback."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli import assert_one_line_error, invoke, write_app

APP = """
    from goatbeat.beat import Beat

    beat = Beat("memory://", settings={"allowed_tasks": ["{module}.*"]})

    def hello(who="world"):
        print(f"hello {who}")

    def report(*args, **kwargs):
        print("report", args, kwargs)

    beat.schedule(name="code-hourly", task=hello, cron="0 * * * *")
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "apps"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    return path


@pytest.fixture
def run(app_dir: Path, tmp_path: Path) -> Any:
    db = f"sqlite:///{tmp_path}/cli.db"
    spec = write_app(app_dir, APP.replace("{module}", "gb_cli_app_PLACEHOLDER"))
    module = spec.split(":")[0]
    (app_dir / f"{module}.py").write_text(
        (app_dir / f"{module}.py").read_text().replace("gb_cli_app_PLACEHOLDER", module)
    )

    def go(*args: str) -> Any:
        return invoke("--app", spec, "--database", db, *args)

    assert go("publish").exit_code == 0
    go.task = f"{module}.report"  # type: ignore[attr-defined]
    return go


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_add_stores_a_schedule_with_every_option(run: Any) -> None:
    data = _json(
        run(
            "schedule", "add", "nightly", "--task", run.task, "--cron", "0 2 * * *",
            "--timezone", "Europe/Paris", "--args", "[1, \"x\"]", "--kwargs", '{"k": 2}',
            "--queue", "reports", "--misfire", "run_all", "--misfire-grace", "10m",
            "--catch-up-limit", "5", "--jitter", "30s", "--overlap", "buffer_one",
            "--max-runtime", "1h", "--pause-on-failure", "3", "--start-at",
            "2026-01-01T00:00Z", "--end-at", "2040-01-01T00:00Z", "--description", "n",
            "--json",
        )
    )  # fmt: skip
    assert data["source"] == "admin" and data["task"] == run.task
    assert data["trigger_description"] == "cron 0 2 * * * (Europe/Paris)"
    assert (data["args"], data["kwargs"], data["queue"]) == ([1, "x"], {"k": 2}, "reports")
    assert (data["misfire"], data["misfire_grace"], data["catch_up_limit"]) == ("run_all", 600, 5)
    assert (data["jitter"], data["overlap"], data["max_runtime"]) == (30, "buffer_one", 3600)
    assert data["pause_on_failure"] == 3 and data["state"] == "enabled"
    assert (data["start_at"], data["end_at"]) == ("2026-01-01T00:00:00Z", "2040-01-01T00:00:00Z")

    plain = run("schedule", "add", "every-5m", "--task", run.task, "--every", "5m")
    assert plain.exit_code == 0 and plain.stdout.startswith("added: every-5m (every 5m; next run")
    disabled = _json(
        run("schedule", "add", "off", "--task", run.task, "--every", "1h", "--disabled", "--json")
    )
    assert disabled["enabled"] is False and disabled["state"] == "disabled"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--every", "5m", "--args", "{x"], "--args: '{x' is not JSON"),
        (["--every", "5m", "--kwargs", "[1]"], "--kwargs: '[1]' is not a JSON object"),
        (["--every", "5m", "--overlap", "skip"], "max_runtime: required when overlap is 'skip'"),
        (["--every", "5m", "--jitter", "2d"], "jitter:"),
        (["--every", "5m", "--priority", "high"], "--priority: 'high' is not an integer"),
        ([], "trigger: give exactly one of cron=, every=, at=, solar="),
        (["--cron", "0 9 * * 8"], "day-of-week"),
        (["--every", "5m", "--latitude", "3"], "--latitude and --longitude go with --solar"),
    ],
)
def test_add_reports_a_mistake_in_one_line(run: Any, args: list[str], fragment: str) -> None:
    result = run("schedule", "add", "bad", "--task", run.task, *args)
    assert_one_line_error(result, fragment)
    assert "bad" not in run("schedule", "list", "--no-publish").stdout


def test_add_refuses_an_unknown_task_and_a_taken_name(run: Any) -> None:
    assert_one_line_error(
        run("schedule", "add", "x", "--task", "os.system", "--every", "5m"),
        "'os.system' is not a known task",
    )
    assert_one_line_error(
        run("schedule", "add", "code-hourly", "--task", run.task, "--every", "5m"),
        "'code-hourly' already exists",
    )


def test_edit_changes_what_is_given_and_keeps_the_rest(run: Any) -> None:
    first = _json(
        run(
            "schedule", "add", "e", "--task", run.task, "--every", "7m", "--anchor",
            "2026-01-01T00:03:00Z", "--queue", "q", "--end-at", "2040-01-01T00:00Z", "--json",
        )
    )  # fmt: skip
    edited = run("schedule", "edit", "e", "--description", "about", "--end-at", "none", "--json")
    data = _json(edited)
    assert data["description"] == "about" and data["end_at"] is None
    # The trigger (an interval's anchor, so its phase) and the rest stay as stored.
    assert data["trigger"] == first["trigger"] and data["queue"] == "q"
    assert data["next_run_at"] == first["next_run_at"]
    assert [c["field"] for c in data["changes"]] == ["end_at", "description"]

    line = run("schedule", "edit", "e", "--every", "9m", "--jitter", "5s")
    assert line.exit_code == 0
    assert (
        line.stdout.startswith("changed e: trigger: every 7m")
        and "jitter: 0.0 -> 5.0" in line.stdout
    )
    nothing = run("schedule", "edit", "e", "--jitter", "5s")
    assert nothing.stdout.strip() == "e: nothing changed"
    assert_one_line_error(run("schedule", "edit", "e"), "nothing to change")
    assert_one_line_error(
        run("schedule", "edit", "e", "--timezone", "UTC"),
        "timezone: a every 9m trigger has no zone",
    )


def test_a_code_schedule_refuses_edits_but_takes_the_controls(run: Any) -> None:
    assert_one_line_error(
        run("schedule", "edit", "code-hourly", "--description", "x"),
        "schedule 'code-hourly' is declared in code: change its declaration and publish",
    )
    assert _json(run("schedule", "disable", "code-hourly", "--json"))["enabled"] is False
    enabled = run("schedule", "enable", "code-hourly")
    assert enabled.exit_code == 0 and enabled.stdout.startswith("enabled: code-hourly (next run")
    assert run("schedule", "pause", "code-hourly", "--note", "n").exit_code == 0
    assert run("schedule", "resume", "code-hourly").exit_code == 0
    assert_one_line_error(run("schedule", "pause", "nope"), "no schedule named 'nope'")


def test_pause_and_resume_show_the_note_who_and_when(run: Any) -> None:
    run("schedule", "add", "p", "--task", run.task, "--every", "1h")
    paused = run("schedule", "pause", "p", "--note", "incident 42", "--by", "alice")
    assert paused.exit_code == 0
    assert paused.stdout.startswith("paused: p at ") and "by alice: incident 42" in paused.stdout

    table = run("schedule", "list", "--no-publish").stdout
    row = next(line for line in table.splitlines() if line.startswith("p "))
    assert " paused " in row
    assert "1 paused schedule(s):" in table and "p: paused " in table
    listed = {d["name"]: d for d in _json(run("schedule", "list", "--no-publish", "--json"))}
    assert listed["p"]["state"] == "paused" and listed["p"]["pause_note"] == "incident 42"
    assert listed["p"]["paused_by"] == "alice" and listed["p"]["paused_at"].endswith("Z")
    assert listed["code-hourly"]["state"] == "enabled"
    shown = run("schedule", "show", "p").stdout
    assert "(admin, paused)" in shown and "by alice: incident 42" in shown
    assert "next fire times: none while paused" in shown
    assert _json(run("schedule", "show", "p", "--json"))["upcoming"] == []

    resumed = run("schedule", "resume", "p", "--json")
    data = _json(resumed)
    assert data["was_paused"] is True and data["catch_up"] is False
    assert isinstance(data["skipped"], int) and data["paused"] is False
    assert data["pause_note"] == "" and data["paused_by"] is None
    again = run("schedule", "resume", "p")
    assert again.exit_code == 0 and again.stdout.strip() == "p is not paused: nothing to do"
    run("schedule", "pause", "p")
    caught_up = run("schedule", "resume", "p", "--catch-up")
    assert caught_up.stdout.startswith("resumed: p, catching up from ")


def test_an_ended_schedule_shows_as_ended(run: Any) -> None:
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    run("schedule", "add", "over", "--task", run.task, "--every", "1h", "--end-at", past)
    listed = {d["name"]: d for d in _json(run("schedule", "list", "--no-publish", "--json"))}
    assert listed["over"]["state"] == "ended" and listed["over"]["ended"] is True
    assert listed["over"]["next_run_at"] is None
    assert "(admin, ended)" in run("schedule", "show", "over").stdout
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert _json(run("schedule", "edit", "over", "--end-at", later, "--json"))["state"] == "enabled"


def test_backfill_lists_then_submits_each_instant_once(run: Any) -> None:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=5)
    run("schedule", "add", "daily", "--task", run.task, "--cron", "0 6 * * *")
    start, end = day.isoformat(), (day + timedelta(days=3)).isoformat()

    dry = run("schedule", "backfill", "daily", "--from", start, "--to", end, "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.stdout.splitlines()
    assert "3 instant(s)" in lines[0] and "would submit 3" in lines[0]
    assert len(lines) == 4 and all(line.endswith("would submit") for line in lines[1:])
    assert _json(run("schedule", "show", "daily", "--json"))["executions"] == []

    done = _json(run("schedule", "backfill", "daily", "--from", start, "--to", end, "--json"))
    assert len(done["created"]) == 3 and done["existing"] == {}
    assert done["created"][0] == (day + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    again = _json(run("schedule", "backfill", "daily", "--from", start, "--to", end, "--json"))
    assert again["created"] == [] and sorted(again["existing"]) == done["created"]
    assert set(again["existing"].values()) == {"claimed"}

    # The leader submits them (the inline submitter runs the task).
    once = run("scheduler", "--once", "--no-publish")
    assert once.exit_code == 0 and once.output.count("report () {}") == 3
    executions = _json(run("schedule", "show", "daily", "--json"))["executions"]
    # (The inline submitter runs them at once and reports the outcome.)
    assert {(e["kind"], e["status"]) for e in executions} == {("backfill", "succeeded")}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--to", "2099-01-01T00:00Z"], "--to: 2099-01-01T00:00:00Z is later than now"),
        (["--to", "2020-01-01T00:00Z"], "--to: 2020-01-01T00:00:00Z is not after the start"),
        (["--to", "2026-01-01T00:00Z", "--limit", "3"], "--limit: "),
        (["--to", "yesterday"], "--to: 'yesterday' is not an ISO-8601 instant"),
    ],
)
def test_backfill_reports_a_bad_range_in_one_line(run: Any, args: list[str], fragment: str) -> None:
    run("schedule", "add", "h", "--task", run.task, "--every", "1h")
    result = run("schedule", "backfill", "h", "--from", "2025-06-01T00:00Z", *args)
    assert_one_line_error(result, fragment)
