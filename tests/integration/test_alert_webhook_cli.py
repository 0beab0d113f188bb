"""#32 item 3 through the real command: ``goatbeat scheduler --once`` raises a ``missed`` alert
and POSTs it to an ``alert_webhook`` holding a Slack-style secret path and ``user:password@``.
The POST arrives at a real HTTP server on loopback with HTTP basic authentication, and the
command's log output (text and JSON) holds no part of the secret; a webhook that answers 500
is logged ``alert.failed`` at ERROR, the same way. Before, the password made the host
unresolvable (nothing delivered) and the full URL was logged at ERROR."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hook_server import Hook, serving

REPO = Path(__file__).resolve().parents[2]
SECRET_PATH = "/services/T0SECRET/B0SECRET/xoxb-s3cr3t-t0ken"
PASSWORD = "pw-s3cr3t"

SETUP = """
from datetime import UTC, datetime, timedelta
from goatbeat.core.model import MisfirePolicy, Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import open_store

store = open_store({db!r})
store.migrate()
# Due 4 hours ago, every hour, skip: the first claim drops 3 runs (a "missed" alert).
store.publish([Schedule(name="nightly", task="tests.bartasks.touch", args=({marker!r},),
                        trigger=IntervalTrigger("1h"), misfire=MisfirePolicy.SKIP,
                        last_run_at=datetime.now(UTC) - timedelta(hours=4, minutes=1))],
              source=Source.CODE)
store.close()
"""

APP = """
from goatbeat.beat import Beat
beat = Beat({db!r}, settings={{"alert_webhook": {url!r}, "allowed_tasks": ["tests.bartasks.*"],
                               "scheduler_id": "hooked"}})
"""


@pytest.fixture
def port() -> Iterator[int]:
    with serving() as port:
        yield port


def _scheduler_once(tmp_path: Path, port: int, log_format: str) -> str:
    db = f"sqlite:///{tmp_path / 'gb.db'}"
    url = f"http://alerts:{PASSWORD}@127.0.0.1:{port}{SECRET_PATH}"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    for name in ("GOATBEAT_APP", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    setup = SETUP.format(db=db, marker=str(tmp_path / "ran"))
    subprocess.run([sys.executable, "-c", setup], env=env, check=True, timeout=60)
    (tmp_path / "gb_hook_app.py").write_text(APP.format(db=db, url=url))
    done = subprocess.run(
        [sys.executable, "-m", "goatbeat", "--app", "gb_hook_app:beat", "--log-format",
         log_format, "scheduler", "--once", "--no-publish"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def _no_secret_in(output: str) -> None:
    for secret in ("T0SECRET", "B0SECRET", "xoxb", PASSWORD, "/services"):
        assert secret not in output, output


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_alert_is_posted_with_basic_auth_and_the_log_shows_no_secret(
    tmp_path: Path, port: int, log_format: str
) -> None:
    output = _scheduler_once(tmp_path, port, log_format)
    (request,) = Hook.requests
    assert request["path"] == SECRET_PATH
    assert (
        request["authorization"]
        == "Basic " + base64.b64encode(f"alerts:{PASSWORD}".encode()).decode()
    )
    assert (request["body"]["kind"], request["body"]["schedule"]) == ("missed", "nightly")
    assert "alert.sent" in output and "alert.failed" not in output
    assert f"http://***@127.0.0.1:{port}/***" in output
    _no_secret_in(output)


def test_a_webhook_that_fails_is_logged_at_error_without_its_secret(
    tmp_path: Path, port: int
) -> None:
    Hook.status = 500
    output = _scheduler_once(tmp_path, port, "json")
    assert len(Hook.requests) == 1
    failed = [
        json.loads(line)
        for line in output.splitlines()
        if line.startswith("{") and json.loads(line).get("event") == "alert.failed"
    ]
    assert len(failed) == 1 and failed[0]["level"] == "ERROR", output
    assert failed[0]["error"] == f"OSError: http://***@127.0.0.1:{port}/*** answered 500"
    _no_secret_in(output)
