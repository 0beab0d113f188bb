"""The PostgreSQL dialect's transaction primitives: :class:`PostgresTx`, the answers to
:mod:`goatbeat.stores.dialect`'s ``Tx`` on one connection of a
:class:`~goatbeat.stores.dialects.postgres.PostgresDialect` (which opens it, in a transaction or
autocommit), with the named queries of ``sql/postgres/queries.sql``, each over arrays in one
statement. :mod:`goatbeat.stores.dialects.postgres` says how the connections are kept.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from goatbeat.core.health import SchedulerBeat
from goatbeat.core.model import ExecutionStatus, LeaseGrant, Miss, SubmitOutcome
from goatbeat.core.shards import Shard
from goatbeat.stores import schema
from goatbeat.stores.definitions import JSON_COLUMNS, definition_json
from goatbeat.stores.dialect import (
    Advanced,
    ClaimCheck,
    Completion,
    NameTaken,
    NewExecution,
    Replace,
    Tx,
    heartbeat_columns,
    miss_rows,
)


class Connections(Protocol):
    """What the primitives take from the dialect that opened their connection
    (:class:`~goatbeat.stores.dialects.postgres.PostgresDialect`): named here, so this
    module does not import the one that imports it."""

    q: dict[str, str]

    def fetch(
        self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]: ...

    def maybe_freeze(self, lease: LeaseGrant) -> None: ...


__all__ = ["PostgresTx"]


def _unless_all(values: list[Any], usual: Any) -> list[Any]:
    """``values``, or an empty array when every one is ``usual``: the claim's statements read
    the NULLs unnest pads it with as that value (see claim_advance in queries.sql)."""
    for value in values:
        if value is not usual and value != usual:
            return values
    return []


def _last_statuses(values: list[str | None]) -> dict[str, Any]:
    """claim_advance's last_status parameters: one value for the batch when all are the same
    status, else the array."""
    first = values[0] if values else None
    if first is not None and all(v == first for v in values):
        return {"last_status": [], "last_status_all": first}
    return {"last_status": values, "last_status_all": None}


def _params(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: Jsonb(v) if k in JSON_COLUMNS else v for k, v in row.items()}


_COPY_COLUMNS = (
    "name", "source", "task", "trigger", "timezone", "args", "kwargs", "queue", "exchange",
    "routing_key", "priority", "expires", "headers", "misfire_policy", "misfire_grace",
    "catch_up_limit", "one_off", "enabled", "start_at", "end_at", "next_run_at", "last_run_at",
    "total_run_count", "description", "published_fingerprint", "jitter", "overlap",
    "max_runtime", "pause_on_failure",
)  # fmt: skip
"""The columns of ``schedule_copy``, in its order."""


class PostgresTx(Tx):
    """The primitives on one connection: each one statement (a few for a batch without
    arrays), in the caller's transaction or, outside one, autocommit."""

    def __init__(
        self,
        dialect: Connections,
        conn: psycopg.Connection[Any],
        *,
        in_transaction: bool,
        own: bool = True,
    ) -> None:
        self.d = dialect
        self.q = dialect.q
        self.conn = conn
        self.in_transaction = in_transaction
        self.own = own
        self._compares: list[tuple[psycopg.Cursor[Any], set[str]]] = []
        self._pipelined = False

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.d.fetch(self.conn, name, params)

    def _write(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run ``name`` for the rows it changes (any rows it returns are left unread)."""
        with psycopg.Cursor(self.conn) as cur:
            cur.execute(self.q[name], params)
            return max(0, cur.rowcount)

    def _atomic(self) -> Any:
        return nullcontext() if self.in_transaction else self.conn.transaction()

    def _array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _utc(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def _shard(self, shard: Shard) -> dict[str, Any]:
        """The count and the OTHER shards (see queries.sql)."""
        others = [i for i in range(shard.count) if i != shard.index]
        return {"shards": shard.count, "others": others}

    def now(self) -> datetime:
        row = self._one("now")
        assert row is not None
        return row["now"].astimezone(UTC)  # type: ignore[no-any-return]

    def notify(self, payload: str) -> None:
        # Inside a transaction the notification goes out at commit, with the change.
        self.conn.execute(self.q["notify"], {"payload": payload})

    # -- schedules -------------------------------------------------------------------------

    def schedules(self, source: str | None) -> list[dict[str, Any]]:
        return self._rows("list_schedules", {"source": source})

    def schedules_named(self, names: Sequence[str]) -> list[dict[str, Any]]:
        return self._rows("schedules_by_names", {"names": list(names)})

    @contextmanager
    def comparing(self) -> Iterator[None]:
        # The comparisons are pipelined: the database compares one chunk while the store
        # validates the next.
        self._pipelined = psycopg.Pipeline.is_supported()
        with self.conn.pipeline() if self._pipelined else nullcontext():
            try:
                yield
                self._collect()
            finally:
                for cur, _ in self._compares:
                    cur.close()
                self._compares.clear()

    def unchanged(
        self, declared: Sequence[Sequence[Any]], shared: Sequence[Sequence[Any]], source: str
    ) -> Collection[str] | None:
        """``publish_unchanged`` for one chunk: the declarations as JSON (each one's own
        columns; the columns they share once per distinct combination), names back only."""
        answer: set[str] = set()
        cur = psycopg.Cursor(self.conn)
        self._compares.append((cur, answer))
        cur.execute(
            self.q["publish_unchanged"],
            {
                "declared": json.dumps(declared, separators=(",", ":")),
                "shared": definition_json(shared),
                "source": source,
            },
        )
        if not self._pipelined:
            self._collect()
        return answer

    def _collect(self) -> None:
        while self._compares:
            cur, answer = self._compares.pop(0)
            with cur:
                answer.update(row[0] for row in cur.fetchall())

    def lock_publication(self) -> None:
        self.conn.execute(self.q["publish_lock"])

    def current_publication(self) -> dict[str, Any] | None:
        found = self._one("publication_current")
        if found is not None:
            found["published_at"] = found["published_at"].astimezone(UTC)
        return found

    def insert_schedules(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert new rows with one COPY (``schedule_copy``), not one statement each."""
        texts: dict[int, tuple[Any, str]] = {}

        def as_json(column: str, value: Any) -> str:
            # JSON text for a jsonb column (COPY parses it): a trigger spec, shared by the rows
            # of one trigger object, is encoded once; an empty value never.
            if not value:
                return "[]" if isinstance(value, list) else "{}"
            if column != "trigger":
                return json.dumps(value)
            known = texts.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            text = json.dumps(value)
            texts[id(value)] = (value, text)
            return text

        with psycopg.Cursor(self.conn) as cur, cur.copy(self.q["schedule_copy"]) as copy:
            for row in rows:
                copy.write_row(
                    [
                        as_json(column, row[column]) if column in JSON_COLUMNS else row[column]
                        for column in _COPY_COLUMNS
                    ]
                )

    def create_schedule(self, row: Mapping[str, Any]) -> dict[str, Any]:
        try:
            stored = self._one("schedule_insert", _params(row))
        except pg_errors.UniqueViolation as exc:
            raise NameTaken(f"postgres: {exc}") from exc
        assert stored is not None
        return stored

    def replace_schedules(self, replaces: Sequence[Replace]) -> int:
        params = []
        for rep in replaces:
            p = _params(rep.values)
            p.update(id=rep.id, version=rep.version)
            params.append(p)
        with psycopg.Cursor(self.conn) as cur:
            cur.executemany(self.q["schedule_replace"], params)
            return max(0, cur.rowcount)

    def set_fingerprints(self, pairs: Sequence[tuple[int, str]]) -> None:
        with psycopg.Cursor(self.conn) as cur:
            cur.executemany(
                self.q["schedule_set_fingerprint"],
                [{"id": sid, "published_fingerprint": printed} for sid, printed in pairs],
            )

    def insert_backfill(
        self, schedule_id: int, name: str, instants: Sequence[datetime], keys: Sequence[str]
    ) -> set[datetime]:
        written = self._rows(
            "backfill_insert",
            {
                "schedule_id": schedule_id,
                "name": name,
                "instants": list(instants),
                "keys": list(keys),
            },
        )
        return {r["scheduled_at"].astimezone(UTC) for r in written}

    def request_run(
        self, schedule_id: int, name: str, at: datetime, key: str
    ) -> dict[str, Any] | None:
        params = {"schedule_id": schedule_id, "name": name, "at": at, "key": key}
        return self._one("request_run", params)

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        row = self._one("lease_acquire", {"name": name, "holder": holder, "ttl": ttl})
        if row is None:
            return None
        return LeaseGrant(
            name=row["name"],
            holder=row["holder"],
            token=int(row["token"]),
            expires_at=row["expires_at"].astimezone(UTC),
        )

    def release_lease(self, name: str, holder: str, token: int, payload: str | None) -> bool:
        params = {"name": name, "holder": holder, "token": token, "payload": payload}
        return self._one("lease_release", params) is not None

    def _leases(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in rows:
            r["expires_at"] = r["expires_at"].astimezone(UTC)
            r["expired"] = bool(r["expired"])
        return rows

    def read_leases(self, names: Sequence[str]) -> list[dict[str, Any]]:
        return self._leases(self._rows("lease_read_many", {"names": list(names)}))

    def scheduler_leases(self) -> list[dict[str, Any]]:
        return self._leases(self._rows("leases_like"))

    # -- claiming --------------------------------------------------------------------------

    def check_lease(self, lease: LeaseGrant) -> ClaimCheck | None:
        check = self._one(
            "claim_check_lease",
            {
                "name": lease.name,
                "holder": lease.holder,
                "token": lease.token,
                # Only a transaction of our own may be capped by the check (see the query).
                "own": self.own,
            },
        )
        if check is None:
            return None
        return ClaimCheck(now=check["now"].astimezone(UTC), buffered=bool(check["buffered"]))

    def due(self, now: datetime, limit: int, shard: Shard) -> list[dict[str, Any]]:
        return self._rows("claim_select_due", {"now": now, "limit": limit, **self._shard(shard)})

    @contextmanager
    def recording(self, outcomes: Sequence[SubmitOutcome]) -> Iterator[None]:
        """Write ``outcomes`` (record_outcomes' statement, in the open transaction) while the
        block runs. In pipeline mode the statement goes out at once and the block's work (the
        store decoding the due rows) overlaps the server's; leaving the block waits for the
        write and raises its error."""
        query, params = _record_statement(outcomes)
        with psycopg.Cursor(self.conn) as cur:
            if not psycopg.Pipeline.is_supported():
                cur.execute(query, params)
                yield
                return
            with self.conn.pipeline():
                cur.execute(query, params)
                yield

    def begin_writes(self, lease: LeaseGrant) -> bool:
        return True  # the lease row is held FOR SHARE since check_lease

    def quarantine(self, damaged: Sequence[tuple[int, int]], status: str) -> set[int]:
        rows = self._rows(
            "claim_quarantine",
            {"ids": [i for i, _ in damaged], "versions": [v for _, v in damaged], "status": status},
        )
        return {int(r["id"]) for r in rows}

    def advance(self, advances: Sequence[Advanced], lease: LeaseGrant) -> set[int]:
        rows = self._rows(
            "claim_advance",
            {
                "ids": [a.id for a in advances],
                "versions": [a.version for a in advances],
                "next_run_at": [a.next_run_at for a in advances],
                "last_run_at": [a.last_run_at for a in advances],
                **_last_statuses([a.last_status for a in advances]),
                "runs": _unless_all([a.runs for a in advances], 1),
                "missed": _unless_all([a.missed for a in advances], 0),
                "skipped": _unless_all([a.skipped for a in advances], 0),
                "disable": _unless_all([a.disable for a in advances], False),
            },
        )
        advanced = {int(r["id"]) for r in rows}
        if advanced:
            self.d.maybe_freeze(lease)
        return advanced

    def insert_executions(
        self, executions: Sequence[NewExecution], token: int, scheduler_id: str
    ) -> dict[str, int]:
        rows = self._rows(
            "claim_insert_executions",
            {
                "token": token,
                "scheduler_id": scheduler_id,
                "schedule_ids": [e.schedule_id for e in executions],
                "names": [e.schedule_name for e in executions],
                "scheduled_at": [e.scheduled_at for e in executions],
                "keys": [e.key for e in executions],
                "statuses": _unless_all(
                    [e.status for e in executions], ExecutionStatus.CLAIMED.value
                ),
                "retry_at": _unless_all([e.retry_at for e in executions], None),
            },
        )
        return {r["idempotency_key"]: int(r["id"]) for r in rows}

    def started_runs(self, runs: Mapping[int, int]) -> None:
        self._write("started_runs", {"ids": list(runs), "execution_ids": list(runs.values())})

    def promote(self, ids: Sequence[int], token: int, scheduler_id: str) -> list[dict[str, Any]]:
        params = {"ids": list(ids), "token": token, "scheduler_id": scheduler_id}
        return self._rows("promote_buffered", params)

    def abandon(self, failed: Sequence[tuple[int, str]]) -> None:
        params = {"ids": [i for i, _ in failed], "errors": [e for _, e in failed]}
        self._write("abandon_damaged", params)

    def next_due_at(self, shard: Shard) -> datetime | None:
        row = self._one("next_due_at", self._shard(shard))
        value = None if row is None else row["next_due_at"]
        return None if value is None else value.astimezone(UTC)

    def next_retry_at(self, shard: Shard) -> datetime | None:
        row = self._one("next_retry_at", self._shard(shard))
        at = None if row is None else row["at"]
        return None if at is None else at.astimezone(UTC)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        query, params = _record_statement(outcomes)
        with psycopg.Cursor(self.conn) as cur:
            cur.execute(query, params)

    def refuse(self, schedule_id: int, task: str, reason: str) -> bool:
        row = self._one("refuse", {"id": schedule_id, "task": task, "reason": reason})
        return row is not None and int(row["matched"]) > 0

    def claim_manual_runs(
        self, lease: LeaseGrant, scheduler_id: str, ids: Sequence[int], shard: Shard
    ) -> list[int]:
        with self._atomic():
            rows = self._rows(
                "claim_manual_runs",
                {
                    "name": lease.name,
                    "holder": lease.holder,
                    "token": lease.token,
                    "scheduler_id": scheduler_id,
                    "ids": list(ids),
                    **self._shard(shard),
                },
            )
        return [int(r["id"]) for r in rows]

    # -- reports and operations --------------------------------------------------------------

    def record_started(self, key: str, worker: str | None) -> bool:
        row = self._one("record_started", {"key": key, "worker": worker})
        return row is not None and int(row["matched"]) > 0

    def record_completion(
        self,
        key: str,
        outcome: str,
        error: str | None,
        runtime: float | None,
        worker: str | None,
        only_open: bool = False,
    ) -> Completion:
        row = self._one(
            "record_completion",
            {
                "key": key,
                "outcome": outcome,
                "error": error,
                "runtime": runtime,
                "worker": worker,
                "only_open": only_open,
            },
        )
        if row is None:
            return Completion(matched=False)
        pause = None
        if row["pause_name"] is not None:  # the pause_on_failure rule, applied in the query
            pause = (str(row["pause_name"]), int(row["failures"]))
        return Completion(matched=int(row["matched"]) > 0, pause=pause)

    def heartbeat(self, beat: SchedulerBeat, retention: timedelta) -> None:
        with self._atomic():
            self._rows("heartbeat", {**heartbeat_columns(beat), "ttl": beat.ttl})
            self._rows("scheduler_cleanup", {"retention": retention})

    def record_misses(
        self, misses: Sequence[Miss], scheduler_id: str, retention: timedelta
    ) -> None:
        with self._atomic(), psycopg.Cursor(self.conn) as cur:
            cur.executemany(self.q["record_miss"], miss_rows(misses, scheduler_id))
            cur.execute(self.q["miss_prune"], {"retention": retention})

    def live_schedulers(self, within: timedelta, shards: int) -> list[str]:
        rows = self._rows("live_schedulers", {"within": within, "shards": shards})
        return [str(r["scheduler_id"]) for r in rows]


def _record_statement(outcomes: Sequence[SubmitOutcome]) -> tuple[str, dict[str, Any]]:
    """record_outcomes' statement and parameters: the lean one when all are successes."""
    q = schema.queries("postgres")
    if all(o.ok for o in outcomes):
        return q["record_submitted"], {
            "ids": [o.execution_id for o in outcomes],
            "keys": [o.idempotency_key for o in outcomes],
            "backend_task_ids": [o.backend_task_id for o in outcomes],
        }
    return q["record_outcomes"], {
        "ids": [o.execution_id for o in outcomes],
        "keys": [o.idempotency_key for o in outcomes],
        "ok": [bool(o.ok) for o in outcomes],
        "final": [bool(o.final) for o in outcomes],
        "missed": [bool(o.missed) for o in outcomes],
        "retry_in": [None if o.retry_in is None else max(0.0, float(o.retry_in)) for o in outcomes],
        "backend_task_ids": [o.backend_task_id for o in outcomes],
        "errors": [o.error for o in outcomes],
    }
