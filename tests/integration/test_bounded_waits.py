"""Bounded waits (#32 item 5): a leader never blocks past its lease on a server it does not
control. Real ``goatbeat scheduler`` processes; the server is frozen with SIGSTOP mid-publish
or mid-query, or its name stops resolving.

- Redis frozen under a Celery leader: each publish gives up at the bound (``io.timeout``), the
  leader keeps renewing its lease (same holder, same token, the standby never takes over), and
  once Redis wakes every occurrence reaches it.
- PostgreSQL frozen (every server process stopped): the leader's statement gives up at the
  bound and says so while the server is still frozen; nothing is submitted past the local
  deadline; thawed, it leads again and nothing is lost or sent twice.
- A resolver that hangs (``getaddrinfo`` blocked, as psycopg and redis-py both resolve
  through it): the connection attempt gives up at the bound, is logged, and is not started
  again while it hangs; once the name resolves the scheduler connects and leads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.instance import split_instance
from goatbeat.stores.postgres import PostgresStore
from tests.services import PostgresServer, RedisServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.integration.bounded_app:beat"
TTL = 3.0
RENEW = 1.0
VALID_FOR = TTL - RENEW
"""The local deadline: a leader trusts its lease this long after asking."""
BOUND = VALID_FOR / 2
"""goatbeat.core.bounded.io_timeout of that lease: 1 s."""


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.records = tmp / "records.txt"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, sid: str, dsn: str, **env: str) -> subprocess.Popen[bytes]:
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GB_RECORD_FILE": str(self.records),
            "GB_SCHEDULER_ID": sid,
            **env,
        }
        environ.pop("GOATBEAT_APP", None)
        with open(self.tmp / f"{sid}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "goatbeat", "--app", APP, "--database", dsn,
                 "--log-format", "json", "scheduler", "--scheduler-id", sid,
                 "--lease-ttl", f"{TTL:g}s", "--lease-renew-interval", f"{RENEW:g}s",
                 "--max-sleep", "1s"],
                cwd=self.tmp, env=environ, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        self.procs[sid] = proc
        return proc

    def events(self, sid: str, name: str | None = None) -> list[dict[str, Any]]:
        text = (self.tmp / f"{sid}.log").read_text(errors="replace")
        found = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        return [e for e in found if name is None or e["event"] == name]

    def wait_for(self, what: str, check: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            for sid, proc in self.procs.items():
                if proc.poll() is not None:
                    log = (self.tmp / f"{sid}.log").read_text()[-3000:]
                    raise AssertionError(f"{sid} exited while waiting for {what}:\n{log}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def recorded(self) -> list[tuple[str, str, float]]:
        if not self.records.exists():
            return []
        lines = self.records.read_text().splitlines()
        return [(k, sid, float(t)) for k, sid, t in (line.split(" ") for line in lines)]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        for proc in p.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _executions(dsn: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT idempotency_key, status FROM goatbeat_execution").fetchall()
    return [(str(k), str(s)) for k, s in rows]


def _lease(store: PostgresStore) -> tuple[str, int] | None:
    lease = store.read_lease("scheduler")
    if lease is None or lease[3]:
        return None
    return split_instance(lease[0])[0], int(lease[1])


def _celery_keys(url: str) -> list[str]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return [json.loads(m)["headers"]["id"] for m in client.lrange("celery", 0, -1)]
    finally:
        client.close()


def test_a_frozen_redis_never_holds_a_celery_leader_past_its_lease(
    procs: Procs, pg_dsn: str, tmp_path: Path
) -> None:
    broker = RedisServer().start()
    store = PostgresStore(pg_dsn)
    store.migrate()
    try:
        env = {"GB_BROKER": broker.url}
        procs.start("leader", pg_dsn, **env)
        procs.wait_for("the leader", lambda: (_lease(store) or ("",))[0] == "leader")
        procs.start("standby", pg_dsn, **env)
        procs.wait_for("the standby", lambda: procs.events("standby", "lease.standby"))
        procs.wait_for("a few messages", lambda: len(_celery_keys(broker.url)) >= 6)
        held = _lease(store)
        assert held is not None and held[0] == "leader"

        assert broker.proc is not None
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            # Mid-publish: the leader's broker calls give up, one by one, at the bound...
            procs.wait_for(
                "a publish to give up",
                lambda: [
                    e for e in procs.events("leader", "io.timeout") if e["what"] == "broker publish"
                ],
                timeout=10,
            )
            # ...and it keeps leading: three lease lifetimes frozen, never a takeover.
            frozen_until = time.monotonic() + 3 * TTL
            while time.monotonic() < frozen_until:
                assert _lease(store) == held, "the standby took over from a leader stuck in Redis"
                time.sleep(0.1)
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)

        # Thawed: what waited is delivered, by the same leader.
        def owed_all_sent() -> bool:
            rows = _executions(pg_dsn)
            return bool(rows) and all(s == "submitted" for _, s in rows)

        time.sleep(2 * TTL)
        procs.wait_for("every claim sent", owed_all_sent, timeout=60)
        assert _lease(store) == held
        procs.stop_all()
        assert all(p.returncode == 0 for p in procs.procs.values())
        keys = _celery_keys(broker.url)
        assert {k for k, _ in _executions(pg_dsn)} <= set(keys)
        # A publish given up may still have landed when Redis woke, and was retried under its
        # own key: the README's case 4. Nothing else repeats.
        doubled = [k for k, n in Counter(keys).items() if n > 1]
        retried = {e["idempotency_key"] for e in procs.events("leader", "occurrence.submit_retry")}
        assert set(doubled) <= retried
        assert not procs.events("standby", "lease.acquired")
        print(
            f"\nfrozen redis: {len(procs.events('leader', 'io.timeout'))} publishes gave up, "
            f"{len(retried)} keys retried, {len(doubled)} delivered twice, no takeover"
        )
    finally:
        store.close()
        broker.stop()


def _server_pids(server: PostgresServer) -> list[int]:
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


def test_a_frozen_postgresql_is_given_up_on_at_the_bound_and_led_again_after(
    procs: Procs, tmp_path: Path
) -> None:
    server = PostgresServer(synchronous_commit=True).start()
    try:
        store = PostgresStore(server.dsn)
        store.migrate()
        procs.start("leader", server.dsn)
        procs.wait_for("the leader", lambda: (_lease(store) or ("",))[0] == "leader")
        procs.wait_for("a few submissions", lambda: len(procs.recorded()) >= 6)
        store.close()

        pids = _server_pids(server)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            # While the server is still frozen the leader says it gave up, at the bound.
            timeout = procs.wait_for(
                "a statement to give up",
                lambda: [
                    e
                    for e in procs.events("leader", "io.timeout")
                    if e["what"].startswith("postgres")
                ],
                timeout=10 * BOUND,
            )[0]
            assert timeout["timeout"] <= VALID_FOR
            # It goes on trying to reconnect, each attempt bounded too: it never hangs.
            procs.wait_for(
                "a bounded reconnect",
                lambda: [
                    e
                    for e in procs.events("leader", "io.timeout")
                    if e["what"] == "postgres connect"
                ],
                timeout=10 * BOUND,
            )
            time.sleep(TTL)
        finally:
            for pid in reversed(pids):
                os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        before = len(procs.recorded())
        procs.wait_for("submissions again", lambda: len(procs.recorded()) >= before + 6, 60)
        procs.stop_all()
        assert procs.procs["leader"].returncode == 0
        recorded = procs.recorded()
        late = [k for k, _, t in recorded if frozen_at + VALID_FOR <= t < thawed_at]
        assert not late, f"submitted past the local deadline while the database was frozen: {late}"
        keys = [k for k, _, _ in recorded]
        assert [k for k, n in Counter(keys).items() if n > 1] == []
        rows = _executions(server.dsn)
        assert {k for k, _ in rows} == set(keys)
        print(
            f"\nfrozen postgresql: gave up after {timeout['timeout']}s; "
            f"{len(procs.events('leader', 'io.timeout'))} bounded waits logged"
        )
    finally:
        server.stop()


def test_a_resolver_that_hangs_is_given_up_on_and_the_scheduler_connects_once_it_answers(
    procs: Procs, pg_dsn: str, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    hang.write_text("")
    # The same database, reached through a name only the hanging resolver knows.
    dsn = pg_dsn.replace("@127.0.0.1:", "@db.hang.test:")
    setup = PostgresStore(pg_dsn)
    setup.migrate()
    setup.close()
    procs.start("leader", dsn, GB_HANG_HOST="db.hang.test", GB_HANG_FILE=str(hang))
    gave_up = procs.wait_for(
        "the lookup to be given up on",
        lambda: (
            len(
                [e for e in procs.events("leader", "io.timeout") if e["what"] == "postgres connect"]
            )
            >= 3
        ),
        timeout=30,
    )
    assert gave_up
    errors = procs.events("leader", "scheduler.error")
    assert errors and "no answer within" in errors[0]["error"]
    hang.unlink()
    procs.wait_for("the leader", lambda: procs.events("leader", "lease.acquired"), timeout=30)
    procs.wait_for("submissions", lambda: len(procs.recorded()) >= 3)
    procs.stop_all()
    assert procs.procs["leader"].returncode == 0
