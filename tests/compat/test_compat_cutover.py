"""The drop-in scheduler at cutover: it refuses to start without a database, its submissions
can be followed in celery beat's own log, it agrees with the CLI importer, and a new dump of
stock beat's last runs after a rollback moves the phase forward (nothing runs twice)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")

from celery import Celery  # noqa: E402

from goatbeat.compat.beat import BeatRefused, Scheduler  # noqa: E402
from goatbeat.core.model import Source  # noqa: E402
from goatbeat.importers import import_entries, read_app  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402


def make_app(database: str | None, **beat: object) -> Celery:
    app = Celery("compat_cutover", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.conf.timezone = "UTC"
    if database is not None:
        app.conf.goatbeat_database = database
    app.conf.beat_schedule = beat
    return app


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOATBEAT_DATABASE", raising=False)


def test_without_a_database_beat_refuses_to_start(
    no_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app(None, ping={"task": "ping", "schedule": 1.0})
    lazy = Scheduler(app=app, lazy=True)
    assert "NOT CONFIGURED" in lazy.info
    lazy.close()
    with pytest.raises(BeatRefused, match="no database configured.*GOATBEAT_DATABASE"):
        Scheduler(app=app)
    assert list(tmp_path.iterdir()) == []  # no SQLite file appeared


APP_WITHOUT_DATABASE = """
from celery import Celery
app = Celery("nodb", broker="memory://")
app.conf.timezone = "UTC"
app.conf.beat_schedule = {"ping": {"task": "ping", "schedule": 1.0}}
"""


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ("", "no database configured"),
        (
            "app.conf.goatbeat_database = 'sqlite:///x.sqlite3'\napp.conf.goatbeat_lease_ttl = 'soon'",
            "lease_ttl: 'soon'",
        ),
    ],
    ids=["no-database", "bad-setting"],
)
def test_a_refusing_celery_beat_says_why_in_one_line_with_no_traceback(
    no_env: None, tmp_path: Path, conf: str, reason: str
) -> None:
    # #27 item 7: the refusal was the last line of a 40-line traceback celery logged for it.
    (tmp_path / "nodbapp.py").write_text(APP_WITHOUT_DATABASE + conf + "\n")
    celery = Path(sys.executable).with_name("celery")
    done = subprocess.run(
        [str(celery), "-A", "nodbapp", "beat", "-S", "goatbeat.compat:Scheduler", "-l", "INFO"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and 'File "' not in output, output
    lines = [line for line in output.splitlines() if reason in line]
    assert len(lines) == 1 and "CRITICAL" in lines[0], output
    assert not (tmp_path / "x.sqlite3").exists() or reason != "no database configured"


def test_the_environment_variable_is_a_database_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'env.sqlite3'}"
    monkeypatch.setenv("GOATBEAT_DATABASE", url)
    s = Scheduler(app=make_app(None, ping={"task": "ping", "schedule": 60}))
    s.close()
    assert (tmp_path / "env.sqlite3").exists()


@pytest.fixture
def beat_log() -> Iterator[list[str]]:
    """What celery beat's own handler prints: the message through a plain formatter."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(logging.Formatter("[%(levelname)s/%(processName)s] %(message)s"))
    root = logging.getLogger()
    gb = logging.getLogger("goatbeat")
    saved = (gb.level, list(gb.filters), list(gb.handlers), gb.propagate)
    # As in a celery beat process: goatbeat's records go to beat's (root) handler; a handler
    # another test left on the goatbeat logger would mean "configured by the project".
    gb.handlers[:] = []
    gb.propagate = True
    root.addHandler(handler)
    gb.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        gb.setLevel(saved[0])
        gb.filters[:] = saved[1]
        gb.handlers[:] = saved[2]
        gb.propagate = saved[3]


def test_each_submission_line_names_schedule_instant_and_key(
    tmp_path: Path, beat_log: list[str]
) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'gb.sqlite3'}", ping={"task": "ping", "schedule": 1.0})
    s = Scheduler(app=app, max_interval=1)
    try:
        for _ in range(60):
            s.tick()
            if any("occurrence.submitted" in line for line in beat_log):
                break
            s._gb_scheduler.clock.sleep(0.1)  # type: ignore[union-attr]
    finally:
        s.close()
    submitted = [line for line in beat_log if "occurrence.submitted" in line]
    assert submitted, beat_log
    line = submitted[0]
    assert "schedule=ping" in line
    assert "scheduled_at=20" in line and "idempotency_key=ping:20" in line
    assert " at 0x" not in line


