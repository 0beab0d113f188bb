"""The e2e worker fixture's clean-up: a worker that exited leaves nothing of its session behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.workers import stop

# The leader starts a child in its session that outlives it, as an RQ work horse outlives its
# killed main process, writes the child's pid, and exits.
_LEADER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for every purpose here (init reaps it soon).
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def test_stopping_an_exited_worker_ends_what_it_left_in_its_session() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", _LEADER], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    with leader.stdout:
        child = int(leader.stdout.readline())
    leader.wait(30)
    assert _alive(child)
    try:
        stop(leader)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
