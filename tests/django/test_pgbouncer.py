"""The Django app behind PgBouncer (transaction pooling): settings, and ``manage.py goatbeat``
as real subprocesses whose ``default`` database is PgBouncer
(tests/django/project/settings_pgbouncer.py).

The test database is the one pytest-django made on PostgreSQL; the subprocesses reach it
through PgBouncer under the same name, and LISTEN on the ``direct`` alias (or poll).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from goatbeat.core.model import ExecutionKind, ExecutionStatus
from goatbeat.django import conf
from tests.django.conftest import ROOT, manage

pytestmark = [pytest.mark.pgbouncer]

PGBOUNCER_SETTINGS = "tests.django.project.settings_pgbouncer"


@pytest.fixture
def direct_alias(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A ``direct`` alias next to ``default`` (same server); ``default`` is what the test makes
    it. Django's connection handler reads the same DATABASES dict."""
    from django.conf import settings

    monkeypatch.setitem(settings.DATABASES, "direct", dict(settings.DATABASES["default"]))

    def default(**options: Any) -> None:
        for key, value in options.items():
            monkeypatch.setitem(settings.DATABASES["default"], key, value)

    return default


def test_disable_server_side_cursors_makes_the_alias_pooled_unless_goatbeat_says_otherwise(
    direct_alias: Any,
) -> None:
    assert conf.load({}).core.pooled is False
    direct_alias(DISABLE_SERVER_SIDE_CURSORS=True)
    assert conf.load({}).core.pooled is True
    assert conf.load({"pooled": False}).core.pooled is False
    assert conf.load({"listen_database": "direct"}).core.listen_database == "direct"


def test_listen_database_takes_an_alias_or_a_url_and_names_the_problem(
    direct_alias: Any,
) -> None:
    parsed = conf.load({"listen_database": "postgresql://postgres@127.0.0.1/x"})
    assert parsed.core.pooled is True  # a listen database implies a pooled one
    assert conf.load({"listen_database": "direct"}).core.pooled is True
    for value, words in (
        ("nowhere", ["listen_database", "'nowhere'", "not a DATABASES alias"]),
        ("legacy", ["listen_database", "'legacy'", "sqlite3"]),
        ("default", ["listen_database", "'default'", "pooled database itself"]),
        ("mysql://h/db", ["listen_database", "'mysql://h/db'", "postgresql://"]),
        (42, ["listen_database", "42"]),
    ):
        with pytest.raises(ImproperlyConfigured) as caught:
            conf.load({"listen_database": value})
        message = str(caught.value)
        assert all(word in message for word in words), message


def test_a_pooled_alias_that_would_leave_session_state_is_refused(
    direct_alias: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.conf import settings

    direct_alias(DISABLE_SERVER_SIDE_CURSORS=True)
    options = dict(settings.DATABASES["default"].get("OPTIONS", {}))
    monkeypatch.setitem(
        settings.DATABASES["default"],
        "OPTIONS",
        {**options, "prepare_threshold": 5, "assume_role": "reporter"},
    )
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({})
    message = str(caught.value)
    assert "prepare_threshold'] is 5" in message and "assume_role'] is 'reporter'" in message
    assert conf.load({"pooled": False}).core.pooled is False  # not pooled: none of our business


def _listening_apps(dbname: str) -> list[str]:
    """application_name of the sessions of ``dbname`` whose last statement was a LISTEN."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("context", None)
    params.pop("cursor_factory", None)
    params["dbname"] = dbname
    with psycopg.connect(**params, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE datname = %s AND query LIKE 'LISTEN goatbeat%%'",
            [dbname],
        ).fetchall()
    return sorted(str(r[0]) for r in rows)


def _pgbouncer_env(pgbouncer_server: Any, **extra: str) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": PGBOUNCER_SETTINGS,
        "GOATBEAT_TEST_PGBOUNCER_PORT": str(pgbouncer_server.port),
        **extra,
    }


def test_manage_py_schedule_list_and_scheduler_once_through_pgbouncer(
    store: Any, pgbouncer_server: Any
) -> None:
    env = _pgbouncer_env(pgbouncer_server)
    listed = manage("goatbeat", "schedule", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert {row["name"] for row in json.loads(listed.stdout)} >= {"daily-report", "ping"}
    asked = manage("goatbeat", "schedule", "run", "ping", env=env)
    assert asked.returncode == 0, asked.stderr
    once = manage("goatbeat", "scheduler", "--once", env=env)
    assert once.returncode == 0, once.stderr
    assert json.loads(once.stdout.strip().splitlines()[-1])["leader"] is True
    # Only the requested run: a scheduled one may fall due meanwhile (ping runs every 5 min).
    (execution,) = [e for e in store.executions(name="ping") if e.kind is ExecutionKind.MANUAL]
    assert execution.status is ExecutionStatus.SUBMITTED


@pytest.mark.slow
@pytest.mark.parametrize("poll", [False, True], ids=["listen_database", "polling"])
def test_a_running_manage_py_scheduler_through_pgbouncer_runs_a_requested_run(
    store: Any, pgbouncer_server: Any, poll: bool, tmp_path: Path
) -> None:
    from django.db import connection

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **_pgbouncer_env(pgbouncer_server, **({"GOATBEAT_TEST_POLL": "1"} if poll else {})),
    }
    log = tmp_path / "scheduler.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/django/project/manage.py"), "goatbeat", "-v",
             "2", "scheduler"],
            env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=out, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while store.read_lease("scheduler") is None or store.read_lease("scheduler")[3]:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the scheduler never took the lease"
            time.sleep(0.1)
        # LISTEN runs on the direct alias (its application_name says so), never through
        # PgBouncer, whose server sessions would carry the query text too.
        assert _listening_apps(connection.settings_dict["NAME"]) == ([] if poll else ["direct"])
        asked = manage("goatbeat", "schedule", "run", "ping", env=_pgbouncer_env(pgbouncer_server))
        assert asked.returncode == 0, asked.stderr
        while not [
            e
            for e in store.executions(name="ping")
            if e.kind is ExecutionKind.MANUAL and e.status is ExecutionStatus.SUBMITTED
        ]:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the requested run was never submitted"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    stderr = log.read_text()
    assert proc.returncode == 0, stderr
    events = [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]
    assert ("store.polling" in events) is poll, stderr[-3000:]


def test_manage_py_refuses_listen_database_and_pooled_options(store: Any) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    for args in (["--listen-database", "postgresql://h/db"], ["--pooled"]):
        with pytest.raises(CommandError, match="GOATBEAT\\['listen_database'\\]"):
            call_command(
                "goatbeat", *args, "schedule", "list", stdout=StringIO(), stderr=StringIO()
            )
