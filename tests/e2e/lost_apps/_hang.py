"""What each hanging task does: say which process runs it, then wait to be killed."""

from __future__ import annotations

import os
import time

PID_FILE_ENV = "GB_TEST_PID_FILE"


def hang() -> None:
    path = os.environ[PID_FILE_ENV]
    with open(path + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(path + ".tmp", path)  # the test reads a whole pid or nothing
    time.sleep(600)
