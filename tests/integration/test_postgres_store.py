"""PostgresStore against a real PostgreSQL: the database clock, fencing, LISTEN/NOTIFY,
reconnection, migrations, and the connection provider."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from goatbeat.core.clock import SystemClock
from goatbeat.core.errors import StoreError
from goatbeat.core.lease import LeaseManager
from goatbeat.core.misfire import Plan, plan
from goatbeat.core.model import Schedule
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import open_store
from goatbeat.stores.postgres import ConnectionProvider, PostgresStore
from goatbeat.stores.schema import migration_versions, postgres_migration_sql, queries

pytestmark = pytest.mark.postgres

T0 = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
SKEW = timedelta(hours=5)
VERSIONS = list(migration_versions("postgres"))
"""Every schema version shipped, in order."""


def hourly(name: str) -> Schedule:
    return Schedule(name=name, task=f"tasks.{name}", trigger=IntervalTrigger("1h"), last_run_at=T0)


@pytest.fixture
def stores(pg_dsn: str) -> Iterator[list[PostgresStore]]:
    """Opened stores, closed after the test; the first one migrated the database."""
    opened: list[PostgresStore] = []
    first = PostgresStore(pg_dsn)
    first.migrate()
    opened.append(first)
    yield opened
    for store in opened:
        store.close()


def _open(stores: list[PostgresStore], dsn: str, **kw: Any) -> PostgresStore:
    store = PostgresStore(dsn, **kw)
    stores.append(store)
    return store


def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def _everything(store: ScheduleStore) -> tuple[Any, ...]:
    return store.list_schedules(), store.executions(limit=1000)


def test_skewed_host_clocks_neither_steal_nor_keep_the_lease(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    behind_clock, ahead_clock = SystemClock(offset=-SKEW), SystemClock(offset=SKEW)
    behind = _open(stores, pg_dsn, clock=behind_clock)
    ahead = _open(stores, pg_dsn, clock=ahead_clock)
    behind.publish([hourly("a")])
    ttl, renew = timedelta(seconds=1), timedelta(milliseconds=400)
    slow = LeaseManager(behind, holder="behind", ttl=ttl, renew_interval=renew, clock=behind_clock)
    fast = LeaseManager(ahead, holder="ahead", ttl=ttl, renew_interval=renew, clock=ahead_clock)

    grant = slow.acquire()
    assert grant is not None
    # The host 5 h ahead sees that expiry as long past by its own clock; the database does not.
    assert grant.expires_at < ahead_clock.now() - timedelta(hours=4)
    assert fast.acquire() is None
    # The stores' clock is the database's, whatever the host says.
    for store in (behind, ahead):
        assert abs(store.now() - datetime.now(UTC)) < timedelta(minutes=1)

    time.sleep(ttl.total_seconds() + 0.3)
    # By its own clock the host 5 h behind still has hours left; the database says expired.
    assert grant.expires_at > behind_clock.now() + timedelta(hours=4)
    taken = fast.acquire()
    assert taken is not None and taken.token == grant.token + 1
    refused = behind.claim_due(grant, scheduler_id="behind", limit=10, now=T0 + HOUR)
    assert refused.refused and behind.executions() == []
    assert slow.acquire() is None


def test_leader_paused_past_its_ttl_is_refused_and_writes_nothing(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    leader, standby = stores[0], _open(stores, pg_dsn)
    leader.publish([hourly("a"), hourly("b")])
    grant = leader.acquire_lease("scheduler", "leader", timedelta(milliseconds=500))
    assert grant is not None

    time.sleep(0.8)  # the "GC pause"
    taken = standby.acquire_lease("scheduler", "standby", timedelta(seconds=30))
    assert taken is not None and taken.token == grant.token + 1
    before = _everything(leader)

    woke_up = leader.claim_due(grant, scheduler_id="leader", limit=10, now=T0 + HOUR)

    assert woke_up.refused and woke_up.occurrences == []
    assert _everything(leader) == before
    claimed = standby.claim_due(taken, scheduler_id="standby", limit=10, now=T0 + HOUR)
    assert sorted(o.schedule_name for o in claimed.occurrences) == ["a", "b"]


def test_takeover_waits_for_a_claim_in_flight_to_commit(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    # FOR SHARE on the lease row: a claim that passed its lease check finishes before anybody
    # can take the lease over, so two holders never write at the same time.
    leader, standby = stores[0], _open(stores, pg_dsn)
    leader.publish([hourly("a")])
    grant = leader.acquire_lease("scheduler", "leader", timedelta(milliseconds=300))
    assert grant is not None
    in_claim = threading.Event()
    events: list[str] = []

    def slow_plan(schedule: Schedule, now: datetime) -> Plan:
        in_claim.set()
        # The lease expires while this claim is in flight. Slow but alive: silent for less than
        # the cap the claim puts on itself (what is left of the lease, at least 1 s), so it is
        # waited for; a claimer silent for longer is frozen and gets disconnected
        # (tests/integration/test_frozen_leader.py).
        time.sleep(0.7)
        return plan(schedule, now)

    leader.planner = slow_plan

    def take_over() -> None:
        in_claim.wait(10)
        time.sleep(0.4)
        got = standby.acquire_lease("scheduler", "standby", timedelta(seconds=30))
        # Whichever thread wakes first after the commit, the claim must already be visible
        # when the takeover returns: the takeover waited for it.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM goatbeat_execution").fetchone()
        events.append(f"acquired:{got is not None}:executions={row[0] if row else None}")

    thread = threading.Thread(target=take_over)
    thread.start()
    result = leader.claim_due(grant, scheduler_id="leader", limit=10, now=T0 + HOUR)
    events.append(f"claimed:{len(result.occurrences)}")
    thread.join(20)

    assert sorted(events) == ["acquired:True:executions=1", "claimed:1"]


def test_notify_wakes_a_waiter_well_before_its_timeout(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    waiter, notifier = stores[0], _open(stores, pg_dsn)
    while waiter.wait(0.05):  # drain what migrate and friends sent
        pass
    notifier.now()
    woke: list[float] = []
    thread = threading.Thread(
        target=lambda: woke.append(time.monotonic()) if waiter.wait(10) else None
    )
    thread.start()
    time.sleep(0.3)

    sent = time.monotonic()
    notifier.notify("schedule:42")
    thread.join(15)

    assert woke, "wait() ran into its timeout"
    assert waiter.last_payload == "schedule:42"
    print(f"\nNOTIFY -> wait() returned after {(woke[0] - sent) * 1000:.2f} ms")


def test_a_foreign_notification_on_the_channel_is_a_plain_wake_up(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    waiter = stores[0]
    while waiter.wait(0.05):
        pass
    _rows(pg_dsn, "SELECT pg_notify('goatbeat', 'drop table everything; <script>')")
    assert waiter.wait(5) is True
    assert waiter.last_payload is None  # not an identifier: not believed, not logged as one


def test_killed_connection_raises_store_error_then_reconnects(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    store, other = stores[0], _open(stores, pg_dsn)
    store.publish([hourly("a")])
    pid = store.provider.get().info.backend_pid

    _rows(pg_dsn, f"SELECT pg_terminate_backend({int(pid)})")

    with pytest.raises(StoreError):
        store.get("a")
    assert store.get("a").name == "a"  # a fresh connection
    assert store.provider.get().info.backend_pid != pid
    # ... which LISTENs again.
    while store.wait(0.05):
        pass
    other.notify("run:1")
    assert store.wait(5) is True


def test_killed_connection_during_wait_raises_store_error(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    store = stores[0]
    pid = store.provider.get().info.backend_pid
    killer = threading.Timer(0.3, lambda: _rows(pg_dsn, f"SELECT pg_terminate_backend({pid})"))
    killer.start()
    with pytest.raises(StoreError):
        store.wait(5)
    killer.join()
    assert store.wait(0.1) in (True, False)  # usable again


def _schema(dsn: str) -> list[tuple[Any, ...]]:
    """Tables, columns, constraints and indexes of goatbeat's tables."""
    columns = _rows(
        dsn,
        "SELECT table_name, column_name, data_type, is_nullable, column_default, "
        "character_maximum_length FROM information_schema.columns "
        "WHERE table_name LIKE 'goatbeat%' ORDER BY table_name, column_name",
    )
    constraints = _rows(
        dsn,
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid::regclass::text LIKE 'goatbeat%' ORDER BY 1, 2",
    )
    indexes = _rows(
        dsn,
        "SELECT tablename, indexname, indexdef FROM pg_indexes "
        "WHERE tablename LIKE 'goatbeat%' ORDER BY 1, 2",
    )
    return [*columns, *constraints, *indexes]


