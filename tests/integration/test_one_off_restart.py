"""Time never turns valid code invalid (#30 item 4), with real processes: a one-off declared
3 s ahead fires, then the same code restarts the scheduler and runs ``schedule list``, and both
succeed. The declaration is read again by each process, as on a deploy: its instant is past by
then, and the stored one-off is ended, not an error.

Publication's rules (ended, refused, not orphaned) are unit-tested in tests/unit/test_beat.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from goatbeat.core.model import ExecutionStatus
from goatbeat.stores import open_store

ROOT = Path(__file__).resolve().parents[2]

APP = """
    import os
    from goatbeat.beat import Beat

    beat = Beat(os.environ["GB_TEST_DB"])

    def launch():
        pass

    def tick():
        pass

    beat.schedule(name="launch", task=launch, at={at!r})
    beat.schedule(name="tick", task=tick, every="1s")
"""


def _wait(predicate: object, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 90  # a guard, not an expectation
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)


def test_a_one_off_that_fired_lets_the_scheduler_restart_and_schedule_list_run(
    database: str, tmp_path: Path
) -> None:
    at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    (tmp_path / "once_app.py").write_text(textwrap.dedent(APP.format(at=at)))
    store = open_store(database)
    store.migrate()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "GB_TEST_DB": database}
    env.pop("GOATBEAT_APP", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "-m", "goatbeat", "--app", "once_app:beat"]

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*command, "scheduler"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def launched() -> bool:
        return any(e.status is ExecutionStatus.SUCCEEDED for e in store.executions(name="launch"))

    def ticks() -> int:
        return len(store.executions(name="tick", limit=1000))

    first = start()
    try:
        _wait(launched, first)
        first.send_signal(signal.SIGTERM)
        _, first_err = first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, first_err
    assert launched()
    assert datetime.now(UTC) > datetime.fromisoformat(at)

    second = start()
    try:
        before = ticks()
        _wait(lambda: ticks() >= before + 2, second)
        second.send_signal(signal.SIGTERM)
        _, second_err = second.communicate(timeout=30)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert second.returncode == 0, second_err
    assert ticks() >= before + 2  # the restarted scheduler ran the other schedules
    assert "refused" not in second_err

    listed = subprocess.run(
        [*command, "schedule", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "launch" in listed.stdout and "tick" in listed.stdout
    assert [e.status for e in store.executions(name="launch")] == [ExecutionStatus.SUCCEEDED]
    store.close()
