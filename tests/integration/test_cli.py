"""The goatbeat command: every subcommand through click's runner, and real processes for
signals, exit codes and log output. Apps are real modules (examples.demo, or files written to
a temporary directory); databases are real SQLite files."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from goatbeat import cli as cli_module
from goatbeat.cli import cli
from goatbeat.core.instance import split_instance
from goatbeat.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
_modules = itertools.count()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/cli.db"


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "apps"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    return path


def write_app(app_dir: Path, body: str) -> str:
    """A fresh module (unique name, so nothing is cached) defining ``beat``; returns its spec."""
    name = f"gb_cli_app_{os.getpid()}_{next(_modules)}"
    (app_dir / f"{name}.py").write_text(textwrap.dedent(body))
    return f"{name}:beat"


APP = """
    from goatbeat.beat import Beat

    beat = Beat("memory://")

    def hello(who="world"):
        print(f"hello {who}")

    beat.schedule(name="hourly", task=hello, cron="0 * * * *", kwargs={"who": "cli"})
    beat.schedule(name="often", task=hello, every="5m", queue="q", description="five")
"""


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result: Result, fragment: str, code: int = 2) -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("goatbeat: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.output + result.stderr


# -- subcommands -------------------------------------------------------------------------------


def test_migrate_creates_the_schema(db, tmp_path):
    result = invoke("--database", db, "migrate")
    assert result.exit_code == 0, result.output
    assert "schema up to date" in result.output
    assert (tmp_path / "cli.db").exists()
    store = SQLiteStore(str(tmp_path / "cli.db"))
    assert store.list_schedules() == []
    store.close()


def test_schedule_list_publishes_code_schedules_then_lists_them(app_dir, db):
    spec = write_app(app_dir, APP)
    result = invoke("--app", spec, "--database", db, "schedule", "list")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.strip().splitlines()
    assert header.split()[:3] == ["NAME", "SOURCE", "TRIGGER"]
    assert [row.split()[0] for row in rows] == ["hourly", "often"]
    assert "cron 0 * * * * (UTC)" in rows[0] and "every 5m" in rows[1]


def test_schedule_list_json_has_every_field(app_dir, db):
    spec = write_app(app_dir, APP)
    result = invoke("--app", spec, "--database", db, "schedule", "list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["name"] for d in data] == ["hourly", "often"]
    often = data[1]
    assert often["queue"] == "q" and often["description"] == "five"
    assert often["trigger"] == {"kind": "interval", "every": 300.0, "anchor": None}
    assert often["source"] == "code" and often["enabled"] is True
    assert often["next_run_at"].endswith("Z")
    for key in (
        "task",
        "args",
        "kwargs",
        "misfire",
        "misfire_grace",
        "last_status",
        "missed_count",
        "total_run_count",
        "version",
        "timezone",
        "priority",
        "headers",
    ):
        assert key in often
    assert data[0]["kwargs"] == {"who": "cli"}


def test_schedule_show_prints_definition_next_fires_and_executions(app_dir, db):
    spec = write_app(app_dir, APP)
    assert invoke("--app", spec, "--database", db, "publish").exit_code == 0
    assert invoke("--app", spec, "--database", db, "schedule", "run", "often").exit_code == 0
    assert invoke("--app", spec, "--database", db, "scheduler", "--once").exit_code == 0
    result = invoke("--app", spec, "--database", db, "schedule", "show", "often", "--count", "3")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "task:" in out and "every 5m" in out and '"queue": "q"' in out
    fires = out.split("next 3 fire times:")[1].split("recent executions:")[0].split()
    assert len([f for f in fires if f.endswith("Z")]) == 3
    assert "manual" in out.split("recent executions:")[1]
    as_json = json.loads(
        invoke("--app", spec, "--database", db, "schedule", "show", "often", "--json").stdout
    )
    assert len(as_json["upcoming"]) == 5
    assert as_json["executions"][0]["kind"] == "manual"
    assert as_json["executions"][0]["status"] == "succeeded"


def test_schedule_run_is_submitted_by_the_next_scheduler_iteration(app_dir, db):
    spec = write_app(app_dir, APP)
    assert invoke("--app", spec, "--database", db, "publish").exit_code == 0
    result = invoke("--app", spec, "--database", db, "schedule", "run", "hourly")
    assert result.exit_code == 0 and "hourly:manual:" in result.output
    once = invoke("--app", spec, "--database", db, "scheduler", "--once")
    assert once.exit_code == 0, once.output
    summary = json.loads(once.stdout.strip().splitlines()[-1])
    assert summary["leader"] is True and summary["submitted"] == 1
    assert "hello cli" in once.output  # the inline submitter ran the task


def test_schedule_prune_disables_schedules_no_longer_declared(app_dir, db):
    old = write_app(app_dir, APP)
    assert invoke("--app", old, "--database", db, "schedule", "list").exit_code == 0
    new = write_app(
        app_dir,
        """
        from goatbeat.beat import Beat
        beat = Beat("memory://")
        beat.schedule(name="hourly", task="json.dumps", cron="0 * * * *", args=[1])
        """,
    )
    result = invoke("--app", new, "--database", db, "schedule", "prune")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "disabled: often"
    listed = json.loads(invoke("--app", new, "--database", db, "schedule", "list", "--json").stdout)
    assert {d["name"]: d["enabled"] for d in listed} == {"hourly": True, "often": False}
    again = invoke("--app", new, "--database", db, "schedule", "prune")
    assert again.stdout.strip() == "nothing to prune"


def test_demo_runs_the_example_app_and_prints_fires(db):
    result = invoke("--app", "examples.demo:beat", "--database", db, "demo", "--duration", "2.5")
    assert result.exit_code == 0, result.output
    assert "heartbeat-2s" in result.output
    assert "fired  heartbeat-2s" in result.output
    assert "[task] heartbeat" in result.output
    assert "stopped after" in result.output


def test_demo_ignores_a_django_project_in_the_environment(db, monkeypatch):
    # The demo leads and fires every due schedule: on a Django project's database that meant
    # its real tasks. It runs the example app instead; a settings module that cannot even be
    # imported proves the project is never loaded.
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "no_such_project.settings")
    result = invoke("--database", db, "demo", "--duration", "1.5")
    assert result.exit_code == 0, result.output
    assert "goatbeat demo: examples.demo:beat on sqlite" in result.output


@pytest.mark.postgres
def test_scheduler_before_migrate_says_to_migrate_instead_of_retrying(app_dir, pg_dsn):
    app = write_app(app_dir, APP)
    db = pg_dsn  # PostgreSQL is migrated explicitly (SQLite migrates itself on opening)
    for args in (["--once"], []):  # without --once it used to retry forever
        result = invoke("--app", app, "--database", db, "scheduler", *args)
        assert_one_line_error(result, "goatbeat's tables are missing from postgres ")
        assert "run `goatbeat migrate` first, with the same --app and --database" in result.stderr
    assert invoke("--app", app, "--database", db, "migrate").exit_code == 0
    assert invoke("--app", app, "--database", db, "scheduler", "--once").exit_code == 0


def test_app_comes_from_the_environment_when_not_given(app_dir, db, monkeypatch):
    monkeypatch.setenv("GOATBEAT_APP", write_app(app_dir, APP))
    result = invoke("--database", db, "schedule", "list", "--json")
    assert result.exit_code == 0, result.output
    assert [d["name"] for d in json.loads(result.stdout)] == ["hourly", "often"]


def test_extra_commands_load_lazily_and_missing_ones_are_hidden(app_dir, monkeypatch):
    (app_dir / "gb_cli_extra.py").write_text(
        textwrap.dedent(
            """
            import click

            @click.command("hello")
            def hello():
                click.echo("hello from a plug-in")
            """
        )
    )
    monkeypatch.setattr(
        cli_module,
        "EXTRA_COMMANDS",
        {"hello": "gb_cli_extra:hello", "ghost": "gb_no_such_module_xyz:cmd"},
    )
    listing = invoke("--help").stdout
    assert "hello" in listing and "ghost" not in listing
    assert invoke("hello").stdout.strip() == "hello from a plug-in"
    assert invoke("ghost").exit_code == 2


# -- mistakes: one line, non-zero, no traceback --------------------------------------------------


def test_unknown_app_module_is_one_line(db):
    assert_one_line_error(
        invoke("--app", "no_such_pkg_xyz.beat:beat", "--database", db, "schedule", "list"),
        "no module named 'no_such_pkg_xyz'",
    )


def test_unknown_app_attribute_is_one_line(db):
    assert_one_line_error(
        invoke("--app", "examples.demo:nope", "--database", db, "migrate"), "no attribute 'nope'"
    )


def test_unknown_schedule_is_one_line(app_dir, db):
    spec = write_app(app_dir, APP)
    for command in (["schedule", "show", "ghost"], ["schedule", "run", "ghost"]):
        assert_one_line_error(
            invoke("--app", spec, "--database", db, *command), "no schedule named 'ghost'"
        )


def test_bad_database_url_is_one_line():
    assert_one_line_error(invoke("--database", "oracle://x", "migrate"), "database:")
    assert_one_line_error(invoke("--database", "sqlite://", "migrate"), "database:")


def test_invalid_declaration_is_one_line_naming_the_field(app_dir, db):
    spec = write_app(
        app_dir,
        """
        from goatbeat.beat import Beat
        beat = Beat("memory://")
        beat.schedule(name="bad", task="json.dumps", cron="0 9 * * 8")
        """,
    )
    assert_one_line_error(invoke("--app", spec, "--database", db, "schedule", "list"), "cron")


def test_an_app_module_that_crashes_is_one_line(app_dir, db):
    spec = write_app(app_dir, "raise RuntimeError('oops in user code')\n")
    assert_one_line_error(
        invoke("--app", spec, "--database", db, "schedule", "list"), "RuntimeError: oops"
    )


def test_no_app_at_all_is_one_line(monkeypatch):
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    assert_one_line_error(invoke("schedule", "list"), "--app")


def test_invalid_scheduler_option_is_one_line(app_dir, db):
    spec = write_app(app_dir, APP)
    assert_one_line_error(
        invoke("--app", spec, "--database", db, "scheduler", "--once", "--lease-ttl", "soon"),
        "lease_ttl",
    )


def test_a_claim_ahead_out_of_range_is_one_line_naming_it(app_dir, db):
    spec = write_app(app_dir, APP)
    result = invoke("--app", spec, "--database", db, "scheduler", "--once", "--claim-ahead", "9s")
    assert_one_line_error(result, "claim_ahead: '9s' is longer than 5s")


def test_claim_ahead_zero_is_accepted_by_the_cli(app_dir, db):
    spec = write_app(app_dir, APP)
    result = invoke("--app", spec, "--database", db, "scheduler", "--once", "--claim-ahead", "0")
    assert result.exit_code == 0, result.output
    assert '"leader": true' in result.output


def test_unreachable_database_is_one_line_with_status_1():
    result = invoke("--database", "postgresql://nobody@127.0.0.1:1/none", "migrate")
    assert_one_line_error(result, "StoreError", code=1)


def test_user_error_is_a_click_exception_for_embedding_callers():
    assert issubclass(cli_module.UserError, click.ClickException)


# -- real processes ----------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GOATBEAT_APP", None)
    return subprocess.run(
        [sys.executable, "-m", "goatbeat", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_process_exit_codes_and_one_line_errors(tmp_path, db):
    ok = run_cli("--app", "examples.demo:beat", "--database", db, "schedule", "list", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "heartbeat-2s" in ok.stdout
    bad = run_cli(
        "--app", "examples.demo:beat", "--database", db, "schedule", "show", "x", cwd=tmp_path
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["goatbeat: error: schedule: no schedule named 'x'"]


def test_sigterm_stops_the_scheduler_gracefully_and_releases_the_lease(tmp_path):
    path = tmp_path / "term.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goatbeat",
            "--app",
            "examples.demo:beat",
            "--database",
            f"sqlite:///{path}",
            "--log-format",
            "json",
            "scheduler",
            "--scheduler-id",
            "term-test",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        holder = None
        while time.monotonic() < deadline and holder != "term-test":
            time.sleep(0.1)
            if path.exists():
                store = SQLiteStore(str(path))
                try:
                    lease = store.read_lease("scheduler")
                except Exception:  # the schema may not be there yet
                    lease = None
                store.close()
                holder = split_instance(lease[0])[0] if lease else None
        assert holder == "term-test"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert "scheduler.started" in names and names[-1] == "scheduler.stopped"
    assert "lease.released" in names
    assert events[-1]["released"] is True
    store = SQLiteStore(str(path))
    lease = store.read_lease("scheduler")
    store.close()
    assert lease is not None and lease[3]  # expired by the store's clock: released


def test_console_script_finds_the_app_in_the_current_directory(tmp_path):
    script = Path(sys.executable).parent / "goatbeat"
    if not script.exists():
        pytest.skip("the goatbeat console script is not installed in this environment")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GOATBEAT_APP")}
    done = subprocess.run(
        [str(script), "--app", "examples.demo:beat", "--database", f"sqlite:///{tmp_path}/d.db"]
        + ["schedule", "list", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert {d["name"] for d in json.loads(done.stdout)} == {
        "heartbeat-2s",
        "report-cron-5s",
        "flaky-7s",
    }


def test_a_broken_django_project_is_one_line(monkeypatch):
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "no_such_settings_module_xyz")
    result = run_cli("schedule", "list", cwd=ROOT)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("goatbeat: error: ")
    assert "Django" in lines[0]


BROKER_DOWN_APP = """
    from goatbeat.beat import Beat
    from goatbeat.core.errors import RetryableSubmitError
    from tests.doubles import AcceptingSubmitter

    class BrokerDown(AcceptingSubmitter):
        name = "broker-down"

        def submit(self, occurrence):
            raise RetryableSubmitError("Connection refused")

    beat = Beat("{db}", submitter=BrokerDown())
    beat.schedule(name="now", task="tasks.now", every="1h", misfire_grace="0s")
