"""Throwaway servers for the test suite: PostgreSQL, PgBouncer, Redis and RabbitMQ on free
loopback ports.

Started once per test session (see conftest.py) and stopped at the end, even when tests fail
(fixture finalizers plus an atexit hook). Set GOATBEAT_TEST_PG_DSN / GOATBEAT_TEST_REDIS_URL to
reuse servers you already run (GOATBEAT_TEST_AMQP_URL for RabbitMQ: the tests that stop it or
raise its memory alarm then skip).

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

__all__ = [
    "free_port",
    "PgBouncerServer",
    "PostgresServer",
    "RabbitMQServer",
    "RedisServer",
    "pg_bin",
]


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


_RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def _rabbitmq_bin(name: str) -> str:
    # Debian's /usr/sbin/rabbitmq-server switches to the rabbitmq user (and its HOME, where
    # the Erlang cookie lives); the scripts under /usr/lib/rabbitmq/bin run as the caller.
    found = _RABBITMQ_BIN / name
    if found.exists():
        return str(found)
    raise RuntimeError(f"RabbitMQ's {name} is not installed (apt-get install rabbitmq-server)")


@dataclass
class RabbitMQServer:
    """Debian's ``rabbitmq-server`` as a node of its own: its node name, AMQP port, Erlang
    distribution port and epmd port all free loopback ports, its database, logs, config,
    plugins file and Erlang cookie (``$HOME/.erlang.cookie``, HOME being its temp dir) in one
    temp dir. ``ctl()`` runs ``rabbitmqctl`` against it with the same node name, cookie and
    epmd. Messages and durable queues survive ``stop_app``/``start_app`` (a broker outage)."""

    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    epmd_port: int = field(default_factory=free_port)
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"goatbeat{self.port}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _env(self) -> dict[str, str]:
        assert self.root is not None
        root = self.root
        return {
            **os.environ,
            "HOME": str(root),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(root / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(root / "rabbitmq.pid"),
            "RABBITMQ_ALLOW_INPUT": "",
        }

    def start(self) -> Self:
        self.root = Path(tempfile.mkdtemp(prefix="goatbeat-rabbitmq-"))
        root = self.root
        (root / "rabbitmq.conf").write_text(
            "\n".join(
                [
                    f"listeners.tcp.default = 127.0.0.1:{self.port}",
                    # A broker on a test machine's busy disk: the free-disk alarm would block
                    # publishers for reasons no test chose.
                    "disk_free_limit.absolute = 1MB",
                    "log.console = false",
                    "log.file.level = warning",
                    "",
                ]
            )
        )
        (root / "rabbitmq-env.conf").write_text("")
        (root / "enabled_plugins").write_text("[].\n")
        cookie = root / ".erlang.cookie"
        cookie.write_text(os.urandom(16).hex().upper())
        cookie.chmod(0o600)
        self.proc = subprocess.Popen(
            [_rabbitmq_bin("rabbitmq-server")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            cwd=root,
            start_new_session=True,
        )
        atexit.register(self.stop)
        try:
            # The AMQP listener opens once the node has booted: 20-30 s on a loaded 2-core
            # machine.
            deadline = time.monotonic() + 180
            while True:
                with contextlib.suppress(RuntimeError):
                    _wait_port(self.port, 1)
                    break
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"rabbitmq-server did not start: {self.log()[-2000:]}")
        except Exception:
            self.stop()
            raise
        return self

    def log(self) -> str:
        if self.root is None:
            return ""
        return "".join(
            path.read_text(errors="replace") for path in sorted((self.root / "log").glob("*.log"))
        )

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl -n NODE ARGS...``; its output. Raises if it fails."""
        done = subprocess.run(
            [_rabbitmq_bin("rabbitmqctl"), "-n", self.node, *args],
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def stop_app(self) -> None:
        """The broker goes away (connections closed, port closed); the node keeps its data."""
        self.ctl("stop_app")

    def start_app(self) -> None:
        self.ctl("start_app", timeout=120)
        _wait_port(self.port, 60)

    def memory_alarm(self, on: bool) -> None:
        """Raise (a watermark no node fits under) or clear RabbitMQ's memory alarm: while it
        is on, the broker blocks every publishing connection."""
        self.ctl("set_vm_memory_high_watermark", "0.0000001" if on else "0.4")

    def queues(self) -> list[str]:
        """The names of the queues of the default vhost."""
        out = self.ctl("list_queues", "-s", "--no-table-headers", "name")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def purge(self) -> None:
        """Delete every queue of the default vhost (and so its messages)."""
        import amqp

        names = self.queues()
        if not names:
            return
        with amqp.Connection(f"127.0.0.1:{self.port}", connect_timeout=10) as conn:
            channel = conn.channel()
            for name in names:
                channel.queue_delete(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.ctl("shutdown", timeout=30)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        self.proc = None
        if self.root is not None:
            # The node started an epmd of its own, on its own port: stop it too.
            with contextlib.suppress(Exception):
                subprocess.run(
                    ["epmd", "-port", str(self.epmd_port), "-kill"],
                    env=self._env(),
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
