"""A ConnectionProvider over Django's own connection for the ``GOATBEAT['database']`` alias.

The store asks for a connection with ``get()`` and reports a broken one with ``discard()``.
The provider hands out the raw psycopg connection behind ``django.db.connections[alias]``, so
goatbeat shares Django's settings (OPTIONS, SSL, pooling) and its per-thread connection. It is
kept across scheduler iterations, as CONN_MAX_AGE / CONN_HEALTH_CHECKS ask a long-running
process to do, and replaced only after an error: a connection that failed is closed on
``discard()`` and the next ``get()`` opens a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import psycopg

__all__ = ["DjangoConnectionProvider", "StoreConnection"]


class StoreConnection:
    """The store's view of a connection Django opened.

    Django registers a text loader for ``json``/``jsonb`` on its connections (its JSONField
    decodes JSON itself), while the store expects decoded values. This view carries its own
    adapters map (Django's, plus psycopg's JSON loaders), which every cursor created on the
    view copies, whether through :meth:`cursor` or ``psycopg.Cursor(view)``; Django's cursors
    on the same connection keep exactly what Django configured. Everything else is the
    connection itself."""

    __slots__ = ("raw", "adapters")

    def __init__(self, raw: Any) -> None:
        from psycopg.adapt import AdaptersMap
        from psycopg.types.json import JsonbLoader, JsonLoader

        self.raw = raw
        self.adapters = AdaptersMap(raw.adapters)
        self.adapters.register_loader("jsonb", JsonbLoader)
        self.adapters.register_loader("json", JsonLoader)

    def cursor(self, *, row_factory: Any = None) -> Any:
        import psycopg

        factory: Any = psycopg.Cursor
        if row_factory is None:
            return factory(self)
        return factory(self, row_factory=row_factory)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return self.cursor().execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _is_psycopg_error(exc: BaseException | None) -> TypeGuard[psycopg.Error]:
    import psycopg

    return isinstance(exc, psycopg.Error)


class DjangoConnectionProvider:
    def __init__(self, alias: str = "default") -> None:
        self.alias = alias
        self._view: StoreConnection | None = None

    def _wrapper(self) -> Any:
        from django.db import connections

        return connections[self.alias]

    def get(self) -> Any:
        """The psycopg connection of this thread's Django connection, opened if needed."""
        wrapper = self._wrapper()
        raw = wrapper.connection
        if raw is not None and (raw.closed or raw.broken):
            # psycopg noticed the server went away; Django has not yet.
            wrapper.close()
        try:
            wrapper.ensure_connection()
        except Exception as exc:
            # Django wraps the driver's error in its own class (django.db.OperationalError),
            # which the store does not know: hand it psycopg's, so a database that cannot be
            # reached is a StoreError (one line, "cannot tell") like on the store's own
            # connections, not a traceback.
            cause = exc.__cause__
            if _is_psycopg_error(cause):
                raise cause.with_traceback(None) from None
            raise
        raw = wrapper.connection
        # The same view for the same connection: the store re-LISTENs when the object changes.
        if self._view is None or self._view.raw is not raw:
            self._view = StoreConnection(raw)
        return self._view

    def discard(self, conn: Any = None) -> None:
        """Close the connection after an error, so the next :meth:`get` reconnects."""
        wrapper = self._wrapper()
        if isinstance(conn, StoreConnection):
            conn = conn.raw
        self._view = None
        if conn is not None and wrapper.connection is not conn:
            # Already replaced; just make sure the stale one is gone.
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is broken anyway
                pass
            return
        try:
            wrapper.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may itself fail
            wrapper.connection = None

    def close(self) -> None:
        """Nothing to release: the connection belongs to Django, which closes it."""
