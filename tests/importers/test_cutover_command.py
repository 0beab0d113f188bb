"""``goatbeat import_celery_beat`` at cutover, as an operator runs it: the target it writes to,
one line per problem (never a traceback, never a memory address), conflicts with an operator's
edits, and ``export_last_runs`` for a rollback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from goatbeat.cli import cli  # noqa: E402
from goatbeat.core.triggers import IntervalTrigger  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "celery_project"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gb.sqlite3'}"


# -- one line per problem ----------------------------------------------------------------------


def test_a_crontab_field_celery_cannot_parse_is_one_failed_line(
    db: str, tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    url = f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dcb_tables(
        url,
        [
            {"name": "good", "task": "ping", "interval": {"every": 1, "period": "hours"}},
            {"name": "double-comma", "task": "ping", "crontab": {"minute": "5,,6"}},
            {"name": "empty-hour", "task": "ping", "crontab": {"minute": "5", "hour": ""}},
        ],
    )
    code, out = run("import_celery_beat", "--from-django-celery-beat", url, "--database", db)
    assert code == 1, out
    assert "Traceback" not in out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert failed == [
        "FAILED  double-comma: crontab: celery rejects it (ParseException: empty part)"
    ]
    assert "create  good" in out
    # An empty field is read as '*': imported, with a note saying so.
    assert "create  empty-hour" in out
    assert "note    empty-hour: crontab field(s) hour are empty: read as '*'" in out


@pytest.fixture
def broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "gb_broken_celery.py").write_text(
        "import os\n\nraise RuntimeError(f'no broker for {os.sep!r}: ' + repr(object()))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "gb_broken_celery:app"
    sys.modules.pop("gb_broken_celery", None)


def test_an_app_module_that_raises_on_import_is_one_line_naming_it(
    db: str, broken_module: str
) -> None:
    code, out = run("import_celery_beat", "--from-app", broken_module, "--database", db)
    assert code == 2, out
    (line,) = out.strip().splitlines()
    assert line.startswith("goatbeat: error: cannot read the source: app: importing ")
    assert "'gb_broken_celery' failed: RuntimeError: no broker" in line
    assert "gb_broken_celery.py:3" in line
    assert "0x" not in line and "Traceback" not in out


@pytest.fixture
def custom_schedule_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import types

    from celery import Celery
    from celery.schedules import schedule

    class EveryOtherTuesday(schedule):  # type: ignore[misc]
        def is_due(self, last_run_at: object) -> object:
            return super().is_due(last_run_at)

    app = Celery("custom", set_as_current=False)
    app.conf.beat_schedule = {
        "custom": {"task": "ping", "schedule": object()},
        "func": {"task": "ping", "schedule": lambda: 5},
    }
    module = types.ModuleType("gb_custom_app")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gb_custom_app", module)
    yield "gb_custom_app:app"


def test_error_messages_carry_no_memory_addresses(db: str, custom_schedule_app: str) -> None:
    code, out = run(
        "import_celery_beat",
        "--from-app",
        custom_schedule_app,
        "--database",
        db,
        "--no-check-tasks",
    )
    assert code == 1, out
    assert "FAILED  custom: " in out and "FAILED  func: " in out
    assert "0x" not in out, out


def test_a_dry_run_against_an_unreachable_target_says_it_is_unreachable(db: str) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = f"postgresql://gb:s3cret@127.0.0.1:{port}/nowhere?connect_timeout=2"
    code, out = run(
        "import_celery_beat",
        "--from-app",
        "tests.importers.celery_app:app",
        "--database",
        target,
        "--dry-run",
    )
    assert code == 1, out
    assert f"target: postgresql://gb:***@127.0.0.1:{port}/nowhere" in out
    assert "is unreachable" in out and "would create" not in out
    assert "s3cret" not in out


# -- conflicts ---------------------------------------------------------------------------------


def test_an_edited_schedule_is_a_conflict_line_and_overwrite_replaces_it(db: str) -> None:
    source = (
        "import_celery_beat",
        "--from-app",
        "tests.compat.diff_apps:clean",
        "--database",
        db,
        "--no-check-tasks",
    )
    code, out = run(*source)
    assert code == 0, out
    store = open_store(db)
    try:
        row = store.get("every-10m")
        store.update(row.evolve(trigger=IntervalTrigger("15m")))
    finally:
        store.close()

    code, out = run(*source)
    assert code == 1, out
    assert "conflict  every-10m: edited in goatbeat since it was imported" in out
    assert "--overwrite" in out and "1 conflict(s)" in out
    code, out = run(*source, "--json")
    assert [c["name"] for c in json.loads(out)["conflicts"]] == ["every-10m"]

    code, out = run(*source, "--overwrite")
    assert code == 0, out
    assert "update  every-10m" in out
    store = open_store(db)
    try:
        assert store.get("every-10m").trigger.every == IntervalTrigger("10m").every  # type: ignore[attr-defined]
    finally:
        store.close()


# -- the target --------------------------------------------------------------------------------


class Example:
    """The example Django + Celery project, run as a subprocess (it configures Django)."""

    def __init__(self, django_db: str, **env: str) -> None:
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(PROJECT), str(ROOT)]),
            "EXAMPLE_DATABASE_URL": django_db,
            "EXAMPLE_REDIS_URL": "redis://127.0.0.1:1/0",
            "PYTHONWARNINGS": "ignore",
            **env,
        }
        for name in ("DJANGO_SETTINGS_MODULE", "GOATBEAT_APP", "GOATBEAT_DATABASE"):
            if name not in env:
                self.env.pop(name, None)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )


def _goatbeat_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'goatbeat%%'"
        ).fetchall()
    return sorted(r[0] for r in rows)


@pytest.fixture
def target_dsn(postgres_server: object) -> Iterator[str]:
    dsn = create_database(postgres_server)  # type: ignore[arg-type]
    try:
        yield dsn
    finally:
        drop_database(postgres_server, dsn)  # type: ignore[arg-type]


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["--database", "GOATBEAT_DATABASE"])
def test_an_explicit_database_wins_over_the_django_project_the_app_loads(
    pg_dsn: str, target_dsn: str, how: str
) -> None:
    # proj/celery.py sets DJANGO_SETTINGS_MODULE on import, as Celery's Django guide does;
    # Django's default database (pg_dsn) is the old django-celery-beat one.
    secret = target_dsn.replace("postgres@", "postgres:s3cret@", 1)
    args = ["-m", "goatbeat", "import_celery_beat", "--from-app", "proj.celery:app"]
    if how == "--database":
        example = Example(pg_dsn)
        proc = example.run("-m", "goatbeat", "--database", secret, *args[2:])
    else:
        example = Example(pg_dsn, GOATBEAT_DATABASE=secret)
        proc = example.run(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.splitlines()[0] == "target: " + secret.replace(":s3cret@", ":***@")
    assert "s3cret" not in proc.stdout + proc.stderr
    assert _goatbeat_tables(pg_dsn) == []  # nothing written into Django's database
    store = open_store(target_dsn)
    try:
        assert {s.name for s in store.list_schedules()} >= {
            "tick-every-2s",
            "nightly-report",
            "weekday-digest",
        }
    finally:
        store.close()


@pytest.mark.postgres
def test_under_django_the_project_app_checks_table_tasks_without_a_beat_schedule(
    pg_dsn: str,
) -> None:
    example = Example(pg_dsn, EXAMPLE_BEAT_SCHEDULE="none")
    migrated = example.run("manage.py", "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    seeded = example.run("manage.py", "seed_beat_rows")
    assert seeded.returncode == 0, seeded.stderr
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            "INSERT INTO django_celery_beat_periodictask (name, task, args, kwargs, enabled, "
            "one_off, total_run_count, date_changed, description, interval_id, headers) "
            "SELECT 'typo', 'shop.recrod', '[]', '{}', true, false, 0, now(), '', interval_id, "
            "'{}' FROM django_celery_beat_periodictask WHERE name = 'admin-poll-3s'"
        )
    proc = example.run("manage.py", "goatbeat", "import_celery_beat", "--dry-run")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED  typo: task 'shop.recrod' is not registered" in proc.stdout
    assert "would create  admin-poll-3s" in proc.stdout
    assert "task names not checked" not in proc.stdout
    assert proc.stdout.splitlines()[0].startswith("target: Django database 'default' (postgresql")


# -- export_last_runs ----------------------------------------------------------------------------


def test_export_last_runs_hands_goatbeats_runs_back_to_django_celery_beat(
    db: str, tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    url = f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dcb_tables(
        url,
        [
            {
                "name": "every-10s",
                "task": "ping",
                "interval": {"every": 10, "period": "seconds"},
                "last_run_at": "2026-06-10T12:00:00+00:00",
                "total_run_count": 5,
            },
            {
                "name": "never-ran-here",
                "task": "ping",
                "interval": {"every": 1, "period": "hours"},
                "last_run_at": "2026-06-10T11:30:00+00:00",
            },
        ],
    )
    code, out = run("import_celery_beat", "--from-django-celery-beat", url, "--database", db)
    assert code == 0, out
    from datetime import UTC, datetime

    from tests.conformance.helpers import claim_all, lease

    store = open_store(db)
    try:
        claim_all(store, lease(store), datetime(2026, 6, 10, 12, 0, 31, tzinfo=UTC))
        goatbeat_last = store.get("every-10s").last_run_at
    finally:
        store.close()
    assert goatbeat_last == datetime(2026, 6, 10, 12, 0, 30, tzinfo=UTC)

    code, out = run(
        "export_last_runs", "--to-django-celery-beat", url, "--database", db, "--dry-run"
    )
    assert code == 0, out
    assert "would set  every-10s: last_run_at 2026-06-10T12:00:30Z" in out
    with closing(sqlite3.connect(tmp_path / "dcb.sqlite3")) as conn:
        marker = conn.execute("SELECT last_update FROM django_celery_beat_periodictasks").fetchall()
    code, out = run("export_last_runs", "--to-django-celery-beat", url, "--database", db)
    assert code == 0, out
    assert "set  every-10s: last_run_at 2026-06-10T12:00:30Z (was 2026-06-10T12:00:00Z)" in out
    assert "never-ran-here" not in out
    assert "check: django-celery-beat's beat must be stopped" in out
    assert "django_celery_beat_periodictasks.last_update moved to now" in out
    with closing(sqlite3.connect(tmp_path / "dcb.sqlite3")) as conn:
        (bumped,) = conn.execute("SELECT last_update FROM django_celery_beat_periodictasks")
    assert bumped[0] is not None and [bumped] != marker  # #27 item 7: the scheduler reloads
    with closing(sqlite3.connect(tmp_path / "dcb.sqlite3")) as conn:
        rows = dict(
            (name, (last, count))
            for name, last, count in conn.execute(
                "SELECT name, last_run_at, total_run_count FROM django_celery_beat_periodictask"
            )
        )
    assert rows["every-10s"][0].startswith("2026-06-10 12:00:30")
    assert rows["every-10s"][1] == 6  # celery's 5, and goatbeat's run
    assert rows["never-ran-here"][0].startswith("2026-06-10 11:30:00")
    # The re-cutover import then changes nothing: the later last run is goatbeat's own.
    code, out = run("import_celery_beat", "--from-django-celery-beat", url, "--database", db)
    assert code == 0 and "0 created, 0 updated, 0 refreshed" in out, out


def test_export_last_runs_to_json_for_stock_beat(db: str, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.conformance.helpers import claim_all, lease

    code, out = run(
        "import_celery_beat",
        "--from-app",
        "tests.compat.diff_apps:clean",
        "--database",
        db,
        "--no-check-tasks",
    )
    assert code == 0, out
    store = open_store(db)
    try:
        claim_all(store, lease(store), datetime.now(UTC) + timedelta(hours=1))
        ran = {s.name: s.last_run_at for s in store.list_schedules() if s.last_status}
    finally:
        store.close()
    assert ran  # the 10-minute interval at least
    path = tmp_path / "last-runs.json"
    code, out = run("export_last_runs", "--to-json", str(path), "--database", db)
    assert code == 0, out
    written = json.loads(path.read_text())
    assert written == {n: t.isoformat().replace("+00:00", "Z") for n, t in ran.items() if t}


def test_export_last_runs_needs_a_destination(db: str) -> None:
    code, out = run("export_last_runs", "--database", db)
    assert code == 2 and "--to-django-celery-beat" in out
