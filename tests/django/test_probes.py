"""``manage.py goatbeat status --check`` and ``goatbeat status --check`` (the standalone command
on the same Django project) answer a probe alike: ONE line, exit 0 healthy, 1 unhealthy, 2
cannot tell, in every case, an unreachable database included (it used to be a ~60-line
``OperationalError`` traceback and exit 1 under ``manage.py``, which a probe reads as "no
leader"). Real subprocesses against the throwaway PostgreSQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.django.conftest import ROOT, SETTINGS_MODULE, manage
from tests.services import free_port


def standalone(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The standalone ``goatbeat`` command, on the test project (DJANGO_SETTINGS_MODULE)."""
    from django.db import connection

    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
        "GOATBEAT_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **(env or {}),
    }
    full_env.pop("GOATBEAT_APP", None)
    return subprocess.run(
        [sys.executable, "-m", "goatbeat", *args],
        env=full_env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def probe_both(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the probe both ways; they must agree on the exit status and the one line."""
    via_manage = manage("goatbeat", "status", "--check", *args, env=env)
    via_goatbeat = standalone("status", "--check", *args, env=env)
    outputs = []
    for done in (via_manage, via_goatbeat):
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert len(lines) == 1, (done.args, done.returncode, done.stdout + done.stderr)
        assert "Traceback" not in lines[0]
        outputs.append(lines[0])
    assert via_manage.returncode == via_goatbeat.returncode, outputs
    # The lease's time left (and a heartbeat's age) ticks between the two runs.
    assert re.sub(r"[\d.]+s (left|ago)", r"...s \1", outputs[0]) == re.sub(
        r"[\d.]+s (left|ago)", r"...s \1", outputs[1]
    )
    return via_manage.returncode, outputs[0]


def test_unreachable_database_is_cannot_tell_in_one_line(store: Any) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    code, line = probe_both(env={"GOATBEAT_TEST_PG_DSN": closed})
    assert code == 2
    assert line.startswith("goatbeat: error: cannot read the status: postgres: connection failed")


def test_no_leader_is_unhealthy(store: Any) -> None:
    code, line = probe_both()
    assert code == 1
    assert line.startswith("goatbeat: unhealthy: ")


def test_a_leader_is_healthy(store: Any) -> None:
    grant = store.acquire_lease("scheduler", "probe-leader", timedelta(hours=1))
    assert grant is not None
    code, line = probe_both("--max-lag", "5m")
    assert code == 0
    assert line.startswith(
        f"goatbeat: ok: probe-leader holds the lease (fencing token {grant.token}, "
    )


def test_bad_option_is_cannot_tell(store: Any) -> None:
    code, line = probe_both("--max-lag", "soon")
    assert (code, line) == (
        2,
        "goatbeat: error: --max-lag: 'soon' is not a duration such as '30s', '10m' or '1h30m'",
    )


@pytest.mark.postgres
def test_database_without_the_tables_is_cannot_tell(pg_dsn: str) -> None:
    empty = {"GOATBEAT_TEST_DB_NAME": urlsplit(pg_dsn).path.lstrip("/")}
    code, line = probe_both(env=empty)
    assert code == 2
    assert line.startswith("goatbeat: error: ")
    assert "manage.py migrate" in line


def test_broken_schedules_py_is_cannot_tell_in_one_line(store: Any) -> None:
    # Django's system checks would print their multi-line report and exit 1 ("unhealthy").
    code, line = probe_both(
        env={"DJANGO_SETTINGS_MODULE": "tests.django.project.settings_broken_schedules"}
    )
    assert code == 2
    assert line.startswith("goatbeat: error: schedules.py: 4 problems to fix first: ")


def test_one_replica_is_judged_by_its_heartbeat_alike_under_both_commands(store: Any) -> None:
    """``status --check --scheduler-id ID`` (#31 item 3): a per-replica liveness probe."""
    from goatbeat.core.health import Role, SchedulerBeat

    store.heartbeat(
        SchedulerBeat(
            scheduler_id="web-2#0a1b2c3d", role=Role.STANDBY, hostname="web-2", pid=42,
            ttl=timedelta(hours=1),
        )
    )  # fmt: skip
    code, line = probe_both("--scheduler-id", "web-2")
    assert code == 0
    assert line.startswith("goatbeat: ok: scheduler 'web-2' (web-2 pid 42) is alive: standby")
    code, line = probe_both("--scheduler-id", "web-3")
    assert code == 1
    assert line.startswith("goatbeat: unhealthy: no heartbeat from scheduler 'web-3'")
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    code, line = probe_both("--scheduler-id", "web-2", env={"GOATBEAT_TEST_PG_DSN": closed})
    assert code == 2 and line.startswith("goatbeat: error: cannot read the status: ")
