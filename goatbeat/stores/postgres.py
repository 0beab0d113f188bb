"""PostgresStore: the production store, on psycopg 3.

It is :class:`~goatbeat.stores.store.DialectStore` over the PostgreSQL dialect:
:mod:`goatbeat.stores.dialects.postgres` says, in full, how its connections are kept (one in
autocommit, replaced after an error; a provider's, such as Django's), why every instant that
coordinates schedulers is the database's ``now()``, how wake-ups work (LISTEN/NOTIFY, a listen
connection of its own or polling behind a transaction-pooling proxy) and how a claim is capped
at what is left of the lease; its queries are in ``sql/postgres/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import InvalidValue
from goatbeat.stores.claims import Planner
from goatbeat.stores.dialects.postgres import (
    FREEZE_ENV,
    ConnectionProvider,
    DsnConnectionProvider,
    PostgresDialect,
)
from goatbeat.stores.store import DialectStore

__all__ = ["PostgresStore", "ConnectionProvider", "DsnConnectionProvider", "FREEZE_ENV"]


class PostgresStore(DialectStore):
    """A ScheduleStore on PostgreSQL.

    ``PostgresStore("postgresql://...")`` or ``PostgresStore(connection_provider=...)``.
    ``clock`` is accepted for symmetry with the other stores, but coordination never reads it:
    the database's ``now()`` is the only clock that counts here.

    It supports shards (:class:`~goatbeat.core.store.ShardedStore`): a claim under the lease of
    shard K of N touches only that shard's schedules, and ``pending``, ``next_due_at`` and
    ``next_retry_at`` take the shard to look at."""

    dialect: PostgresDialect

    def __init__(
        self,
        dsn: str | None = None,
        *,
        connection_provider: ConnectionProvider | None = None,
        clock: Clock | None = None,
        planner: Planner | None = None,
        pooled: bool = False,
        listen_database: str | None = None,
        listen_provider: ConnectionProvider | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        if connection_provider is None:
            if not dsn:
                raise InvalidValue("database", dsn, "PostgresStore needs a DSN or a provider")
            connection_provider = DsnConnectionProvider(dsn)
        # Behind a transaction-pooling proxy: ``pooled=True``, and ``listen_database`` (a
        # direct postgresql:// URL) or ``listen_provider`` for the LISTEN connection; with
        # neither, wait() polls every ``poll_interval`` seconds. A listen database implies
        # ``pooled``.
        if listen_provider is None and listen_database:
            # A short connect timeout: the attempt happens inside the scheduler's sleep.
            listen_provider = DsnConnectionProvider(
                listen_database, connect_timeout=2.0, application_name="goatbeat-listen"
            )
        if not poll_interval > 0:
            raise InvalidValue("poll_interval", poll_interval, "must be above 0 seconds")
        self.dsn = dsn
        dialect = PostgresDialect(
            connection_provider,
            listen_provider=listen_provider,
            pooled=pooled,
            poll_interval=poll_interval,
        )
        super().__init__(dialect, clock or SystemClock(), planner)

    @property
    def provider(self) -> ConnectionProvider:
        return self.dialect.provider

    @property
    def listen_provider(self) -> ConnectionProvider | None:
        """The direct connection wake-ups LISTEN on, when the main one is pooled."""
        return self.dialect.listen_provider

    @property
    def pooled(self) -> bool:
        return self.dialect.pooled

    @property
    def poll_interval(self) -> float:
        return self.dialect.poll_interval

    @property
    def last_payload(self) -> str | None:
        """The last valid payload wait() saw (for logs); invalid ones are plain wake-ups."""
        return self.dialect.last_payload

    @last_payload.setter
    def last_payload(self, value: str | None) -> None:
        self.dialect.last_payload = value

    @property
    def _listen_retry_at(self) -> float | None:
        return self.dialect.listen_retry_at

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """The store's connection, for tests that write behind its back."""
        with self.dialect.connection() as conn:
            yield conn
