"""DjangoLedger: the idempotency ledger on a Django database alias (PostgreSQL).

For tasks of a Django project, whatever runs them (Django Tasks, Celery, RQ, Dramatiq): the
ledger uses Django's own connection for ``alias`` (default: ``GOATBEAT['database']``), so it
shares the project's settings and, inside a ``transaction.atomic`` block, its transaction.
``manage.py migrate`` creates the tables (goatbeat's migration 0002).

It also keeps the Django Tasks key notes (``goatbeat_task_key``): a Django Tasks message
carries no headers, so the scheduler notes which task result id it enqueued for which key, in
the enqueue's own transaction (see :mod:`goatbeat.idempotency.django_tasks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.errors import StoreError
from goatbeat.idempotency import Delivery
from goatbeat.idempotency.postgres import delivery_from_row
from goatbeat.stores import schema

__all__ = ["DjangoLedger"]


class DjangoLedger:
    """``DjangoLedger()`` on ``GOATBEAT['database']``, or ``DjangoLedger("other-alias")``."""

    def __init__(self, alias: str | None = None) -> None:
        self._alias = alias
        self._q = schema.queries("postgres")

    @property
    def alias(self) -> str:
        if self._alias is None:
            # Read the setting itself rather than through goatbeat.django (a floor above):
            # a worker process may run tasks without the goatbeat app being installed.
            from django.conf import settings

            configured = getattr(settings, "GOATBEAT", None) or {}
            alias = configured.get("database", "default") if isinstance(configured, dict) else None
            if not isinstance(alias, str) or not alias:
                raise StoreError(f"django ledger: GOATBEAT['database'] is {alias!r}, not an alias")
            self._alias = alias
        return self._alias

    def _fetch(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        from django.db import DatabaseError, connections

        try:
            with connections[self.alias].cursor() as cursor:
                cursor.execute(self._q[name], dict(params))
                if cursor.description is None:
                    return []
                names = [column[0] for column in cursor.description]
                return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        except DatabaseError as exc:
            raise StoreError(f"django ledger ({self.alias}): {exc}") from exc

    def begin(self, key: str, *, owner: str, lease: timedelta | None) -> bool:
        return bool(self._fetch("delivery_begin", {"key": key, "owner": owner, "lease": lease}))

    def duplicate(self, key: str) -> str | None:
        rows = self._fetch("delivery_duplicate", {"key": key})
        return str(rows[0]["state"]) if rows else None

    def succeeded(self, key: str, *, owner: str, counted: bool) -> None:
        self._fetch("delivery_succeeded", {"key": key, "owner": owner, "counted": counted})

    def failed(self, key: str, *, owner: str) -> None:
        self._fetch("delivery_failed", {"key": key, "owner": owner})

    def read(self, key: str) -> Delivery | None:
        rows = self._fetch("delivery_read", {"key": key})
        return delivery_from_row(rows[0]) if rows else None

    def prune(self, *, before: datetime) -> int:
        rows = self._fetch("delivery_prune", {"before": before})
        return int(rows[0]["deleted"])

    def note_task_key(self, backend_task_id: str, key: str) -> None:
        """Remember that Django Tasks result ``backend_task_id`` runs occurrence ``key``."""
        self._fetch("task_key_note", {"task_id": backend_task_id, "key": key})

    def task_key(self, backend_task_id: str) -> str | None:
        """The key noted for ``backend_task_id`` (None: not a guarded goatbeat submission)."""
        rows = self._fetch("task_key_find", {"task_id": backend_task_id})
        return str(rows[0]["idempotency_key"]) if rows else None

    def close(self) -> None:
        """Nothing to release: the connection belongs to Django."""
