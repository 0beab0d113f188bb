"""The primitives of :mod:`goatbeat.stores.dialect`'s ``Tx`` that are one named query (or a few,
run together) in every dialect, written once: :class:`NamedQueryTx`, the base of
:class:`~goatbeat.stores.dialects.sqlite_tx.SQLiteTx` and
:class:`~goatbeat.stores.dialects.postgres_tx.PostgresTx`. Each dialect answers the four hooks
(how a query's rows are read, how a write runs, what makes several statements one, how an
array is passed) and its own ``queries.sql`` holds the text under the same name and
parameters; what differs between the databases (SQLite's clock, its JSON arrays) stays in the
hooks and the SQL.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from goatbeat.core.model import Miss

__all__ = ["NamedQueryTx", "miss_rows", "executions_query"]


class NamedQueryTx:
    """The shared primitives, over the hooks a dialect's handle defines."""

    # -- the hooks -------------------------------------------------------------------------

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run query ``name``: its rows, decoded (:mod:`goatbeat.stores.dialect`'s rows)."""
        raise NotImplementedError

    def _write(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run the write ``name`` atomically on its own (or in the open transaction): the rows
        it changed."""
        raise NotImplementedError

    def _atomic(self) -> AbstractContextManager[Any]:
        """Several statements as one: a transaction of their own outside the caller's."""
        raise NotImplementedError

    def _array(self, values: Sequence[Any]) -> Any:
        """``values`` as the dialect's queries take an array parameter."""
        raise NotImplementedError

    def _one(self, name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    # -- schedules -------------------------------------------------------------------------

    def schedule(self, name: str) -> dict[str, Any] | None:
        return self._one("schedule_by_name", {"name": name})

    def source_has_rows(self, source: str) -> bool:
        return self._one("source_has_rows", {"source": source}) is not None

    def orphans(self, source: str, declared: Sequence[str]) -> list[str]:
        rows = self._rows("orphans", {"source": source, "names": json.dumps(list(declared))})
        return [r["name"] for r in rows]

    def publication_generation(self, fingerprint: str) -> int | None:
        row = self._one("publication_generation_of", {"fingerprint": fingerprint})
        return None if row is None or row["generation"] is None else int(row["generation"])

    def rename_schedule(self, id: int, version: int, new_name: str) -> int:
        with self._atomic():
            written = self._write(
                "schedule_rename", {"id": id, "version": version, "new_name": new_name}
            )
            if written:
                self._write("schedule_rename_history", {"id": id, "new_name": new_name})
                self._write("schedule_rename_misses", {"id": id, "new_name": new_name})
            return written

    def set_enabled(self, id: int, version: int, values: Mapping[str, Any]) -> int:
        return self._write("schedule_set_enabled", {**values, "id": id, "version": version})

    def prune(self, source: str, keep: Collection[str]) -> list[str]:
        with self._atomic():
            rows = self._rows("prune", {"source": source, "keep": self._array(sorted(keep))})
        return [r["name"] for r in rows]

    def withdraw_waiting(self, schedule_id: int, error: str) -> int:
        return self._write("pause_withdraw", {"id": schedule_id, "error": error})

    def pause(self, schedule_id: int, values: Mapping[str, Any], withdrawn: int) -> None:
        self._write("pause", {**values, "id": schedule_id, "withdrawn": withdrawn})

    def resume(self, id: int, version: int, next_run_at: datetime | None, skipped: int) -> int:
        params = {"id": id, "version": version, "next_run_at": next_run_at}
        return self._write("resume", {**params, "skipped_count": skipped})

    def delete_schedule(self, schedule_id: int, error: str) -> None:
        with self._atomic():
            self._write("abandon_claimed", {"id": schedule_id, "error": error})
            self._write("schedule_delete", {"id": schedule_id})

    def execution_statuses(self, keys: Sequence[str]) -> dict[str, str]:
        rows = self._rows("statuses_by_keys", {"keys": self._array(list(keys))})
        return {r["idempotency_key"]: str(r["status"]) for r in rows}

    def executions(self, name: str | None, status: str | None, limit: int) -> list[dict[str, Any]]:
        params = {"limit": limit, "name": name, "status": status}
        return self._rows(executions_query(name, status), params)

    # -- reports and operations ------------------------------------------------------------

    def open_runs(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        started = self._rows("open_runs_started", {"limit": limit})
        return started + self._rows("open_runs_submitted", {"since": since, "limit": limit})

    def retry_now(self) -> int:
        return self._write("retry_now")

    def refused_schedules(self) -> list[dict[str, Any]]:
        return self._rows("refused_schedules")

    def longest_bound(self) -> float:
        row = self._one("longest_bound")
        return float(row["seconds"] or 0) if row is not None else 0.0

    def remove_scheduler(self, scheduler_id: str) -> None:
        self._write("scheduler_remove", {"scheduler_id": scheduler_id})

    def status_counts(self, now: datetime, since: datetime) -> dict[str, int]:
        row = self._one("status_counts", {"now": now, "since": since})
        assert row is not None
        return {k: int(v) for k, v in row.items()}

    def schedulers(self) -> list[dict[str, Any]]:
        return self._rows("schedulers")

    def schedule_health(self, late: datetime, limit: int | None) -> list[dict[str, Any]]:
        return self._rows("schedule_health", {"late": late, "limit": limit})


def miss_rows(misses: Sequence[Miss], scheduler_id: str) -> list[dict[str, Any]]:
    """``record_miss``'s parameters, one row a miss (misses are rare: an outage, a long pause;
    a statement per schedule is plenty)."""
    return [
        {
            "schedule_id": m.schedule_id,
            "schedule_name": m.schedule_name,
            "missed": m.count,
            "first_at": m.first_at,
            "last_at": m.last_at,
            "scheduler_id": scheduler_id,
        }
        for m in misses
    ]


def executions_query(name: str | None, status: str | None) -> str:
    """The named query :meth:`NamedQueryTx.executions` runs (with ``limit``, ``name`` and
    ``status``): four spellings rather than "param IS NULL OR ...", so each one gets an index
    plan."""
    if name is not None:
        return "executions_by_name_status" if status is not None else "executions_by_name"
    return "executions" if status is None else "executions_by_status"
