"""Publication from the command line, on SQLite and PostgreSQL: `goatbeat publish` says what
it did, `schedule list` keeps publishing but warns when it rewrites a definition (a stale
checkout), nothing else publishes, orphans are reported and pruned or deleted on purpose."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from goatbeat.cli import cli
from goatbeat.core.model import Schedule
from goatbeat.core.store import ScheduleStore
from goatbeat.stores import open_store
from tests.integration.test_cli import write_app

ROOT = Path(__file__).resolve().parents[2]

NEW = """
    from goatbeat.beat import Beat
    beat = Beat("memory://")
    beat.schedule(name="daily-report", task="json.dumps", cron="30 8 * * *")
    beat.schedule(name="ping", task="json.dumps", every="5m")
"""
OLD = """
    from goatbeat.beat import Beat
    beat = Beat("memory://")
    beat.schedule(name="daily-report", task="json.dumps", cron="0 9 * * *")
    beat.schedule(name="ping", task="json.dumps", every="5m")
    beat.schedule(name="legacy", task="json.dumps", every="1h")
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "apps"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    return path


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, input=input)


def stored(database: str) -> dict[str, Schedule]:
    store: ScheduleStore = open_store(database)
    try:
        rows = store.list_schedules()
    finally:
        store.close()
    out = {}
    for row in rows:
        assert isinstance(row, Schedule)
        out[row.name] = row
    return out


def expression(database: str, name: str) -> str:
    return str(stored(database)[name].trigger.to_spec()["expression"])


def migrate(database: str) -> None:
    assert invoke("--database", database, "migrate").exit_code == 0


def test_publish_says_what_it_created_changed_orphaned_and_kept(app_dir, database):
    migrate(database)
    old, new = write_app(app_dir, OLD), write_app(app_dir, NEW)
    first = invoke("--app", old, "--database", database, "publish")
    assert first.exit_code == 0, first.output
    assert "3 created" in first.stderr and "  create  legacy" in first.stderr
    assert first.stdout == ""

    result = invoke("--app", new, "--database", database, "publish")

    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("goatbeat: published 2 code schedule(s) to ")
    assert lines[0].endswith("1 changed, 1 unchanged, 1 orphaned")
    assert "  change  daily-report" in lines
    assert "      trigger: cron 0 9 * * * (UTC) -> cron 30 8 * * * (UTC)" in lines
    assert any(line.startswith("  orphaned  legacy: enabled, no longer declared") for line in lines)
    assert "  unchanged ping" in lines
    assert "warning" not in result.stderr  # publishing is what `publish` is for
    assert expression(database, "daily-report") == "30 8 * * *"
    assert stored(database)["legacy"].enabled is True  # reported, not touched


def test_publish_dry_run_reports_and_writes_nothing(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, OLD), "--database", database, "publish")
    before = stored(database)

    result = invoke(
        "--app", write_app(app_dir, NEW), "--database", database, "publish", "--dry-run"
    )

    assert result.exit_code == 0, result.output
    assert "publish --dry-run" in result.stderr and "nothing written" in result.stderr
    assert "  would change  daily-report" in result.stderr.splitlines()
    assert stored(database) == before  # every column, versions included


def test_schedule_list_from_an_older_checkout_warns_that_it_reverted_a_definition(
    tmp_path, database
):
    """The defect: `schedule list` run from an older checkout silently put `0 9 * * *` back
    over the deployed `30 8 * * *`. It still publishes (as specified), and now says so."""
    for name, body in (("new_beat", NEW), ("old_beat", OLD)):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    env.pop("GOATBEAT_APP", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)

    def goatbeat(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "goatbeat", "--database", database, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert goatbeat("migrate").returncode == 0
    assert goatbeat("--app", "new_beat:beat", "publish").returncode == 0

    listed = goatbeat("--app", "old_beat:beat", "schedule", "list")

    assert listed.returncode == 0, listed.stderr
    assert "daily-report" in listed.stdout
    warnings = [line for line in listed.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "goatbeat: warning: `schedule list` changed the stored definition of 'daily-report' "
        "(trigger) to this checkout's"
    )
    assert "trigger: cron 30 8 * * * (UTC) -> cron 0 9 * * * (UTC)" in listed.stderr
    assert "Traceback" not in listed.stderr


def test_schedule_list_no_publish_lists_what_is_stored_and_changes_nothing(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, NEW), "--database", database, "publish")
    before = stored(database)
    old = write_app(app_dir, OLD)

    result = invoke("--app", old, "--database", database, "schedule", "list", "--no-publish")

    assert result.exit_code == 0, result.output
    assert stored(database) == before
    assert "cron 30 8 * * * (UTC)" in result.stdout
    assert "not stored yet and 1 stored differently" in result.stderr
    as_json = invoke(
        "--app", old, "--database", database, "schedule", "list", "--no-publish", "--json"
    )
    assert json.loads(as_json.stdout)[0]["trigger"]["expression"] == "30 8 * * *"
    assert stored(database) == before


