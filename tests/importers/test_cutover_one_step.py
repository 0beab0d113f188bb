"""``goatbeat cutover`` (#27 item 8): the cutover of docs/migration in one step. Each refusal
changes nothing; ``--check-only`` changes nothing; the last runs celery made before it stopped
are imported after the stop; goatbeat's lease ends the step. On SQLite and PostgreSQL, both
for django-celery-beat's tables and goatbeat's database."""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from goatbeat.cli import cli  # noqa: E402
from goatbeat.core.model import Schedule  # noqa: E402
from goatbeat.core.triggers import IntervalTrigger  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC).replace(microsecond=0)
EARLIER = NOW - timedelta(minutes=10)
LATER = NOW - timedelta(minutes=1)  # celery ran it again after the check, before it stopped


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def execute(url: str, statement: str) -> None:
    """One SQL statement on django-celery-beat's database (SQLite file or PostgreSQL)."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url[len("sqlite:///") :])) as conn:
            conn.execute(statement)
            conn.commit()
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement)  # type: ignore[arg-type]


def python(code: str, *args: str) -> str:
    """A shell command running ``code`` with this interpreter, from the repository."""
    return shlex.join(["env", f"PYTHONPATH={ROOT}", sys.executable, "-c", code, *args])


def sql_command(url: str, statement: str) -> str:
    """A shell command that runs ``statement``: celery beat writing its last runs at SIGTERM."""
    code = "import sys; from tests.importers.test_cutover_one_step import execute; "
    return python(code + "execute(sys.argv[1], sys.argv[2])", url, statement)


def lease_command(target: str) -> str:
    """A shell command that takes goatbeat's lease, as a scheduler starting up does."""
    return python(
        "import sys; from datetime import timedelta; from goatbeat.stores import open_store; "
        "s = open_store(sys.argv[1]); s.acquire_lease('scheduler', 'fake-goatbeat:1:a', "
        "timedelta(seconds=60)); s.close()",
        target,
    )


def _stamp(url: str, at: datetime) -> str:
    # SQLite's columns are naive UTC (USE_TZ); PostgreSQL's are timestamptz.
    if url.startswith("sqlite:///"):
        return at.replace(tzinfo=None).isoformat(sep=" ")
    return at.isoformat()


@pytest.fixture
def target(dcb_url: str, tmp_path: Path, postgres_server: object) -> Iterator[str]:
    """goatbeat's database, of the same kind as django-celery-beat's (a separate one)."""
    if dcb_url.startswith("sqlite:///"):
        yield f"sqlite:///{tmp_path / 'gb.sqlite3'}"
        return
    dsn = create_database(postgres_server)  # type: ignore[arg-type]
    try:
        yield dsn
    finally:
        drop_database(postgres_server, dsn)  # type: ignore[arg-type]


@pytest.fixture
def dcb(dcb_url: str, dcb_tables: Callable[..., None]) -> str:
    dcb_tables(
        dcb_url,
        [
            {
                "name": "hourly",
                "task": "ping",
                "interval": {"every": 1, "period": "hours"},
                "last_run_at": EARLIER.isoformat(),
            },
            {"name": "nightly", "task": "ping", "crontab": {"minute": "0", "hour": "2"}},
        ],
    )
    return dcb_url


def rows(target: str) -> dict[str, Schedule]:
    store = open_store(target)
    try:
        if not int(store.info().get("schema_version") or 0):
            return {}
        return {s.name: s for s in store.list_schedules() if isinstance(s, Schedule)}
    finally:
        store.close()


def cutover(dcb: str, target: str, *args: str) -> tuple[int, str]:
    return run("--database", target, "cutover", "--from-django-celery-beat", dcb, *args)


# -- refusals: nothing changes -----------------------------------------------------------------


def test_a_scheduler_holding_the_lease_refuses_in_one_line(dcb: str, target: str) -> None:
    store = open_store(target)
    try:
        store.migrate()
        assert store.acquire_lease("scheduler", "gb-1:42:abc", timedelta(seconds=60))
    finally:
        store.close()
    code, out = cutover(dcb, target, "--old-beat-stopped")
    assert code == 1, out
    assert "Traceback" not in out
    (error,) = [line for line in out.splitlines() if line.startswith("goatbeat: error:")]
    assert "already holds the lease 'scheduler'" in error and "gb-1:42:abc" in error
    assert rows(target) == {}  # nothing imported


def test_check_only_changes_nothing_and_says_it_would_go_on(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target, "--check-only")
    assert code == 0, out
    assert "check: OK" in out and "would create" in out
    assert "check only: the cutover would go on; nothing changed" in out
    assert rows(target) == {}
    # No tables were even created.
    store = open_store(target)
    try:
        assert not int(store.info().get("schema_version") or 0)
    finally:
        store.close()