"""


def test_max_submit_retries_is_a_scheduler_option(app_dir, db):
    spec = write_app(app_dir, BROKER_DOWN_APP.replace("{db}", db))
    assert invoke("--app", spec, "publish").exit_code == 0  # `schedule run` never publishes
    assert invoke("--app", spec, "schedule", "run", "now").exit_code == 0
    # The manual run's grace (0 s) is over: the retries left decide.
    result = invoke("--app", spec, "scheduler", "--once", "--max-submit-retries", "0")
    assert result.exit_code == 0, result.output
    assert '"failed": 1' in result.output and '"missed": 1' in result.output
    assert invoke("--app", spec, "schedule", "run", "now").exit_code == 0
    result = invoke("--app", spec, "scheduler", "--once", "--max-submit-retries", "3")
    assert '"retrying": 1' in result.output and '"failed"' not in result.output


def test_an_invalid_max_submit_retries_is_one_line_naming_it(app_dir, db):
    spec = write_app(app_dir, APP)
    result = invoke(
        "--app", spec, "--database", db, "scheduler", "--once", "--max-submit-retries", "-1"
    )
    assert_one_line_error(result, "max_submit_retries: -1 is out of range 0..1000")


GC_APP = """
    import gc

    from goatbeat.beat import Beat

    beat = Beat("memory://")
    beat.schedule(name="often", task="os.getcwd", every="5m")
    COLLECTING_WHILE_LOADED = gc.isenabled()
