"""Throwaway servers for the test suite: PostgreSQL, PgBouncer and Redis on free loopback ports.

Started once per test session (see conftest.py) and stopped at the end, even when tests fail
(fixture finalizers plus an atexit hook). Set GOATBEAT_TEST_PG_DSN / GOATBEAT_TEST_REDIS_URL to
reuse servers you already run.

PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` system
user and every server command runs through ``runuser``. PgBouncer refuses root too: it runs as
``postgres`` as well, from a temp dir of its own.
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
from typing import Any, Self
from urllib.parse import quote, unquote, urlsplit

__all__ = ["free_port", "PgBouncerServer", "PostgresServer", "RedisServer", "pg_bin"]


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
    """A PostgreSQL cluster in a temp dir. ``dsn`` connects to the ``postgres`` database.

    Settings go into ``postgresql.conf``, so a plain ``pg_ctl start`` or ``restart`` keeps them.
    ``fsync`` is off: the host never crashes, at most the server processes do. ``durable``
    turns on what production runs (``fsync``, ``full_page_writes``, ``synchronous_commit``):
    the benchmarks' headline figures are measured so.
    """

    port: int = field(default_factory=free_port)
    datadir: Path | None = None
    started: bool = False
    # Off for speed. An immediate shutdown then forgets the last committed transactions,
    # which servers that are crashed on purpose (tests/chaos/pg.py) must not do.
    synchronous_commit: bool = False
    max_connections: int = 300
    shared_buffers: str = "128MB"
    durable: bool = False

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def root(self) -> Path | None:
        """The temp dir holding the cluster, its socket dir and ``server.log``."""
        return None if self.datadir is None else self.datadir.parent

    def start(self) -> Self:
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
        conf = "\n".join(
            [
                "",
                f"port = {self.port}",
                "listen_addresses = '127.0.0.1'",
                f"unix_socket_directories = '{sockdir}'",
                f"fsync = {'on' if self.durable else 'off'}",
                f"full_page_writes = {'on' if self.durable else 'off'}",
                "synchronous_commit = "
                + ("on" if self.synchronous_commit or self.durable else "off"),
                f"max_connections = {self.max_connections}",
                f"shared_buffers = {self.shared_buffers}",
                "",
            ]
        )
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write(conf)
        self._pg_ctl("start")
        self.started = True
        atexit.register(self.stop)
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
    """A throwaway redis-server. With ``data_dir`` it keeps its data there (append-only file,
    synced on every write), so it can be stopped and started again on the same port with its
    queues intact: a broker outage, not a broker wipe."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    data_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        if self.data_dir is None:
            persistence = ["--save", "", "--appendonly", "no"]
            cwd = tempfile.gettempdir()
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            persistence = ["--save", "", "--appendonly", "yes", "--appendfsync", "always",
                           "--dir", str(self.data_dir)]  # fmt: skip
            cwd = str(self.data_dir)
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                *persistence,
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            cwd=cwd,
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


@dataclass
class PgBouncerServer:
    """Debian's ``pgbouncer`` in front of a PostgreSQL server, in ``pool_mode = transaction``.

    Every database of the server is reachable under its own name (``* =`` fallback), as the
    server's user (``postgres`` for the throwaway cluster), with ``auth_type = trust`` (the user
    must still be in the auth file), or md5 when the server wants a password. At most ``pool_size`` server connections per database, at least ``min_pool_size``,
    used round robin.
    """

    backend_port: int
    backend_host: str = "127.0.0.1"
    user: str = "postgres"
    password: str = ""
    """The server's password for ``user``, if it wants one: clients then log in with md5."""
    pool_size: int = 20
    min_pool_size: int = 3
    port: int = field(default_factory=free_port)
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def in_front_of(cls, dsn: str, **options: Any) -> PgBouncerServer:
        """A PgBouncer for the server ``dsn`` connects to, as its user."""
        parts = urlsplit(dsn)
        return cls(
            backend_port=parts.port or 5432,
            backend_host=parts.hostname or "127.0.0.1",
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
            **options,
        )

    def dsn_for(self, dbname: str) -> str:
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def pooled(self, direct_dsn: str) -> str:
        """The PgBouncer DSN of the database ``direct_dsn`` names on the server, its pool
        already holding ``min_pool_size`` server connections (PgBouncer would add them only
        after a while): from the first statement on, consecutive transactions of one client
        run on different server sessions."""
        dsn = self.dsn_for(direct_dsn.rsplit("/", 1)[1])
        import psycopg

        # Each open transaction holds a server connection of its own.
        held = [
            psycopg.connect(dsn, prepare_threshold=None)
            for _ in range(min(self.min_pool_size, self.pool_size))
        ]
        try:
            for conn in held:
                conn.execute("SELECT 1")
        finally:
            for conn in held:
                conn.rollback()  # a client gone mid-transaction takes its server connection
                conn.close()
        return dsn

    def start(self) -> Self:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.root = Path(tempfile.mkdtemp(prefix="goatbeat-pgbouncer-"))
        secret = self.password.replace('"', '""')
        (self.root / "userlist.txt").write_text(f'"{self.user}" "{secret}"\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={self.backend_host} port={self.backend_port}",
                    "",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    f"auth_type = {'md5' if self.password else 'trust'}",
                    f"auth_file = {self.root / 'userlist.txt'}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    # Several server connections, taken in turn: consecutive transactions of
                    # one client land on different sessions, so leaning on session state
                    # between them fails here as it would under load in production.
                    f"min_pool_size = {min(self.min_pool_size, self.pool_size)}",
                    "server_round_robin = 1",
                    "max_client_conn = 1000",
                    "max_db_connections = 0",
                    "server_lifetime = 3600",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {self.root / 'pgbouncer.log'}",
                    f"pidfile = {self.root / 'pgbouncer.pid'}",
                    f"admin_users = {self.user}",
                    "",
                ]
            )
        )
        as_root = os.geteuid() == 0
        if as_root:
            for path in (self.root, *self.root.iterdir()):
                shutil.chown(path, "postgres", "postgres")
        self.proc = subprocess.Popen(
            [binary, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.root,
            **({"user": "postgres", "group": "postgres", "extra_groups": []} if as_root else {}),
        )
        atexit.register(self.stop)
        try:
            _wait_port(self.port, 15)
        except RuntimeError:
            self.stop()
            raise
        return self

    def log(self) -> str:
        path = None if self.root is None else self.root / "pgbouncer.log"
        return path.read_text(errors="replace") if path and path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
