"""A PostgreSQL server the chaos harness may crash and restart at will.

Not the session's shared server (``tests/services.py``): faults here restart the whole
cluster, which must not disturb other tests. One difference on purpose: ``synchronous_commit``
stays ON. The shared server turns it off for speed, which lets an immediate shutdown forget the
last few hundred milliseconds of *committed* transactions; a checker would then blame goatbeat
for what the test server's durability setting lost.
"""

from __future__ import annotations

import subprocess
import time

from tests.services import PostgresServer

__all__ = ["ChaosPostgres", "StandbyPostgres", "crash_host", "server_pids", "set_synchronous"]


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


class StandbyPostgres(ChaosPostgres):
    """A streaming standby of ``primary``: ``pg_basebackup -R`` as the postgres user into a
    temp dir of its own, on a free loopback port, started. ``synchronous``: the primary waits
    for it at every commit (``synchronous_standby_names`` naming it, ``synchronous_commit``
    on); otherwise it is an asynchronous standby, PostgreSQL's default.

    :meth:`promote` makes it a primary (``pg_ctl promote``). :func:`crash_host` kills a server
    the way a lost host does: every process SIGKILLed at once."""

    def __init__(
        self, primary: PostgresServer, *, synchronous: bool, port: int | None = None
    ) -> None:
        super().__init__()
        if port is not None:
            self.port = port
        self.primary = primary
        self.synchronous = synchronous

    def start(self) -> StandbyPostgres:
        import os
        import shutil
        import tempfile
        from pathlib import Path

        from tests.services import _as_pg_user, _wait_port, pg_bin

        root = Path(tempfile.mkdtemp(prefix="goatbeat-pg-standby-"))
        self.datadir = root / "data"
        sockdir = root / "sock"
        sockdir.mkdir()
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(sockdir, "postgres", "postgres")
        subprocess.run(
            _as_pg_user([
                pg_bin("pg_basebackup"), "-D", str(self.datadir), "-R", "-X", "stream",
                "-c", "fast", "-d",
                f"host=127.0.0.1 port={self.primary.port} user=postgres "
                f"application_name={STANDBY_NAME}",
            ]),
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
        )  # fmt: skip
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write(
                f"\nport = {self.port}\nunix_socket_directories = '{sockdir}'\n"
                f"cluster_name = '{STANDBY_NAME}'\nhot_standby = on\n"
            )
        # What the primary's ALTER SYSTEM said is for the primary, not for this one.
        (self.datadir / "postgresql.auto.conf").write_text(
            "\n".join(
                line
                for line in (self.datadir / "postgresql.auto.conf").read_text().splitlines()
                if not line.startswith("synchronous_standby_names")
            )
            + "\n"
        )
        self._pg_ctl("start")
        self.started = True
        import atexit

        atexit.register(self.stop)
        _wait_port(self.port, 30)
        self.wait_streaming()
        if self.synchronous:
            set_synchronous(self.primary, STANDBY_NAME)
        return self

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary shows this standby streaming (and, when synchronous, as sync)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
            if row is not None and row[0] == "streaming":
                return
            time.sleep(0.1)
        raise RuntimeError("the standby never started streaming")

    def promote(self) -> None:
        self._pg_ctl("promote")

    def walsender_pid(self) -> int | None:
        import psycopg

        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,),
            ).fetchone()
        return None if row is None else int(row[0])


STANDBY_NAME = "goatbeat_standby"


def set_synchronous(server: PostgresServer, name: str | None) -> None:
    """``synchronous_standby_names`` of ``server`` (None: none, commits wait for nobody)."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as conn:
        if name is None:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        else:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
        conn.execute("SELECT pg_reload_conf()")


def server_pids(server: PostgresServer) -> list[int]:
    """The postmaster's pid, then its children's."""
    from pathlib import Path

    assert server.datadir is not None
    postmaster = int((server.datadir / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def crash_host(server: PostgresServer) -> None:
    """Every process of ``server`` SIGKILLed, the postmaster first: nothing is flushed,
    nothing more is sent to a standby, as when its host is lost."""
    import os
    import signal

    for pid in server_pids(server):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
