"""The store under test: every conformance test runs once per store, unchanged.

``backend.make()`` opens another store object on the same data (another connection for SQLite
and PostgreSQL; the same object for memory, which has no second connection), so tests can play
two schedulers or an admin editing while a scheduler claims.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.store import ScheduleStore
from goatbeat.stores import MemoryStore, SQLiteStore
from tests.conformance import golden


@pytest.fixture(autouse=True)
def golden_trace(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test's store calls are compared with its golden trace (tests/conformance/golden.py)."""
    with golden.tracing() as trace:
        yield
    difference = golden.finish(request.node.nodeid, trace)
    if difference is not None:
        pytest.fail(difference, pytrace=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    golden.write_recorded()


@dataclass
class Backend:
    kind: str
    url: str | None  # what another process passes to open_store (None: in-process only)
    factory: Callable[[], ScheduleStore]
    opened: list[ScheduleStore] = field(default_factory=list)

    def make(self) -> ScheduleStore:
        store = self.factory()
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(scope="session")
def conformance_pg(postgres_server: Any) -> Iterator[str]:
    """One migrated database for the whole suite, emptied before each test (creating a
    database per test would cost more than all the tests together)."""
    import psycopg

    from goatbeat.stores.postgres import PostgresStore

    name = f"gb_conformance_{os.getpid()}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn: str = postgres_server.dsn_for(name)
    with golden.untraced():
        store = PostgresStore(dsn)
        store.migrate()
        store.close()
    try:
        yield dsn
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _empty_pg(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE goatbeat_execution, goatbeat_schedule, goatbeat_lease, goatbeat_scheduler, "
            "goatbeat_miss, goatbeat_publication RESTART IDENTITY"
        )
    return dsn


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        "postgres",
        # PostgreSQL through PgBouncer in transaction pooling mode (LISTEN on a direct
        # connection): the kind stays "postgres", only the connection differs.
        pytest.param("pgbouncer", marks=pytest.mark.pgbouncer),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind: str = request.param
    if kind == "pgbouncer":
        from goatbeat.stores.postgres import PostgresStore

        direct = _empty_pg(request.getfixturevalue("conformance_pg"))
        pooled = request.getfixturevalue("pgbouncer_server").pooled(direct)
        b = Backend("postgres", pooled, lambda: PostgresStore(pooled, listen_database=direct))
    elif kind == "memory":
        shared = MemoryStore()
        b = Backend(kind, None, lambda: shared)
    elif kind == "sqlite":
        path = tmp_path / "goatbeat.db"
        b = Backend(kind, f"sqlite:///{path}", lambda: SQLiteStore(path))
    else:
        from goatbeat.stores.postgres import PostgresStore

        dsn = _empty_pg(request.getfixturevalue("conformance_pg"))
        b = Backend(kind, dsn, lambda: PostgresStore(dsn))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def store(backend: Backend) -> ScheduleStore:
    s = backend.make()
    s.migrate()
    return s
