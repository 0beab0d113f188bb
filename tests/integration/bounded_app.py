"""The app of tests/integration/test_bounded_waits.py: three schedules every second, sent to
Celery on the Redis named by ``GB_BROKER`` or recorded to ``GB_RECORD_FILE`` (one line per
submission: key, scheduler id, host monotonic time).

With ``GB_HANG_HOST`` set, ``socket.getaddrinfo`` of that name blocks while the file
``GB_HANG_FILE`` exists, then answers for 127.0.0.1: a DNS resolver that stopped answering,
as psycopg and redis-py both resolve through it.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, ClassVar

from goatbeat.beat import Beat
from goatbeat.core.model import Occurrence
from tests.doubles import AcceptingSubmitter

_HANG_HOST = os.environ.get("GB_HANG_HOST")
_HANG_FILE = os.environ.get("GB_HANG_FILE", "")
_real_getaddrinfo = socket.getaddrinfo


def _hanging_getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    if host == _HANG_HOST:
        while os.path.exists(_HANG_FILE):
            time.sleep(0.05)
        host = "127.0.0.1"
    return _real_getaddrinfo(host, port, *args, **kwargs)


if _HANG_HOST:
    socket.getaddrinfo = _hanging_getaddrinfo


class RecordingSubmitter(AcceptingSubmitter):
    name: ClassVar[str] = "bounded-recording"

    def submit(self, occurrence: Occurrence) -> str | None:
        sid = os.environ.get("GB_SCHEDULER_ID", "?")
        line = f"{occurrence.idempotency_key} {sid} {time.monotonic():.6f}\n".encode()
        fd = os.open(os.environ["GB_RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return occurrence.idempotency_key


_broker = os.environ.get("GB_BROKER")
if _broker:
    beat = Beat("memory://", submitter="celery", submitter_options={"app": _broker})
else:
    beat = Beat("memory://", submitter=RecordingSubmitter())
for _i in range(int(os.environ.get("GB_SCHEDULES", "3"))):
    beat.schedule(name=f"tick-{_i}", task="bounded.tick", every="1s", args=[_i])
