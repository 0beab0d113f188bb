"""Session-wide fixtures: throwaway PostgreSQL, PgBouncer, Redis and RabbitMQ servers, fresh
databases per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.services import PgBouncerServer, PostgresServer, RabbitMQServer, RedisServer

# CI replays the same examples every run, so a red build is reproducible and never a roll of
# the dice; developers' runs keep exploring (and Hypothesis's local database replays what
# they found).
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_db_counter = itertools.count()


class ExternalPostgres:
    """A server somebody else runs (GOATBEAT_TEST_PG_DSN): we only create databases on it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def dsn_for(self, dbname: str) -> str:
        base, _, _ = self.dsn.rpartition("/")
        return f"{base}/{dbname}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | ExternalPostgres]:
    external = os.environ.get("GOATBEAT_TEST_PG_DSN")
    if external:
        yield ExternalPostgres(external)
        return
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def create_database(server: PostgresServer | ExternalPostgres) -> str:
    """A fresh, empty database on the test server; returns its DSN."""
    import psycopg

    name = f"gb_{os.getpid()}_{next(_db_counter)}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.dsn_for(name)


def drop_database(server: PostgresServer | ExternalPostgres, dsn: str) -> None:
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_dsn(postgres_server: PostgresServer | ExternalPostgres) -> Iterator[str]:
    """DSN of a fresh empty PostgreSQL database, dropped after the test."""
    dsn = create_database(postgres_server)
    try:
        yield dsn
    finally:
        drop_database(postgres_server, dsn)


@pytest.fixture(scope="session")
def pgbouncer_server(
    postgres_server: PostgresServer | ExternalPostgres,
) -> Iterator[PgBouncerServer]:
    """PgBouncer (Debian's ``pgbouncer``) in transaction pooling mode in front of the test
    PostgreSQL server, every database under its own name (tests/services.py)."""
    server = PgBouncerServer.in_front_of(postgres_server.dsn).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | str]:
    external = os.environ.get("GOATBEAT_TEST_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer | str) -> Iterator[str]:
    """URL of the test Redis, flushed before each test."""
    import redis

    url = redis_server if isinstance(redis_server, str) else redis_server.url
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
    yield url


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitMQServer | str]:
    """Debian's rabbitmq-server as a node of its own (tests/services.py), or the broker
    GOATBEAT_TEST_AMQP_URL names."""
    external = os.environ.get("GOATBEAT_TEST_AMQP_URL")
    if external:
        yield external
        return
    server = RabbitMQServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def amqp_url(rabbitmq_server: RabbitMQServer | str) -> Iterator[str]:
    """URL of the test RabbitMQ. Its queues are not emptied (listing them takes a
    ``rabbitmqctl`` run, a second or two): a test empties the queues it reads, or asks for
    ``rabbitmq``."""
    yield rabbitmq_server if isinstance(rabbitmq_server, str) else rabbitmq_server.url
    # kombu keeps one connection pool per broker URL for the process, and with each pooled
    # connection its record of the queues it declared: the next test's queues may be new.
    from kombu import pools

    pools.reset()


@pytest.fixture
def rabbitmq(rabbitmq_server: RabbitMQServer | str, amqp_url: str) -> RabbitMQServer:
    """The test RabbitMQ itself, every queue deleted, for tests that stop it or raise its
    alarms (skipped on an external broker)."""
    if isinstance(rabbitmq_server, str):
        pytest.skip("GOATBEAT_TEST_AMQP_URL: the tests do not stop somebody else's broker")
    rabbitmq_server.purge()
    return rabbitmq_server