"""


def test_the_scheduler_pauses_the_garbage_collector_only_while_it_loads_and_publishes(app_dir, db):
    import gc
    import importlib

    spec = write_app(app_dir, GC_APP)
    assert gc.isenabled()
    once = invoke("--app", spec, "--database", db, "scheduler", "--once")
    assert once.exit_code == 0, once.output
    assert json.loads(once.stdout.strip().splitlines()[-1])["leader"] is True
    assert importlib.import_module(spec.split(":")[0]).COLLECTING_WHILE_LOADED is False
    assert gc.isenabled()  # on again, as it was

    failed = invoke("--app", spec, "--database", db, "scheduler", "--once", "--lease-ttl", "x")
    assert failed.exit_code != 0 and gc.isenabled()


RELEASE_APP = """
    import gc
    import os
    import signal

    from goatbeat.beat import Beat


    class RecordingBeat(Beat):
        seen = []
        frozen = []

        def release_declarations(self):
            RecordingBeat.seen.append((len(self.schedules), gc.isenabled()))
            super().release_declarations()
            os.kill(os.getpid(), signal.SIGTERM)  # the test is over: stop the loop

        def close(self):
            # Still inside the loop's lifetime: what start-up left alive is frozen.
            RecordingBeat.frozen.append(gc.get_freeze_count())
            super().close()


    beat = RecordingBeat("memory://")
    beat.schedule(name="often", task="os.getcwd", every="5m")
