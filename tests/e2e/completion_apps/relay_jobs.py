"""RQ jobs for tests/e2e/test_reporter_process.py: one notes whether its work horse holds a
connection to goatbeat's PostgreSQL, one waits for the test's go-ahead."""

from __future__ import annotations

import os
import time
from pathlib import Path

PG_PORT_ENV = "GB_TEST_PG_PORT"
NOTES_ENV = "GB_TEST_NOTES"
GATE_ENV = "GB_TEST_GATE"


def database_sockets() -> int:
    """This process's TCP sockets connected to the PostgreSQL port."""
    port = f"{int(os.environ[PG_PORT_ENV]):04X}"
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[2].rsplit(":", 1)[1] == port and fields[9] in inodes:
                found += 1
    return found


def _note(text: str) -> None:
    with open(os.environ[NOTES_ENV], "a") as notes:
        notes.write(f"{text}\n")


def probe() -> None:
    _note(f"{os.getpid()} {database_sockets()}")


def gated() -> None:
    _note(str(os.getpid()))
    gate = Path(os.environ[GATE_ENV])
    deadline = time.monotonic() + 90
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