def test_show_run_prune_and_delete_never_publish(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, NEW), "--database", database, "publish")
    before = stored(database)
    old = write_app(app_dir, OLD)

    for args in (
        ["schedule", "show", "daily-report"],
        ["schedule", "show", "ping", "--json"],
        ["schedule", "prune", "--dry-run"],
        ["schedule", "prune"],
    ):
        result = invoke("--app", old, "--database", database, *args)
        assert result.exit_code == 0, (args, result.output)
        assert "30 8 * * *" in json.dumps(stored(database)["daily-report"].trigger.to_spec()), args
    assert stored(database) == before
    run = invoke("--app", old, "--database", database, "schedule", "run", "daily-report")
    assert run.exit_code == 0, run.output
    assert stored(database)["daily-report"].version == before["daily-report"].version
    # A schedule this checkout declares but nobody published is not created by `run`.
    missing = invoke("--app", old, "--database", database, "schedule", "run", "legacy")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        "goatbeat: error: schedule 'legacy' is declared in the code but not published yet: "
        "run `goatbeat publish` first"
    )
    assert "legacy" not in stored(database)


def test_diff_never_publishes(app_dir, database):
    pytest.importorskip("celery")
    migrate(database)
    invoke("--app", write_app(app_dir, NEW), "--database", database, "publish")
    before = stored(database)

    result = invoke(
        "--app",
        write_app(app_dir, OLD),
        "--database",
        database,
        "diff",
        "--from-app",
        "tests.compat.diff_apps:clean",
    )

    assert result.exit_code in (0, 1), result.output
    assert stored(database) == before


def test_orphans_are_listed_pruned_on_purpose_and_deleted_with_confirmation(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, OLD), "--database", database, "publish")
    new = write_app(app_dir, NEW)

    listed = invoke("--app", new, "--database", database, "schedule", "list")
    assert re.search(r"^legacy +code \(orphaned\) ", listed.stdout, re.M)
    assert "1 orphaned code schedule(s), still enabled but no longer declared" in listed.stdout
    assert "orphaned  legacy" in listed.stderr
    rows = json.loads(
        invoke("--app", new, "--database", database, "schedule", "list", "--json").stdout
    )
    flags = {r["name"]: (r["declared_in_code"], r["orphaned"]) for r in rows}
    assert flags == {
        "daily-report": (True, False),
        "legacy": (False, True),
        "ping": (True, False),
    }

    dry = invoke("--app", new, "--database", database, "schedule", "prune", "--dry-run")
    assert dry.stdout.strip() == "would disable: legacy"
    assert stored(database)["legacy"].enabled is True
    assert invoke("--app", new, "--database", database, "schedule", "prune").stdout.strip() == (
        "disabled: legacy"
    )
    relisted = invoke("--app", new, "--database", database, "schedule", "list").stdout
    assert re.search(r"^legacy +code \(undeclared\) ", relisted, re.M)

    # A code schedule the code still declares would come back: refused, one line.
    refused = invoke("--app", new, "--database", database, "schedule", "delete", "ping", "--yes")
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (
        "goatbeat: error: schedule 'ping' is declared in the code: the next publication would "
        "recreate it; remove its declaration first, or disable it"
    )
    declined = invoke(
        "--app", new, "--database", database, "schedule", "delete", "legacy", input="n\n"
    )
    assert declined.exit_code == 1
    assert "Delete schedule 'legacy' (code, disabled)? Its executions stay." in declined.stderr
    assert "not deleted" in declined.stderr
    no_terminal = invoke("--app", new, "--database", database, "schedule", "delete", "legacy")
    assert no_terminal.exit_code == 1 and "legacy" in stored(database)
    deleted = invoke(
        "--app", new, "--database", database, "schedule", "delete", "legacy", input="y\n"
    )
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.strip() == "deleted: legacy"
    assert set(stored(database)) == {"daily-report", "ping"}
    gone = invoke("--app", new, "--database", database, "schedule", "delete", "legacy", "--yes")
    assert gone.exit_code == 2 and "no schedule named 'legacy'" in gone.stderr


def test_without_an_app_publish_and_prune_refuse_and_list_does_not_publish(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, OLD), "--database", database, "publish")
    before = stored(database)

    for args in (["publish"], ["schedule", "prune"]):
        result = invoke("--database", database, *args)
        assert result.exit_code == 2
        assert result.stderr.startswith("goatbeat: error: ")
        assert "needs the app that declares the schedules" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    listed = invoke("--database", database, "schedule", "list", "--json")
    assert listed.exit_code == 0 and listed.stderr == ""
    assert {r["orphaned"] for r in json.loads(listed.stdout)} == {False}
    assert stored(database) == before


