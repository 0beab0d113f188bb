"""A PostgreSQL server the chaos harness may crash and restart at will.

Not the session's shared server (``tests/services.py``): faults here restart the whole
cluster, which must not disturb other tests. Two differences on purpose:

- ``synchronous_commit`` stays ON. The shared server turns it off for speed, which lets an
  immediate shutdown forget the last few hundred milliseconds of *committed* transactions; a
  checker would then blame goatbeat for what the test server's durability setting lost.
  ``fsync`` stays off: the host never crashes, only the server processes do.
- Settings live in ``postgresql.conf``, so ``pg_ctl start`` after a crash needs no options.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.services import PostgresServer, _as_pg_user, _wait_port, free_port, pg_bin

__all__ = ["ChaosPostgres"]


class ChaosPostgres(PostgresServer):
    def __init__(self) -> None:
        super().__init__(port=free_port())
        self.root: Path | None = None

    def start(self) -> ChaosPostgres:
        root = Path(tempfile.mkdtemp(prefix="goatbeat-chaos-pg-"))
        self.root = root
        self.datadir = root / "data"
        sockdir = root / "sock"
        sockdir.mkdir()
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(sockdir, "postgres", "postgres")
        subprocess.run(
            _as_pg_user(
                [
                    pg_bin("initdb"),
                    "-D",
                    str(self.datadir),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
        )
        conf = "\n".join(
            [
                "",
                f"port = {self.port}",
                "listen_addresses = '127.0.0.1'",
                f"unix_socket_directories = '{sockdir}'",
                "fsync = off",
                "full_page_writes = off",
                "synchronous_commit = on",
                "max_connections = 200",
                "shared_buffers = 64MB",
                "",
            ]
        )
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write(conf)
        self._pg_ctl("start")
        self.started = True
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        assert self.datadir is not None and self.root is not None
        cmd = [pg_bin("pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60", *extra, action]
        if action in ("start", "restart"):
            cmd[-1:-1] = ["-l", str(self.root / "server.log")]
        subprocess.run(
            _as_pg_user(cmd), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/"
        )
        if action in ("start", "restart"):
            _wait_port(self.port, 30)

    def restart(self) -> None:
        """Clean restart (``-m fast``): every connection is terminated, nothing is lost."""
        self._pg_ctl("restart", "-m", "fast")

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

    def stop(self) -> None:
        if not self.started or self.datadir is None:
            return
        self.started = False
        subprocess.run(
            _as_pg_user(
                [pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"]
            ),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
        )
        shutil.rmtree(self.datadir.parent, ignore_errors=True)
