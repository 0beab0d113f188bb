"""Throwaway servers for the test suite: PostgreSQL and Redis on free loopback ports.

Started once per test session (see conftest.py) and stopped at the end, even when tests fail
(fixture finalizers plus an atexit hook). Set GOATBEAT_TEST_PG_DSN / GOATBEAT_TEST_REDIS_URL to
reuse servers you already run.

PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` system
user and every server command runs through ``runuser``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["free_port", "PostgresServer", "RedisServer", "pg_bin"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")


def _as_pg_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@dataclass
class PostgresServer:
    """A PostgreSQL cluster in a temp dir. ``dsn`` connects to the ``postgres`` database."""

    port: int = field(default_factory=free_port)
    datadir: Path | None = None
    started: bool = False

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> PostgresServer:
        root = Path(tempfile.mkdtemp(prefix="goatbeat-pg-"))
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
        opts = (
            f"-p {self.port} -k {sockdir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300 "
            "-c shared_buffers=128MB"
        )
        subprocess.run(
            _as_pg_user(
                [
                    pg_bin("pg_ctl"),
                    "-D",
                    str(self.datadir),
                    "-o",
                    opts,
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            cwd="/",
        )
        self.started = True
        atexit.register(self.stop)
        _wait_port(self.port, 30)
        return self

    def restart(self) -> None:
        """Restart the server in place (fault-injection tests)."""
        assert self.datadir is not None
        subprocess.run(
            _as_pg_user([pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "restart"]),
            check=True,
            stdout=subprocess.DEVNULL,
            cwd="/",
        )
        _wait_port(self.port, 30)

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


@dataclass
class RedisServer:
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            cwd=tempfile.gettempdir(),
        )
        atexit.register(self.stop)
        _wait_port(self.port, 15)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None