def test_check_only_json(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target, "--check-only", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["outcome"] == "checked" and data["check"]["ok"] is True
    assert sorted(data["check"]["import"]["created"]) == ["hourly", "nightly"]
    assert data["check"]["diff"]["equal"] is True


def test_an_enabled_difference_refuses_before_the_stop(
    dcb: str, target: str, tmp_path: Path
) -> None:
    code, out = run("--database", target, "import_celery_beat", "--from-django-celery-beat", dcb)
    assert code == 0, out
    code, out = run("--database", target, "schedule", "disable", "nightly")
    assert code == 0, out
    marker = tmp_path / "stopped"
    code, out = cutover(dcb, target, "--stop-old-beat", f"touch {marker}")
    assert code == 1, out
    assert "refuse  nightly: enabled: celery True -> goatbeat False" in out
    assert "do not start goatbeat yet" in out
    assert "refused: nothing changed; the old beat still runs" in out
    assert "stopping the old beat" not in out
    assert not marker.exists()  # the stop command never ran
    assert rows(target)["nightly"].enabled is False


def test_a_failed_entry_refuses_unless_accepted(
    dcb_url: str, target: str, dcb_tables: Callable[..., None]
) -> None:
    dcb_tables(
        dcb_url,
        [
            {"name": "good", "task": "ping", "interval": {"every": 1, "period": "hours"}},
            {"name": "double-comma", "task": "ping", "crontab": {"minute": "5,,6"}},
        ],
    )
    code, out = cutover(dcb_url, target, "--check-only")
    assert code == 1, out
    assert "refuse  double-comma: the importer refuses it (crontab: celery rejects it" in out
    assert "--accept-refused double-comma" in out
    code, out = cutover(dcb_url, target, "--check-only", "--accept-refused", "double-comma")
    assert code == 0, out
    assert "accepted refused  double-comma" in out
    assert rows(target) == {}


def test_a_conflict_refuses(dcb: str, target: str) -> None:
    code, out = run("--database", target, "import_celery_beat", "--from-django-celery-beat", dcb)
    assert code == 0, out
    store = open_store(target)
    try:
        row = store.get("hourly")
        assert isinstance(row, Schedule)
        store.update(row.evolve(trigger=IntervalTrigger("2h")))
    finally:
        store.close()
    execute(
        dcb,
        "UPDATE django_celery_beat_intervalschedule SET every = 3 WHERE id = (SELECT "
        "interval_id FROM django_celery_beat_periodictask WHERE name = 'hourly')",
    )
    code, out = cutover(dcb, target, "--old-beat-stopped")
    assert code == 1, out
    assert "refuse  hourly: conflict: edited in goatbeat since it was imported" in out
    trigger = rows(target)["hourly"].trigger
    assert isinstance(trigger, IntervalTrigger) and trigger.every == timedelta(hours=2)


def test_no_way_to_stop_the_old_beat_is_a_usage_error(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target)
    assert code == 2, out
    assert out.strip().splitlines() == [
        "goatbeat: error: say how the old beat stops: --stop-old-beat CMD, --old-beat-stopped, "
        "or --check-only (exactly one)"
    ]
    code, out = cutover(dcb, target, "--live-timeout", "soon", "--old-beat-stopped")
    assert code == 2 and "live_timeout" in out and "soon" in out, out


def test_a_failing_stop_command_imports_nothing(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target, "--stop-old-beat", "echo cannot stop it >&2; exit 3")
    assert code == 1, out
    assert "failed (exit status 3)" in out and "nothing imported" in out
    assert "the old beat may still run" in out
    assert rows(target) == {}


# -- the handover --------------------------------------------------------------------------------


def test_the_last_runs_made_before_the_stop_are_imported_and_the_lease_ends_the_gap(
    dcb: str, target: str
) -> None:
    stop = sql_command(
        dcb,
        f"UPDATE django_celery_beat_periodictask SET last_run_at = '{_stamp(dcb, LATER)}', "
        "total_run_count = total_run_count + 1 WHERE name = 'hourly'",
    )
    code, out = cutover(dcb, target, "--stop-old-beat", stop, "--start-goatbeat",
                        lease_command(target), "--live-timeout", "60s")  # fmt: skip
    assert code == 0, out
    assert "refresh hourly" not in out  # created at the import after the stop, with that run
    hourly = rows(target)["hourly"]
    assert hourly.last_run_at == LATER
    assert hourly.next_run_at == LATER + timedelta(hours=1)
    lines = out.splitlines()
    gap = next(line for line in lines if line.startswith("gap: "))
    assert "from stopping the old beat to goatbeat leading" in gap
    parts = [line.split()[0] for line in lines if line.startswith("  ")]
    assert parts == ["stop", "read", "import", "recheck", "start", "lease"]
    assert "recheck: OK" in out and "until fake-goatbeat:1:a held the lease" in out


def test_a_run_after_the_rehearsal_import_moves_the_phase_and_json_has_the_gap(
    dcb: str, target: str
) -> None:
    code, out = run("--database", target, "import_celery_beat", "--from-django-celery-beat", dcb)
    assert code == 0, out
    assert rows(target)["hourly"].last_run_at == EARLIER
    stop = sql_command(
        dcb,
        f"UPDATE django_celery_beat_periodictask SET last_run_at = '{_stamp(dcb, LATER)}' "
        "WHERE name = 'hourly'",
    )
    code, out = cutover(dcb, target, "--stop-old-beat", stop, "--start-goatbeat",
                        lease_command(target), "--json")  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["outcome"] == "handed_over" and data["leader"] == "fake-goatbeat:1:a"
    assert data["recheck"]["changed"] == ["hourly"]
    moved = data["recheck"]["import"]
    assert moved["updated"] + moved["refreshed"] == ["hourly"], moved  # its phase moved
    assert [p["name"] for p in data["gap"]["parts"]] == [
        "stop", "read", "import", "recheck", "start", "lease"]  # fmt: skip
    assert data["gap"]["seconds"] == pytest.approx(
        sum(p["seconds"] for p in data["gap"]["parts"]), abs=0.01
    )
    assert rows(target)["hourly"].next_run_at == LATER + timedelta(hours=1)


def test_an_entry_broken_in_the_gap_is_rechecked_and_goatbeat_is_not_started(
    dcb: str, target: str, tmp_path: Path
) -> None:
    # While the old beat stops, somebody saves a crontab celery rejects: the re-check of the
    # entries changed since the check refuses, and nothing starts.
    stop = sql_command(
        dcb,
        "UPDATE django_celery_beat_crontabschedule SET minute = '5,,6' WHERE id = (SELECT "
        "crontab_id FROM django_celery_beat_periodictask WHERE name = 'nightly')",
    )
    started = tmp_path / "started"
    code, out = cutover(dcb, target, "--stop-old-beat", stop, "--start-goatbeat",
                        f"touch {started}")  # fmt: skip
    assert code == 1, out
    assert "refuse  nightly: the importer refuses it (crontab: celery rejects it" in out
    assert "recheck: REFUSED (1)" in out
    assert "the old beat is STOPPED and goatbeat is NOT started" in out
    assert not started.exists()


def test_a_start_that_never_leads_says_what_state_it_leaves(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target, "--old-beat-stopped", "--start-goatbeat", "true",
                        "--live-timeout", "1s")  # fmt: skip
    assert code == 1, out
    assert "no goatbeat scheduler holds the lease" in out
    assert "the old beat is STOPPED and goatbeat does not lead" in out
    assert set(rows(target)) == {"hourly", "nightly"}  # imported: it is goatbeat's to run


def test_without_a_start_command_it_prints_the_one_to_run(dcb: str, target: str) -> None:
    code, out = cutover(dcb, target, "--old-beat-stopped", "--live-timeout", "0s")
    assert code == 1, out
    assert f"start goatbeat now: goatbeat --database {target} scheduler" in out


# -- beat_schedule ------------------------------------------------------------------------------


@pytest.fixture
def beat_app(monkeypatch: pytest.MonkeyPatch) -> str:
    from celery import Celery

    app = Celery("cutover_app", set_as_current=False)
    app.conf.timezone = "UTC"
    app.conf.broker_url = "memory://"
    app.conf.beat_schedule = {"every-10m": {"task": "ping", "schedule": timedelta(minutes=10)}}
    module = types.ModuleType("gb_cutover_app")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gb_cutover_app", module)
    return "gb_cutover_app:app"


@pytest.mark.parametrize("dcb_url", ["sqlite"], indirect=True)
def test_beat_schedule_last_runs_dumped_at_the_stop_set_the_phase(
    beat_app: str, target: str, tmp_path: Path
) -> None:
    dump = tmp_path / "last-runs.json"  # not there before the stop: the stop command dumps it
    ran = NOW - timedelta(seconds=37)
    stop = f"echo '{json.dumps({'every-10m': ran.isoformat()})}' > {shlex.quote(str(dump))}"
    code, out = run("--database", target, "cutover", "--from-app", beat_app, "--no-check-tasks",
                    "--last-runs", str(dump), "--stop-old-beat", stop,
                    "--start-goatbeat", lease_command(target))  # fmt: skip
    assert code == 0, out
    assert f"read: --last-runs {dump}: not there yet (the stop is to write it)" in out
    assert f"read: last runs of 1 entries from {dump}" in out  # after the stop
    row = rows(target)["every-10m"]
    assert row.last_run_at == ran
    assert row.next_run_at == ran + timedelta(minutes=10)


@pytest.mark.parametrize("dcb_url", ["sqlite"], indirect=True)
def test_an_error_after_the_stop_says_the_old_beat_is_stopped(
    beat_app: str, target: str, tmp_path: Path
) -> None:
    dump = tmp_path / "last-runs.json"
    code, out = run("--database", target, "cutover", "--from-app", beat_app, "--no-check-tasks",
                    "--last-runs", str(dump), "--stop-old-beat", "true")  # fmt: skip
    assert code == 1, out
    (error,) = [line for line in out.splitlines() if line.startswith("goatbeat: error:")]
    assert "cannot read the source" in error and "last-runs.json" in error
    assert "after the stop: the old beat is STOPPED and goatbeat is NOT started" in error
    assert rows(target) == {}