def test_the_drop_in_and_the_importer_agree_on_celerys_default_entries(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    app = make_app(url, ping={"task": "ping", "schedule": 60})
    app.conf.result_expires = timedelta(days=1)  # and no backend expires them: cleanup needed
    Scheduler(app=app).close()
    store = open_store(url)
    try:
        assert {s.name for s in store.list_schedules()} == {"celery.backend_cleanup", "ping"}
        report = import_entries(store, read_app(app, check_tasks=False))
        assert report.created == [] and report.updated == [] and report.failed == []
        assert sorted(report.unchanged) == ["celery.backend_cleanup", "ping"]
    finally:
        store.close()


def test_a_newer_dump_after_a_rollback_moves_the_phase_forward(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    runs = tmp_path / "last-runs.json"
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    runs.write_text(f'{{"every-10m": "{first.isoformat()}"}}')
    app = make_app(url, **{"every-10m": {"task": "ping", "schedule": timedelta(minutes=10)}})
    app.conf.goatbeat_last_runs = str(runs)
    Scheduler(app=app).close()
    store = open_store(url)
    try:
        assert store.get("every-10m").next_run_at == first + timedelta(minutes=10)
        # Rolled back: stock beat ran it at first+33m (its catch-up) and first+43m; a new
        # cutover with a new dump must not run anything before first+53m.
        later = first + timedelta(minutes=43)
        runs.write_text(f'{{"every-10m": "{later.isoformat()}"}}')
        Scheduler(app=app).close()
        assert store.get("every-10m").next_run_at == later + timedelta(minutes=10)
        # A replica started with the old dump (or none) keeps it.
        runs.write_text(f'{{"every-10m": "{first.isoformat()}"}}')
        Scheduler(app=app).close()
        assert store.get("every-10m").next_run_at == later + timedelta(minutes=10)
        assert store.get("every-10m").source is Source.CELERY
    finally:
        store.close()


def test_a_newer_dump_of_stock_beat_running_late_on_goatbeats_grid_keeps_the_phase(
    tmp_path: Path,
) -> None:
    # Rolled back: stock beat ran on from goatbeat's last run, each run dated a few ms after
    # its instant. The new cutover must keep goatbeat's grid, not move it onto those dates.
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    runs = tmp_path / "last-runs.json"
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    runs.write_text(f'{{"every-10m": "{first.isoformat()}"}}')
    app = make_app(url, **{"every-10m": {"task": "ping", "schedule": timedelta(minutes=10)}})
    app.conf.goatbeat_last_runs = str(runs)
    Scheduler(app=app).close()
    store = open_store(url)
    try:
        grid = store.get("every-10m").trigger
        late = first + timedelta(minutes=20, milliseconds=7)
        runs.write_text(f'{{"every-10m": "{late.isoformat()}"}}')
        Scheduler(app=app).close()
        assert store.get("every-10m").trigger == grid
        assert store.get("every-10m").next_run_at == first + timedelta(minutes=30)
    finally:
        store.close()


def test_a_goatbeat_logger_the_project_configured_is_left_alone(
    tmp_path: Path, beat_log: list[str]
) -> None:
    gb = logging.getLogger("goatbeat")
    gb.filters[:] = []  # whatever an earlier drop-in left (beat_log restores it)
    own = logging.NullHandler()
    gb.addHandler(own)
    try:
        Scheduler(app=make_app(f"sqlite:///{tmp_path / 'gb.sqlite3'}")).close()
        assert not gb.filters
    finally:
        gb.removeHandler(own)


def test_sigterm_inside_an_iteration_waits_for_its_batch_to_be_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # celery beat stops by raising SystemExit from its SIGTERM handler wherever the main
    # thread is. One that lands between a claim and its submission left the batch claimed
    # and unsent: after a rollback nobody sends it (the live cutover test saw one).
    import os
    import signal

    from goatbeat.submitters.celery import CelerySubmitter

    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    app = make_app(url, ping={"task": "ping", "schedule": 1.0})
    beat_stops: list[int] = []

    def beats_handler(signum: int, frame: object) -> None:  # celery.apps.beat's, in short
        beat_stops.append(signum)
        raise SystemExit()

    sent: list[str] = []
    original = CelerySubmitter._send

    def send_after_a_sigterm(self: Any, producer: Any, occurrence: Any, *, direct: bool) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # handled in this thread, at the next bytecode
        result = original(self, producer, occurrence, direct=direct)
        sent.append(occurrence.idempotency_key)
        return result

    previous = signal.signal(signal.SIGTERM, beats_handler)
    try:
        scheduler = Scheduler(app=app)
        monkeypatch.setattr(CelerySubmitter, "_send", send_after_a_sigterm)
        with pytest.raises(SystemExit):
            deadline = datetime.now(UTC) + timedelta(seconds=10)
            while datetime.now(UTC) < deadline:
                time.sleep(min(scheduler.tick(), 0.2))
        assert beat_stops == [signal.SIGTERM]  # beat's own handler ran, once, after the tick
        scheduler.close()
        assert signal.getsignal(signal.SIGTERM) is beats_handler  # restored at close
    finally:
        signal.signal(signal.SIGTERM, previous)
    store = open_store(url)
    try:
        rows = store.executions(name="ping", limit=10)
        assert [e.idempotency_key for e in rows] == sent and sent
        assert {e.status.value for e in rows} == {"submitted"}
    finally:
        store.close()