def test_migrate_twice_is_a_no_op_and_records_the_version(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    try:
        assert store.info()["schema_version"] == 0
        store.migrate()
        schema = _schema(pg_dsn)
        versions = _rows(pg_dsn, "SELECT version, applied_at FROM goatbeat_schema_version")

        store.migrate()

        assert _schema(pg_dsn) == schema
        assert _rows(pg_dsn, "SELECT version, applied_at FROM goatbeat_schema_version") == versions
        assert [v for v, _ in versions] == VERSIONS
        assert store.info()["schema_version"] == VERSIONS[-1]
        assert {r[0] for r in schema} >= {
            "goatbeat_schedule",
            "goatbeat_execution",
            "goatbeat_lease",
            "goatbeat_schema_version",
        }
    finally:
        store.close()


def test_migration_sql_run_by_hand_builds_what_migrate_builds(
    postgres_server: Any, pg_dsn: str
) -> None:
    # The Django app runs postgres_migration_sql(v) with RunSQL, one migration per version;
    # do what it does.
    from tests.conftest import create_database, drop_database

    by_hand = create_database(postgres_server)
    try:
        for version in VERSIONS:
            with psycopg.connect(by_hand) as conn:  # a transaction, as Django's migration has
                conn.execute(postgres_migration_sql(version))
        store = PostgresStore(pg_dsn)
        store.migrate()
        store.close()

        assert _schema(by_hand) == _schema(pg_dsn)
        assert _rows(by_hand, "SELECT version FROM goatbeat_schema_version") == [
            (v,) for v in VERSIONS
        ]
        again = PostgresStore(by_hand)
        again.migrate()  # recorded: nothing to do, and no error from re-creating tables
        assert again.info()["schema_version"] == VERSIONS[-1]
        again.close()
    finally:
        drop_database(postgres_server, by_hand)


def test_concurrent_migrations_serialise(pg_dsn: str) -> None:
    errors: list[BaseException] = []

    def migrate() -> None:
        store = PostgresStore(pg_dsn)
        try:
            store.migrate()
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert _rows(pg_dsn, "SELECT version FROM goatbeat_schema_version") == [(v,) for v in VERSIONS]


@pytest.mark.parametrize("shards", [1, 4])
def test_due_query_can_walk_the_partial_index(
    pg_dsn: str, stores: list[PostgresStore], shards: int
) -> None:
    stores[0].publish([hourly(f"s{i}") for i in range(50)])
    sql = queries("postgres")["claim_select_due"]
    others = list(range(shards - 1))  # the last shard's filter: not in any other
    params = {"now": T0 + HOUR, "limit": 100, "shards": shards, "others": others}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        plan_rows = conn.execute("EXPLAIN " + sql, params).fetchall()
    assert "goatbeat_schedule_due_idx" in "\n".join(r[0] for r in plan_rows)


def test_a_shards_due_query_walks_the_index_when_the_whole_table_is_due(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    """An hourly burst: every schedule due at once. With a shard filter the planner must still
    walk the due index and stop after the batch, not scan and sort the table every batch
    (which an equality on the shard expression made it do: it estimated 0.5 % of rows)."""
    stores[0].publish([hourly(f"s{i}") for i in range(20)])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO goatbeat_schedule (name, source, task, trigger, timezone, args, kwargs,"
            " next_run_at) SELECT 'bulk-' || i, 'admin', 'tasks.x', s.trigger, 'UTC', '[]',"
            " '{}', %s FROM generate_series(1, 20000) AS i,"
            " (SELECT trigger FROM goatbeat_schedule LIMIT 1) AS s",
            (T0,),
        )
        conn.execute("VACUUM ANALYZE goatbeat_schedule")
        sql = queries("postgres")["claim_select_due"]
        for shards in (2, 4, 16):
            others = list(range(1, shards))  # shard 0's filter
            params = {"now": T0 + HOUR, "limit": 500, "shards": shards, "others": others}
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall())
            assert "goatbeat_schedule_due_idx" in plan, plan


class BorrowedConnection:
    """A provider handing out a connection the application opened (as Django's would be)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.opened = 0
        self.discarded = 0
        self.conn: psycopg.Connection[Any] | None = None

    def get(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.conn = psycopg.connect(self.dsn, autocommit=True)
            self.opened += 1
        return self.conn

    def discard(self) -> None:
        self.discarded += 1
        if self.conn is not None:
            self.conn.close()
        self.conn = None


def test_store_runs_on_a_connection_provided_by_the_application(pg_dsn: str) -> None:
    provider = BorrowedConnection(pg_dsn)
    assert isinstance(provider, ConnectionProvider)
    store = PostgresStore(connection_provider=provider)
    store.migrate()
    store.publish([hourly("a")])
    grant = store.acquire_lease("scheduler", "borrowed", timedelta(seconds=30))
    assert grant is not None
    result = store.claim_due(grant, scheduler_id="borrowed", limit=10, now=T0 + HOUR)
    assert [o.schedule_name for o in result.occurrences] == ["a"]
    assert provider.opened == 1

    assert provider.conn is not None
    _rows(pg_dsn, f"SELECT pg_terminate_backend({provider.conn.info.backend_pid})")
    with pytest.raises(StoreError):
        store.get("a")
    assert provider.discarded == 1
    assert store.get("a").total_run_count == 1
    assert provider.opened == 2
    store.close()


def test_open_store_accepts_both_postgres_schemes(pg_dsn: str) -> None:
    for url in (pg_dsn, pg_dsn.replace("postgresql://", "postgres://", 1)):
        store = open_store(url)
        assert isinstance(store, PostgresStore)
        store.migrate()
        assert store.info()["kind"] == "postgres"
        store.close()


def test_only_a_store_that_waits_listens(pg_dsn: str, stores: list[PostgresStore]) -> None:
    # A web process serving the admin never waits: its connection must not LISTEN, or every
    # notification would pile up unread in the driver's backlog.
    store = _open(stores, pg_dsn)
    store.publish([hourly("a")])

    def channels() -> list[str]:
        rows = store.provider.get().execute("SELECT pg_listening_channels()").fetchall()
        return [r[0] for r in rows]

    assert channels() == []
    store.wait(0)
    assert channels() == ["goatbeat"]


def test_the_default_connection_notices_a_dead_peer_within_seconds(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    # TCP keepalives and a user timeout: a partitioned server surfaces as a StoreError the
    # loop backs off from, not as a query hanging for the kernel's two hours.
    store = _open(stores, pg_dsn)
    store.now()
    params = store.provider.get().info.get_parameters()
    assert params.get("keepalives_idle") == "10"
    assert params.get("tcp_user_timeout") == "30000"
