"""Nothing goatbeat does through PgBouncer (transaction pooling) leaves state in a server session.

A PgBouncer with ONE server connection in its pool runs every transaction of every client on
the same PostgreSQL session, so whatever a client leaves behind there (a prepared statement, a
LISTEN, an advisory lock, a cursor, a temp table, a SET) is visible to the next client. The
test runs a scheduler's whole life through it, then looks at that session from another client.
A control shows the check sees a leak when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

import psycopg
import pytest

from goatbeat.beat import Beat
from goatbeat.core.model import Occurrence
from goatbeat.stores.postgres import PostgresStore
from tests.doubles import AcceptingSubmitter
from tests.services import PgBouncerServer

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]


class Recording(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.keys: list[str] = []

    def submit(self, occurrence: Occurrence) -> str | None:
        self.keys.append(occurrence.idempotency_key)
        return occurrence.idempotency_key


@pytest.fixture
def one_session(postgres_server: Any, pg_dsn: str) -> Iterator[str]:
    """The DSN of ``pg_dsn``'s database through a PgBouncer with a single server connection."""
    bouncer = PgBouncerServer.in_front_of(postgres_server.dsn, pool_size=1, min_pool_size=1)
    bouncer.start()
    try:
        yield bouncer.pooled(pg_dsn)
    finally:
        bouncer.stop()


def leftovers(pooled_dsn: str) -> dict[str, Any]:
    """What the (only) server session holds, read through PgBouncer."""
    with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute(
            """
            SELECT (SELECT count(*) FROM pg_prepared_statements) AS prepared,
                   (SELECT count(*) FROM pg_listening_channels()) AS listening,
                   (SELECT count(*) FROM pg_locks
                     WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks,
                   (SELECT count(*) FROM pg_cursors) AS cursors,
                   (SELECT count(*) FROM pg_class
                     WHERE relnamespace = pg_my_temp_schema()) AS temp_relations,
                   current_setting('statement_timeout') AS statement_timeout,
                   current_setting('idle_in_transaction_session_timeout') AS idle_timeout,
                   current_setting('transaction_isolation') AS isolation,
                   current_setting('transaction_read_only') AS read_only,
                   current_setting('search_path') AS search_path
            """
        ).fetchone()
        assert row is not None
        keys = (
            "prepared",
            "listening",
            "advisory_locks",
            "cursors",
            "temp_relations",
            "statement_timeout",
            "idle_timeout",
            "isolation",
            "read_only",
            "search_path",
        )
        return dict(zip(keys, row, strict=True))


CLEAN = {
    "prepared": 0,
    "listening": 0,
    "advisory_locks": 0,
    "cursors": 0,
    "temp_relations": 0,
    "statement_timeout": "0",
    "idle_timeout": "0",
    "isolation": "read committed",
    "read_only": "off",
    "search_path": '"$user", public',
}


def test_the_check_sees_a_prepared_statement_and_a_listen_left_in_the_session(
    one_session: str,
) -> None:
    assert leftovers(one_session) == CLEAN
    with psycopg.connect(one_session, autocommit=True, prepare_threshold=0) as conn:
        conn.execute("SELECT 1 WHERE %s", [True])  # prepared at once
        conn.execute("LISTEN goatbeat")
    found = leftovers(one_session)
    assert found["prepared"] >= 1 and found["listening"] == 1


def test_a_scheduler_through_pgbouncer_leaves_nothing_in_the_server_session(
    one_session: str, pg_dsn: str
) -> None:
    submitter = Recording()
    beat = Beat(
        one_session,
        submitter=submitter,
        settings={"listen_database": pg_dsn, "lease_ttl": "5s", "lease_renew_interval": "1s"},
    )
    for i in range(3):
        beat.schedule(name=f"tick-{i}", task="json.dumps", every="1s", args=[i])
    beat.migrate()
    beat.publish()
    scheduler = beat.scheduler()
    admin = PostgresStore(one_session)  # another client on the same pool, as the admin is
    try:
        deadline = time.monotonic() + 6
        requested = False
        while time.monotonic() < deadline:
            result = scheduler.run_once()
            assert result.error is None, result
            if not requested and result.leader:
                admin.request_run("tick-0")
                admin.pause("tick-2", note="maintenance")
                admin.resume("tick-2")
                requested = True
            beat.store.wait(min(result.sleep, 0.3))  # LISTEN on the direct connection
            admin.status()
            admin.list_schedules()
            admin.executions(limit=20)
        assert requested
        assert len(submitter.keys) >= 6
        assert any(":manual:" in key for key in submitter.keys)
        assert len(submitter.keys) == len(set(submitter.keys))
        assert scheduler.release()
    finally:
        scheduler.close()
        admin.close()
        beat.close()
    assert leftovers(one_session) == CLEAN


def test_a_burst_claimed_batch_after_batch_through_pgbouncer_is_recorded_by_the_next_claims(
    one_session: str, pg_dsn: str
) -> None:
    """Each claim writes the batch before it (claim_due(record=...), pipelined behind the
    due read): through a transaction pool too, every occurrence ends submitted once, and the
    server session is left clean."""
    submitter = Recording()
    beat = Beat(
        one_session,
        submitter=submitter,
        settings={"listen_database": pg_dsn, "batch_size": 3, "lease_ttl": "30s"},
    )
    for i in range(10):
        beat.schedule(name=f"burst-{i}", task="json.dumps", every="1h", args=[i])
    beat.migrate()
    beat.publish()
    store = beat.store
    carried: list[int] = []
    claim_due = store.claim_due

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        carried.append(len(kwargs.get("record", ())))
        return claim_due(*args, **kwargs)

    store.claim_due = counting_claim  # type: ignore[method-assign]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE goatbeat_schedule SET next_run_at = now() - interval '1 second'")
    scheduler = beat.scheduler()
    try:
        result = scheduler.run_once()
        assert result.error is None and result.claimed == 10 and result.submitted == 10
        assert carried == [0, 3, 3, 3]
        executions = store.executions(limit=50)
        assert len(executions) == 10
        assert {(e.status.value, e.attempts) for e in executions} == {("submitted", 1)}
        assert {s.last_status for s in store.list_schedules()} == {"submitted"}
        assert len(submitter.keys) == len(set(submitter.keys)) == 10
        assert scheduler.release()
    finally:
        scheduler.close()
        beat.close()
    assert leftovers(one_session) == CLEAN
