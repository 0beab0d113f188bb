"""Two real ``goatbeat scheduler`` processes on PostgreSQL sending to RabbitMQ (confirms on),
the leader killed with SIGKILL: the standby takes over and every occurrence of the window
reaches the broker, read back from the queue. Only an occurrence the killed leader left
``claimed`` (its submission in doubt) may be there twice, always with the same task id.
Timings are never asserted; each wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from goatbeat.core.instance import split_instance
from goatbeat.core.model import idempotency_key
from goatbeat.stores.postgres import PostgresStore

kombu = pytest.importorskip("kombu")

pytestmark = [
    pytest.mark.rabbitmq,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(150),
]

REPO = Path(__file__).resolve().parents[2]
WINDOW = 10
LEAD = 8  # seconds to the first instant: both schedulers start and publish meanwhile
DEADLINE = 60.0


def test_a_leader_killed_mid_window_loses_nothing_on_rabbitmq(
    pg_dsn: str, amqp_url: str, tmp_path: Path
) -> None:
    with kombu.Connection(amqp_url) as conn:
        try:
            conn.default_channel.queue_purge("failover")
        except conn.channel_errors:
            pass
    store = PostgresStore(pg_dsn)
    store.migrate()
    start_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD)
    end_at = start_at + timedelta(seconds=WINDOW)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GOATBEAT_E2E_AMQP_URL": amqp_url,
        "GOATBEAT_E2E_START": start_at.isoformat(),
        "GOATBEAT_E2E_END": end_at.isoformat(),
    }
    env.pop("GOATBEAT_APP", None)
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def logs() -> str:
        return "\n".join(
            f"--- {sid}\n{(tmp_path / f'{sid}.log').read_text(errors='replace')[-3000:]}"
            for sid in procs
        )

    def executions() -> list[tuple[str, str, str]]:
        with psycopg.connect(pg_dsn) as conn:
            return conn.execute(
                "SELECT idempotency_key, status, scheduler_id FROM goatbeat_execution"
            ).fetchall()

    def wait(what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE
        while not done():
            for sid, proc in procs.items():
                if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                    pytest.fail(f"scheduler {sid} exited with {proc.returncode}\n{logs()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {DEADLINE}s\n{logs()}")
            time.sleep(0.05)

    def holder() -> str | None:
        lease = store.read_lease("scheduler")
        return None if lease is None or lease[3] else split_instance(lease[0])[0]

    def submitted_by(sid: str) -> int:
        return sum(s == "submitted" and who == sid for _, s, who in executions())

    try:
        for sid in ("a", "b"):
            with (tmp_path / f"{sid}.log").open("wb") as log:
                procs[sid] = subprocess.Popen(
                    [sys.executable, "-m", "goatbeat", "--app", "tests.rabbitmq.beat_app:beat",
                     "--database", pg_dsn, "--log-format", "json", "scheduler",
                     "--scheduler-id", sid, "--lease-ttl", "3s", "--lease-renew-interval", "1s",
                     "--max-sleep", "1s"],
                    cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log,
                )  # fmt: skip
        wait("a leader", lambda: holder() in {"a", "b"})
        leader = holder()
        assert leader is not None
        standby = "b" if leader == "a" else "a"
        wait("dispatch by the leader", lambda: submitted_by(leader) >= 3)
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        in_doubt = {k for k, s, _ in executions() if s == "claimed"}
        wait("takeover", lambda: submitted_by(standby) >= 3)
        expected = {
            idempotency_key("tick", start_at + timedelta(seconds=i)) for i in range(WINDOW + 1)
        }
        wait(
            "submission of the whole window",
            lambda: expected <= {k for k, s, _ in executions() if s == "submitted"},
        )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        store.close()
    seen: Counter[str] = Counter()
    with kombu.Connection(amqp_url) as conn:
        while (message := conn.default_channel.basic_get("failover", no_ack=True)) is not None:
            assert message.headers["celery_beat_task"] is True
            seen[message.headers["id"]] += 1
    assert expected <= set(seen), sorted(expected - set(seen))  # nothing lost
    twice = {key for key, n in seen.items() if n > 1}
    assert twice <= in_doubt and max(seen.values()) <= 2, (seen, in_doubt)
    assert {who for _, _, who in executions()} == {"a", "b"}  # both led
