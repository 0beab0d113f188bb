"""Rows written with SQL cannot make the scheduler run an arbitrary task (#13 item 4).

Before: anybody able to write ``goatbeat_schedule`` (or to add a schedule in the admin) could
name ``os.system`` with a shell command as its argument, and RQ's worker imported and ran it.
Now the scheduler checks every stored schedule's task against the allow-list (code schedules'
tasks, the backend's registered tasks, ``allowed_tasks``) before submitting: the others are
refused (``last_status='refused'``, out of scheduling, ``schedule.refused`` logged once) and
nothing of theirs reaches Redis. Real PostgreSQL, real RQ on the test Redis.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import psycopg
import pytest
import redis

from goatbeat.beat import Beat
from goatbeat.core.model import ExecutionStatus

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ALLOWED = "tests.integration.test_task_allow_list.allowed_by_pattern"


def cleanup() -> None:
    """A code schedule's task (trusted: the code imports it)."""


def allowed_by_pattern() -> None:
    """Named by an admin row; allowed by the ``allowed_tasks`` pattern."""


@pytest.fixture
def beat(pg_dsn: str, redis_url: str) -> Iterator[Beat]:
    app = Beat(
        pg_dsn,
        submitter="rq",
        submitter_options={"connection": redis_url},
        settings={"allowed_tasks": ["tests.integration.test_task_allow_list.allowed_*"]},
    )
    app.schedule(name="code-cleanup", task=cleanup, every="1h")
    app.migrate()
    app.publish()
    yield app
    app.close()


def _insert(dsn: str, name: str, task: str, args: list[object], source: str = "admin") -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO goatbeat_schedule (name, source, task, trigger, args, next_run_at) "
            "VALUES (%s, %s, %s, %s, %s, now() - interval '1 second')",
            (name, source, task, json.dumps({"kind": "interval", "every": 3600.0}),
             json.dumps(args)),
        )  # fmt: skip


def test_rows_written_in_sql_naming_unknown_tasks_are_refused_and_never_enqueued(
    beat: Beat, pg_dsn: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    _insert(pg_dsn, "evil-shell", "os.system", ["touch /tmp/goatbeat-pwned"])
    _insert(pg_dsn, "evil-rmtree", "shutil.rmtree", ["/"], source="code")  # posing as code
    _insert(pg_dsn, "fine", ALLOWED, [])
    with psycopg.connect(pg_dsn) as conn:  # an admin row edited behind goatbeat's back
        conn.execute(
            "UPDATE goatbeat_schedule SET task = 'subprocess.getoutput', "
            "next_run_at = now() - interval '1 second' WHERE name = 'code-cleanup'"
        )
    scheduler = beat.scheduler(lease_ttl="5s", lease_renew_interval="1s")
    try:
        results = [scheduler.run_once() for _ in range(3)]
        beat.store.request_run("evil-shell")  # asking again changes nothing
        results.append(scheduler.run_once())
    finally:
        scheduler.release()

    store = beat.store
    assert sum(r.refused_schedules for r in results) == 3
    # Not declared in code: out of scheduling. Code rows keep their next run (the code that
    # declared them publishes them again); each of their occurrences is refused.
    assert (store.get("evil-shell").last_status, store.get("evil-shell").next_run_at) == (
        "refused",
        None,
    )
    # A scheduler that allows the task schedules it again by itself (#30 item 7).
    assert store.refused_schedules() == [("evil-shell", "os.system")]
    for name in ("evil-rmtree", "code-cleanup"):
        row = store.get(name)
        assert row.last_status == "refused" and row.next_run_at is not None, name
    for name in ("evil-shell", "evil-rmtree", "code-cleanup"):
        runs = store.executions(name=name)
        assert runs and {e.status for e in runs} == {ExecutionStatus.SUBMIT_FAILED}, name
        assert all((e.error or "").startswith("refused: ") for e in runs), name
    (fine,) = store.executions(name="fine")
    assert fine.status is ExecutionStatus.SUBMITTED

    client = redis.Redis.from_url(redis_url)
    try:
        jobs = [key.decode() for key in client.scan_iter("rq:job:*")]
        assert [job.removeprefix("rq:job:") for job in jobs] == [fine.backend_task_id]
    finally:
        client.close()
    refused = [r for r in caplog.records if r.getMessage() == "schedule.refused"]
    assert sorted(r.goatbeat["schedule"] for r in refused) == [  # type: ignore[attr-defined]
        "code-cleanup",
        "evil-rmtree",
        "evil-shell",
    ]

    # The next deploy publishes the code schedule again, with its own task.
    beat.publish()
    assert store.get("code-cleanup").task.endswith(".cleanup")
