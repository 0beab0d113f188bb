"""The ScheduleStore implementations and :func:`open_store`, which picks one from a URL.

- ``memory://`` -> :class:`~goatbeat.stores.memory.MemoryStore` (tests, one process)
- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` ->
  :class:`~goatbeat.stores.sqlite.SQLiteStore` (the embedded default; processes on one host)
- ``postgresql://...`` or ``postgres://...`` -> :class:`~goatbeat.stores.postgres.PostgresStore`
  (production; needs psycopg 3, imported only here)

:func:`redact_url` masks a database URL's password wherever one is shown (logs, messages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from goatbeat.core.clock import Clock
from goatbeat.core.errors import InvalidValue
from goatbeat.core.store import ScheduleStore
from goatbeat.stores.definitions import schedule_changes
from goatbeat.stores.rows import read_schedule

if TYPE_CHECKING:
    from goatbeat.stores.memory import MemoryStore
    from goatbeat.stores.postgres import PostgresStore
    from goatbeat.stores.sqlite import SQLiteStore

__all__ = [
    "open_store",
    "read_schedule",
    "redact_url",
    "schedule_changes",
    "MemoryStore",
    "SQLiteStore",
    "PostgresStore",
]

_EXAMPLES = "memory://, sqlite:///relative.db, sqlite:////abs/path.db, postgresql://user@host/db"


def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    pooled: bool = False,
    listen_database: str | None = None,
    poll_interval: float = 1.0,
) -> ScheduleStore:
    """The store ``url`` names. Does not connect or migrate yet (PostgreSQL connects on first
    use); raises InvalidValue (field ``database``) for a URL it cannot use.

    ``pooled``, ``listen_database`` and ``poll_interval`` are for PostgreSQL behind a
    transaction-pooling proxy (:class:`~goatbeat.stores.postgres.PostgresStore`); another
    store refuses them (field ``listen_database`` or ``pooled``)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidValue("database", url, f"{url!r} is not a store URL (try {_EXAMPLES})")
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise InvalidValue("database", url, f"{url!r} has no scheme (try {_EXAMPLES})")
    if scheme not in ("postgresql", "postgres") and (listen_database or pooled):
        field, value = ("listen_database", listen_database) if listen_database else ("pooled", True)
        raise InvalidValue(
            field, value, f"only a PostgreSQL database is pooled, not {redact_url(text)!r}"
        )
    if scheme == "memory":
        if rest not in ("", "/"):
            raise InvalidValue("database", url, f"{url!r}: memory:// takes no path")
        from goatbeat.stores.memory import MemoryStore

        return MemoryStore(clock=clock)
    if scheme == "sqlite":
        # sqlite:///x.db -> "x.db" (relative); sqlite:////abs/x.db -> "/abs/x.db"
        if not rest.startswith("/") or rest in ("/", "//"):
            raise InvalidValue(
                "database",
                url,
                f"{url!r}: write sqlite:///relative.db or sqlite:////absolute/path.db",
            )
        path = rest[1:]
        if "?" in path or "#" in path:
            raise InvalidValue("database", url, f"{url!r}: SQLite URLs take no query string")
        from goatbeat.stores.sqlite import SQLiteStore

        return SQLiteStore(path, clock=clock)
    if scheme in ("postgresql", "postgres"):
        try:
            from goatbeat.stores.postgres import PostgresStore
        except ImportError as exc:
            raise InvalidValue(
                "database",
                url,
                f"PostgreSQL needs psycopg 3: pip install 'goatbeat[postgres]' ({exc})",
            ) from None
        if listen_database is not None and "://" not in listen_database:
            raise InvalidValue(
                "listen_database",
                listen_database,
                f"{listen_database!r} is not a postgresql:// URL (a DATABASES alias only means "
                "something in a Django project)",
            )
        return PostgresStore(
            text,
            clock=clock,
            pooled=pooled,
            listen_database=listen_database,
            poll_interval=poll_interval,
        )
    raise InvalidValue("database", url, f"unknown store scheme {scheme!r} (try {_EXAMPLES})")


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``: safe for logs and messages."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def __getattr__(name: str) -> object:
    # Each store is imported when it is first asked for: PostgresStore without making psycopg
    # a hard dependency, the others so that a PostgreSQL scheduler starts without them.
    if name == "PostgresStore":
        from goatbeat.stores.postgres import PostgresStore

        return PostgresStore
    if name == "MemoryStore":
        from goatbeat.stores.memory import MemoryStore

        return MemoryStore
    if name == "SQLiteStore":
        from goatbeat.stores.sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