"""


def test_the_scheduler_lets_go_of_its_declarations_after_its_first_iteration(app_dir, db):
    import gc
    import importlib

    spec = write_app(app_dir, RELEASE_APP)
    result = invoke("--app", spec, "--database", db, "scheduler", "--scheduler-id", "s1")
    assert result.exit_code == 0, result.output
    module = importlib.import_module(spec.split(":")[0])
    assert module.RecordingBeat.seen == [(1, False)]  # once, the collector still paused
    assert gc.isenabled()
    # After its first iteration the loop ran with start-up's objects frozen; unfrozen when
    # the command ends.
    assert module.RecordingBeat.frozen and module.RecordingBeat.frozen[0] > 0
    assert gc.get_freeze_count() == 0
    store = SQLiteStore(db.removeprefix("sqlite:///"))
    try:
        assert store.get("often").name == "often"  # published before
    finally:
        store.close()


PREPARE_APP = """
    import threading

    from goatbeat.beat import Beat


    class Preparing:
        name = "preparing"
        supports_queue = supports_priority = supports_exchange = True
        supports_expires = supports_headers = True
        prepared = []
        published_first = []

        def validate(self, schedule):
            return None

        def prepare(self):
            # Called from its own thread, before the loop's first submission.
            Preparing.prepared.append(threading.current_thread().name)

        def submit(self, occurrence):
            return occurrence.idempotency_key

        def close(self):
            return None


    class RecordingBeat(Beat):
        def publish_at_start(self):
            Preparing.published_first.append(list(Preparing.prepared))
            return super().publish_at_start()


    beat = RecordingBeat("memory://", submitter=Preparing())
    beat.schedule(name="often", task="os.getcwd", every="5m")
"""


def test_the_scheduler_lets_its_submitter_prepare_while_it_publishes(app_dir, db):
    import importlib
    import time

    spec = write_app(app_dir, PREPARE_APP)
    result = invoke("--app", spec, "--database", db, "scheduler", "--once")
    assert result.exit_code == 0, result.output
    module = importlib.import_module(spec.split(":")[0])
    deadline = time.monotonic() + 5
    while not module.Preparing.prepared and time.monotonic() < deadline:
        time.sleep(0.01)
    assert module.Preparing.prepared == ["goatbeat-prepare"]
    assert len(module.Preparing.published_first) == 1