def test_the_scheduler_prunes_orphans_at_start_only_with_prune_on_publish(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, OLD), "--database", database, "publish")
    body = NEW.replace('Beat("memory://")', 'Beat("memory://", settings={SETTINGS})')
    keep = write_app(app_dir, body.replace("{SETTINGS}", "{}"))
    prune = write_app(app_dir, body.replace("{SETTINGS}", '{"prune_on_publish": True}'))

    kept = invoke("--app", keep, "--database", database, "scheduler", "--once")
    assert kept.exit_code == 0, kept.output
    assert "WARNING schedule.orphaned schedule=legacy" in kept.stderr
    assert "schedule.changed schedule=daily-report" in kept.stderr
    assert stored(database)["legacy"].enabled is True

    pruned = invoke("--app", prune, "--database", database, "scheduler", "--once")
    assert pruned.exit_code == 0, pruned.output
    assert "schedule.pruned schedules=legacy" in pruned.stderr
    assert stored(database)["legacy"].enabled is False


def test_json_logs_carry_the_publication_events_instead_of_the_report(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, NEW), "--database", database, "publish")

    result = invoke(
        "--app",
        write_app(app_dir, OLD),
        "--database",
        database,
        "--log-format",
        "json",
        "schedule",
        "list",
        "--json",
    )

    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stderr.splitlines()]
    changed = [e for e in events if e["event"] == "schedule.changed"]
    assert len(changed) == 1 and changed[0]["level"] == "WARNING"
    assert changed[0]["schedule"] == "daily-report" and changed[0]["fields"] == ["trigger"]
    assert changed[0]["old"]["trigger"]["expression"] == "30 8 * * *"
    assert changed[0]["new"]["trigger"]["expression"] == "0 9 * * *"
    assert changed[0]["origin"] == "schedule list"
    assert json.loads(result.stdout)  # stdout stays one JSON document


def test_a_scheduler_started_with_no_publish_never_reverts_a_definition(app_dir, database):
    migrate(database)
    invoke("--app", write_app(app_dir, NEW), "--database", database, "publish")
    before = stored(database)

    old = invoke(
        "--app",
        write_app(app_dir, OLD),
        "--database",
        database,
        "scheduler",
        "--once",
        "--no-publish",
    )

    assert old.exit_code == 0, old.output
    assert "schedule.changed" not in old.stderr and "schedule.published" not in old.stderr
    assert expression(database, "daily-report") == "30 8 * * *"
    assert set(stored(database)) == set(before)


def test_older_code_publishing_again_writes_nothing_and_names_what_it_kept(app_dir, database):
    """#31 item 1: the old replica's publication after the new release's writes nothing."""
    migrate(database)
    old, new = write_app(app_dir, OLD), write_app(app_dir, NEW)
    assert invoke("--app", old, "--database", database, "publish").exit_code == 0
    assert invoke("--app", new, "--database", database, "publish").exit_code == 0
    before = stored(database)

    again = invoke("--app", old, "--database", database, "publish")

    assert again.exit_code == 0, again.output
    [line] = [line for line in again.stderr.splitlines() if line.strip()]
    assert line.startswith("goatbeat: warning: this code is older than the schedules published")
    assert "generation 1, replaced by generation 2" in line and "(kept: daily-report);" in line
    assert stored(database) == before
    for args in (("schedule", "list"), ("schedule", "prune"), ("schedule", "prune", "--dry-run")):
        result = invoke("--app", old, "--database", database, *args)
        assert stored(database) == before, args
        if args[1] == "prune":
            assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
            assert "not pruning: this code is older" in result.stderr

    back = invoke("--app", old, "--database", database, "publish", "--rollback")
    assert back.exit_code == 0, back.output
    assert expression(database, "daily-report") == "0 9 * * *"


def test_release_numbers_order_every_command(app_dir, database, monkeypatch):
    """A stale checkout never published here: GOATBEAT_RELEASE tells it is older, for
    `schedule list` as for `publish` (and --release says the same)."""
    migrate(database)
    old, new = write_app(app_dir, OLD), write_app(app_dir, NEW)
    done = invoke("--app", new, "--database", database, "publish", "--release", "12")
    assert done.exit_code == 0, done.output
    monkeypatch.setenv("GOATBEAT_RELEASE", "11")

    listed = invoke("--app", old, "--database", database, "schedule", "list")

    assert listed.exit_code == 0, listed.output
    assert "release 11 is older than release 12" in listed.stderr
    assert expression(database, "daily-report") == "30 8 * * *"
    assert "legacy" not in stored(database)
    bad = invoke("--app", new, "--database", database, "publish", "--release", "v2")
    assert bad.exit_code == 2 and "release: 'v2' is not a release number" in bad.stderr
