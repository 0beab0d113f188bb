"""A PostgreSQL server the chaos harness may crash and restart at will.

Not the session's shared server (``tests/services.py``): faults here restart the whole
cluster, which must not disturb other tests. One difference on purpose: ``synchronous_commit``
stays ON. The shared server turns it off for speed, which lets an immediate shutdown forget the
last few hundred milliseconds of *committed* transactions; a checker would then blame goatbeat
for what the test server's durability setting lost.
"""

from __future__ import annotations

import time

from tests.services import PostgresServer

__all__ = ["ChaosPostgres"]


class ChaosPostgres(PostgresServer):
    def __init__(self) -> None:
        super().__init__(synchronous_commit=True, max_connections=200, shared_buffers="64MB")

    def crash(self, down_for: float = 0.0) -> None:
        """Kill the server (``-m immediate``: no checkpoint, crash recovery on start), stay down
        ``down_for`` seconds, then start it again."""
        self._pg_ctl("stop", "-m", "immediate")
        if down_for > 0:
            time.sleep(down_for)
        self._pg_ctl("start")

    def stop_server(self) -> None:
        """Stop without deleting the cluster (``start_server`` brings it back)."""
        self._pg_ctl("stop", "-m", "fast")

    def start_server(self) -> None:
        self._pg_ctl("start")
