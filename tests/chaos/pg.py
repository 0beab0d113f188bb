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
from typing import Any

from tests.services import PostgresServer

__all__ = [
    "ChaosPostgres",
    "StandbyPostgres",
    "crash_host",
    "read_crashed",
    "read_state",
    "server_pids",
    "set_synchronous",
    "wal_bytes",
]

CALL_TIMEOUT = 10.0
"""Every connection and statement of these helpers gives up after this many seconds: a
harness that waits on a server for ever never ends its run."""


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
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/", timeout=180,
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

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with _connect(self.primary.dsn) as conn:
                row = conn.execute(
                    "SELECT state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
            if row is not None and row[0] == "streaming":
                return
            time.sleep(0.1)
        raise RuntimeError("the standby never started streaming")

    def promote(self) -> None:
        """``pg_ctl promote``, waiting (at most 60 s) until it accepts writes."""
        self._pg_ctl("promote")

    def caught_up(self, timeout: float = 15.0) -> tuple[str | None, float | None]:
        """Wait (at most ``timeout``) until this standby has replayed all the WAL it received,
        then return its replay position: (``pg_last_wal_replay_lsn()``, the primary's commit
        time of the last transaction replayed, ``pg_last_xact_replay_timestamp()``, as epoch
        seconds). What a promotion now starts from; anything the primary committed later is
        not here."""
        deadline = time.monotonic() + timeout
        with _connect(self.dsn) as conn:
            while True:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn()::text, "
                    "extract(epoch FROM pg_last_xact_replay_timestamp())::float8, "
                    "coalesce(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), "
                    "pg_last_wal_replay_lsn()), 0)"
                ).fetchone()
                assert row is not None
                if row[2] <= 0 or time.monotonic() > deadline:
                    return row[0], None if row[1] is None else float(row[1])
                time.sleep(0.05)

    def wait_replayed(self, lsn: str, timeout: float = 15.0) -> bool:
        """Whether this standby replayed up to ``lsn`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with _connect(self.dsn) as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)
                ).fetchone()
                if row is not None and row[0]:
                    return True
                time.sleep(0.05)
        return False

    def walsender_pid(self) -> int | None:
        with _connect(self.primary.dsn) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,),
            ).fetchone()
        return None if row is None else int(row[0])


STANDBY_NAME = "goatbeat_standby"


def set_synchronous(server: PostgresServer, name: str | None) -> None:
    """``synchronous_standby_names`` of ``server`` (None: none, commits wait for nobody)."""
    with _connect(server.dsn) as conn:
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


def crash_host(server: PostgresServer, timeout: float = 10.0) -> None:
    """Every process of ``server`` SIGKILLed, the postmaster first: nothing is flushed,
    nothing more is sent to a standby, as when its host is lost. A backend forked while the
    children were listed is found by its working directory (every PostgreSQL process runs in
    the data directory) and killed too, until none is left (at most ``timeout`` seconds)."""
    import os
    import signal

    assert server.datadir is not None
    for pid in server_pids(server):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    datadir = os.path.realpath(server.datadir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _running_in(datadir)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    raise RuntimeError(f"processes of {datadir} outlived SIGKILL for {timeout:g} s")


def _running_in(directory: str) -> list[int]:
    """Live processes whose working directory is ``directory`` (zombies are not)."""
    import os
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "cwd") != directory:
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(proc.name))
    return found


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=int(CALL_TIMEOUT),
        options=f"-c statement_timeout={int(CALL_TIMEOUT * 1000)}",
    )


def read_state(dsn: str) -> dict[str, Any]:
    """What a database holds of goatbeat's claims and leases, to compare two copies:
    ``executions`` {id: [key, token, status, attempts, scheduler_id]}, ``leases``
    {name: [holder, token]}, and ``wal_lsn`` (where its WAL ends, a standby's replay position
    included)."""
    with _connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, idempotency_key, fencing_token, status, attempts, scheduler_id "
            "FROM goatbeat_execution"
        ).fetchall()
        leases = conn.execute("SELECT name, holder, token FROM goatbeat_lease").fetchall()
        lsn = conn.execute(
            "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_insert_lsn() END::text"
        ).fetchone()
    return {
        "executions": {int(r[0]): [r[1], r[2], r[3], r[4], r[5]] for r in rows},
        "leases": {str(r[0]): [r[1], int(r[2])] for r in leases},
        "wal_lsn": None if lsn is None else lsn[0],
    }


def read_crashed(server: PostgresServer) -> dict[str, Any]:
    """Start the data directory of a crashed primary ALONE, on a free port no scheduler knows
    (crash recovery brings back everything it had committed), :func:`read_state` it, stop it.
    The forensic copy: what the old primary had committed, to compare with what the promoted
    standby started from. Also ``wal_bytes_after(lsn)`` needs it: see the harness."""
    import os

    from tests.services import _as_pg_user, _wait_port, free_port, pg_bin

    assert server.datadir is not None and server.root is not None
    port = free_port()
    base = [pg_bin("pg_ctl"), "-D", str(server.datadir), "-w", "-t", "60"]
    # crash_host saw every process of it gone; a killed postmaster not yet reaped (a zombie)
    # would still pass for a running one, and the start would refuse its lock file.
    if _running_in(os.path.realpath(server.datadir)):
        raise RuntimeError(f"{server.datadir} still has live processes")
    (server.datadir / "postmaster.pid").unlink(missing_ok=True)
    log = server.root / "forensic.log"
    started = subprocess.run(
        _as_pg_user([
            *base, "-l", str(log),
            "-o", f"-p {port} -c listen_addresses=127.0.0.1 -c synchronous_standby_names=''",
            "start",
        ]),
        check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/", timeout=90,
    )  # fmt: skip
    if started.returncode != 0:
        tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        raise RuntimeError(f"the crashed primary's copy did not start: {tail}")
    try:
        _wait_port(port, 30)
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        state = read_state(dsn)
        # Where its WAL ended at the crash: the redo point of the checkpoint that ended its
        # crash recovery (its insert position now has that checkpoint's own record after it).
        with _connect(dsn) as conn:
            row = conn.execute("SELECT redo_lsn::text FROM pg_control_checkpoint()").fetchone()
        if row is not None:
            state["wal_lsn"] = row[0]
        return state
    finally:
        subprocess.run(
            _as_pg_user([*base, "-m", "immediate", "stop"]),
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
            timeout=90,
        )  # fmt: skip


def wal_bytes(dsn: str, end: str, start: str) -> int:
    """``pg_wal_lsn_diff(end, start)``, asked of any server."""
    with _connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start)
        ).fetchone()
    return 0 if row is None else int(row[0])
