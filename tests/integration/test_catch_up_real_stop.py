"""``catch_up_limit`` caps a catch-up after a real stop of the ``goatbeat scheduler`` process.

A per-second schedule with a 10-minute grace and ``catch_up_limit=3``; the scheduler is frozen
(SIGSTOP) for six real seconds, so at least six instants are owed when it wakes, all within the
grace. It claims exactly the latest three in one transaction and counts the rest as missed.
(The FakeClock version of the 3-minute stop, policies and failover: tests/unit/test_catch_up_limit.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from goatbeat.core.model import Schedule
from goatbeat.stores import open_store

ROOT = Path(__file__).resolve().parents[2]

APP = """
    import os
    from goatbeat.beat import Beat

    beat = Beat(os.environ["GB_TEST_DB"])

    def tick():
        pass

    beat.schedule(name="tick", task=tick, every="1s", misfire_grace="10m", catch_up_limit=3)
"""


@pytest.mark.postgres
def test_a_frozen_scheduler_catches_up_at_most_catch_up_limit(pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "limit_app.py").write_text(textwrap.dedent(APP))
    store = open_store(pg_dsn)
    store.migrate()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "GB_TEST_DB": pg_dsn}
    env.pop("GOATBEAT_APP", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "goatbeat", "--app", "limit_app:beat", "scheduler"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def runs() -> int:
        return len(store.executions(name="tick", limit=1000))

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60  # a guard, not an expectation
        while runs() < count and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)

    try:
        wait_for(2)
        before = runs()
        proc.send_signal(signal.SIGSTOP)
        time.sleep(6)  # the outage: six owed instants at least, every one within the grace
        proc.send_signal(signal.SIGCONT)
        wait_for(before + 3 + 2)  # the catch-up, then two ordinary runs
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    executions = store.executions(name="tick", limit=1000)
    per_claim = Counter(e.claimed_at for e in executions)
    assert max(per_claim.values()) == 3  # the catch-up: capped, and nothing claimed beyond it
    tick = store.get("tick")
    store.close()
    assert isinstance(tick, Schedule)
    # At least five owed (one may have been claimed ahead, claim_ahead < 1 s), three claimed.
    assert tick.missed_count >= 2 and tick.total_run_count == len(executions)
