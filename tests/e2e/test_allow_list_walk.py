"""#32 end to end: an ``allowed_tasks`` pattern cannot be walked past, through the real
``goatbeat`` command and a real RQ worker.

Before: with ``allowed_tasks = ["tests.bartasks.*"]`` and ``import os`` in that module,
``goatbeat schedule add evil --task tests.bartasks.os.system`` was accepted, and a row naming
it (an admin form, an API client, a restore, SQL) ran ``os.system`` — inline in the scheduler,
or in the RQ worker, which walks the dotted path the same way. Now the command refuses it in
one line, and the scheduler refuses the row at claim time: nothing of it reaches the backend,
while the module's own task runs. Every process here is a real one (``python -m goatbeat``,
``python -m rq.cli worker``) on the test PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import redis

from goatbeat.core.model import ExecutionStatus
from goatbeat.stores.postgres import PostgresStore
from tests.e2e.workers import REPO, StartWorker, wait_for_runs

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

PATTERN = "tests.bartasks.*"
# (task, what the refusal says it resolves to): an import, a class attribute set to an import,
# a submodule's import, a re-export, an imported class, a partial, an object with __call__.
WALKS = [
    ("tests.bartasks.os.system", "resolves to posix.system"),
    ("tests.bartasks.Report.shell", "resolves to posix.system"),
    ("tests.bartasks.jobs.shutil.rmtree", "resolves to shutil.rmtree"),
    ("tests.bartasks.send_report", "resolves to tests.bartasks.jobs.send_report"),
    ("tests.bartasks.popen", "resolves to subprocess.Popen"),
    ("tests.bartasks.partial_shell", "a partial object has no __qualname__"),
    ("tests.bartasks.caller", "a Caller object has no __qualname__"),
]


def _app(tmp_path: Path, dsn: str, backend: str, redis_url: str | None = None) -> str:
    options = "" if redis_url is None else f", submitter_options={{'connection': {redis_url!r}}}"
    (tmp_path / "gb_walk_app.py").write_text(
        "from goatbeat.beat import Beat\n"
        f"beat = Beat({dsn!r}, submitter={backend!r}{options},\n"
        f"            settings={{'allowed_tasks': [{PATTERN!r}], 'scheduler_id': 'walk'}})\n"
    )
    return "gb_walk_app:beat"


def goatbeat(tmp_path: Path, app: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    env.pop("GOATBEAT_APP", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "goatbeat", "--app", app, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _refused_in_one_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("goatbeat: error: task: ") and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _insert(dsn: str, name: str, task: str, args: list[object]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO goatbeat_schedule (name, source, task, trigger, args, next_run_at) "
            "VALUES (%s, 'admin', %s, %s, %s, now() - interval '1 second')",
            (name, task, json.dumps({"kind": "interval", "every": 3600.0}), json.dumps(args)),
        )


def _rows_written_with_sql(dsn: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """Rows naming every walk, each of which would leave a trace; and one of the module's own
    task. Returns (the file a walk would create, the directory one would remove, the file the
    allowed task creates)."""
    pwned, keep, fine = tmp_path / "pwned", tmp_path / "keep", tmp_path / "fine"
    keep.mkdir()
    for i, (task, _) in enumerate(WALKS):
        if "rmtree" in task:
            args: list[object] = [str(keep)]
        elif "popen" in task:
            args = [["touch", str(pwned)]]
        elif task.endswith(("send_report", "caller")):
            args = [str(pwned)]  # the module's own code, reached by a name it does not define
        else:
            args = [f"touch {pwned}"]
        _insert(dsn, f"walk-{i}", task, args)
    _insert(dsn, "fine", "tests.bartasks.touch", [str(fine)])
    return pwned, keep, fine


def _check_refusals(dsn: str) -> None:
    store = PostgresStore(dsn)
    try:
        for i, (task, why) in enumerate(WALKS):
            row = store.get(f"walk-{i}")
            assert (row.last_status, row.next_run_at) == ("refused", None), task
            (run,) = store.executions(name=f"walk-{i}")
            assert run.status is ExecutionStatus.SUBMIT_FAILED, task
            assert run.error is not None and why in run.error, run.error
        (fine,) = store.executions(name="fine")
        assert fine.status in (ExecutionStatus.SUBMITTED, ExecutionStatus.SUCCEEDED)
    finally:
        store.close()


def test_schedule_add_and_edit_refuse_a_walked_task_in_one_line(
    pg_dsn: str, tmp_path: Path
) -> None:
    app = _app(tmp_path, pg_dsn, "inline")
    assert goatbeat(tmp_path, app, "migrate").returncode == 0
    pwned = tmp_path / "pwned"
    for task, why in WALKS:
        added = goatbeat(
            tmp_path, app, "schedule", "add", "evil", "--task", task, "--every", "1h",
            "--args", json.dumps([f"touch {pwned}"]),
        )  # fmt: skip
        _refused_in_one_line(added, f"{task!r} matches allowed_tasks, but", why)

    fine = goatbeat(tmp_path, app, "schedule", "add", "fine", "--task", "tests.bartasks.touch",
                    "--every", "1h", "--args", json.dumps([str(tmp_path / "fine")]))  # fmt: skip
    assert fine.returncode == 0, fine.stderr
    edited = goatbeat(tmp_path, app, "schedule", "edit", "fine", "--task",
                      "tests.bartasks.os.system")  # fmt: skip
    _refused_in_one_line(edited, "resolves to posix.system")
    store = PostgresStore(pg_dsn)
    try:
        assert [s.name for s in store.list_schedules()] == ["fine"]
        assert store.get("fine").task == "tests.bartasks.touch"
    finally:
        store.close()
    assert not pwned.exists()


def test_the_inline_scheduler_refuses_walked_rows_written_with_sql(
    pg_dsn: str, tmp_path: Path
) -> None:
    app = _app(tmp_path, pg_dsn, "inline")
    assert goatbeat(tmp_path, app, "migrate").returncode == 0
    pwned, keep, fine = _rows_written_with_sql(pg_dsn, tmp_path)

    ran = goatbeat(tmp_path, app, "scheduler", "--once", "--no-publish")
    assert ran.returncode == 0, ran.stderr

    assert fine.exists()  # the module's own task ran, in the scheduler's process
    assert not pwned.exists() and keep.is_dir()
    _check_refusals(pg_dsn)
    assert ran.stderr.count("schedule.refused") == len(WALKS), ran.stderr


@pytest.mark.redis
def test_a_real_rq_worker_never_gets_a_walked_row_written_with_sql(
    pg_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    app = _app(tmp_path, pg_dsn, "rq", redis_url)
    assert goatbeat(tmp_path, app, "migrate").returncode == 0
    pwned, keep, fine = _rows_written_with_sql(pg_dsn, tmp_path)

    ran = goatbeat(tmp_path, app, "scheduler", "--once", "--no-publish")
    assert ran.returncode == 0, ran.stderr
    client = redis.Redis.from_url(redis_url)
    try:
        jobs = [key.decode() for key in client.scan_iter("rq:job:*")]
    finally:
        client.close()

    # The worker drains the queue and exits (--burst): it runs whatever it was given.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
    }
    worker = subprocess.run(
        [sys.executable, "-m", "rq.cli", "worker", "--url", redis_url, "--burst", "default"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stdout + worker.stderr
    deadline = time.monotonic() + 10  # the job's side effect is written before the exit
    while not fine.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fine.exists(), worker.stdout + worker.stderr
    assert not pwned.exists() and keep.is_dir()
    assert len(jobs) == 1, jobs  # the module's own task only
    _check_refusals(pg_dsn)


@pytest.mark.redis
def test_a_celery_name_is_only_a_name_the_real_worker_never_walks(
    pg_dsn: str, redis_url: str, tmp_path: Path, start_worker: StartWorker
) -> None:
    # Celery's worker finds a task by its registered name: "tests.bartasks.os.system" is
    # allowed by the pattern as a name (nothing is imported to decide) and sent, and the
    # worker discards it as unregistered. Its registered task runs.
    from goatbeat.beat import Beat
    from goatbeat.submitters.celery import CelerySubmitter

    beat = Beat(
        pg_dsn, submitter=CelerySubmitter(redis_url), settings={"allowed_tasks": ["tests.*"]}
    )
    pwned = tmp_path / "pwned"
    try:
        beat.migrate()
        _insert(pg_dsn, "walk", "tests.bartasks.os.system", [f"touch {pwned}"])
        _insert(pg_dsn, "registered", "tests.e2e.backend_apps.celery_app.record_run", ["ok"])
        scheduler = beat.scheduler(lease_ttl="5s", lease_renew_interval="1s")
        try:
            result = scheduler.run_once()
        finally:
            scheduler.release()
        assert result.refused_schedules == 0  # a name, checked as one
    finally:
        beat.close()
    worker = start_worker(
        "celery", "celery", "-A", "tests.e2e.backend_apps.celery_app", "worker", "--pool=solo",
        "-c", "1", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
    )  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    try:
        runs = wait_for_runs(client, "celery", 1, [worker])
    finally:
        client.close()
    assert [run["args"] for run in runs] == [["ok"]]
    deadline = time.monotonic() + 30
    while "unregistered task" not in worker.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Received unregistered task of type 'tests.bartasks.os.system'" in worker.output()
    assert not pwned.exists()
