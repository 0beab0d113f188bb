"""``manage.py goatbeat cutover`` (#27 item 8) played live: django-celery-beat's
DatabaseScheduler runs the example project's rows on PostgreSQL with a real Celery worker; one
command checks, stops it (SIGTERM, waiting for its pidfile to go), imports its last runs,
starts ``manage.py goatbeat scheduler`` and waits for its lease. Every instant each interval
owed is counted at the worker (tests/e2e/test_cutover_live.py's ledger): none run twice, none
lost (an instant of the gap is run once or counted as missed), and the gap the command prints
is the sum of its parts and a few seconds at most."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.example_project import PROJECT, Project
from tests.e2e.test_cutover_live import (
    INTERVALS,
    Era,
    Ledger,
    check,
    drain,
    project,  # noqa: F401 - the fixture
)

pytest.importorskip("celery")
pytest.importorskip("django_celery_beat")

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]

OWN_BOUND = 3.0
"""Seconds: the gap's parts the command itself spends (stop, read, import, recheck, start),
on a loaded 2-core machine; measured 0.05 s quiet, 0.7 s under a load average of 15."""
GAP_BOUND = 20.0
"""Seconds: the whole gap, the scheduler's own start (Python, Django: ``lease``) included;
measured 1.0 s quiet, 2.7 s beside two CPU burners, 6-8 s under a load average of 15."""


def _gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie nobody reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def _stop_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM a process that is not this test's child, and wait until it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.1)


def test_one_cutover_command_hands_a_running_database_scheduler_over_live(
    project: Project,  # noqa: F811
    tmp_path: Path,
) -> None:
    project.env["EXAMPLE_BEAT_SCHEDULE"] = "none"
    worker = project.worker()
    project.run("manage.py", "migrate", "--verbosity", "0")
    project.run("manage.py", "seed_cutover_rows")
    ledger = Ledger()

    def handed() -> dict[str, datetime | None]:
        """What goatbeat takes over: celery's last runs, as its beat wrote them on the way
        out; for a row that never ran (every-20s, when celery had no time to), the change of
        the row, which the importer counts it from."""
        rows = project.sql(
            "SELECT name, coalesce(last_run_at, date_changed) FROM django_celery_beat_periodictask"
        )
        return {str(n): t for n, t in rows if n in INTERVALS}

    ledger.eras.append(Era("celery", time.time(), dict.fromkeys(INTERVALS)))
    pidfile = tmp_path / "dcb-beat.pid"
    old = project.beat(
        "dcb-1", "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--pidfile", str(pidfile)
    )
    project.wait_for("every-2s and every-3s under django-celery-beat",
                     lambda: project.count("every-2s") >= 3 and project.count("every-3s") >= 2,
                     "dcb-1", "worker")  # fmt: skip

    # --check-only: the same checks, nothing written.
    checked = project.run("manage.py", "goatbeat", "cutover", "--check-only", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "check: OK" in checked.stdout, checked.stdout
    assert project.sql("SELECT count(*) FROM goatbeat_schedule") == [(0,)]

    # The one step. The stop returns when celery beat removed its pidfile: after it wrote its
    # last runs on the way out.
    stop = f"kill -TERM {old.pid} && while [ -e {shlex.quote(str(pidfile))} ]; do sleep 0.02; done"
    log = tmp_path / "gb-1.log"
    start = (
        f"cd {shlex.quote(str(PROJECT))} && exec {shlex.quote(sys.executable)} manage.py "
        f"goatbeat scheduler >> {shlex.quote(str(log))} 2>&1"
    )
    done = project.run(
        "manage.py", "goatbeat", "cutover", "--stop-old-beat", stop, "--start-goatbeat", start,
        "--stop-timeout", "60s", "--json", check=False,
    )  # fmt: skip
    data = json.loads(done.stdout) if done.stdout.startswith("{") else {}
    scheduler = data.get("started_pid")
    try:
        assert done.returncode == 0, done.stdout + done.stderr + project.log("dcb-1")
        assert old.wait(timeout=5) == 0
        assert data["outcome"] == "handed_over", data
        gap = data["gap"]
        parts = {p["name"]: p["seconds"] for p in gap["parts"]}
        assert list(parts) == ["stop", "read", "import", "recheck", "start", "lease"]
        assert gap["seconds"] == pytest.approx(sum(parts.values()), abs=0.01)
        assert sum(v for k, v in parts.items() if k != "lease") < OWN_BOUND, gap
        assert gap["seconds"] < GAP_BOUND, gap
        ledger.eras.append(Era("goatbeat", time.time(), handed()))
        since = time.time()
        project.wait_for("every-2s under goatbeat", lambda: project.count("every-2s", since) >= 3,
                         "worker")  # fmt: skip
        assert scheduler is not None
        _stop_pid(int(scheduler))
        scheduler = None
    finally:
        if scheduler is not None:
            _stop_pid(int(scheduler))
    assert "occurrence.submitted schedule=every-2s" in log.read_text(), log.read_text()[-3000:]
    ledger.eras[-1].stop(project)
    drain(project)
    project.stop(worker)
    figures = check(project, ledger)
    print(json.dumps({"gap": data["gap"], **figures}))
