"""The SQLite dialect's transaction primitives: :class:`SQLiteTx`, the answers to
:mod:`goatbeat.stores.dialect`'s ``Tx`` on the connection of a
:class:`~goatbeat.stores.dialects.sqlite.SQLiteDialect`, with the named queries of
``sql/sqlite/queries.sql``, and how values are stored (instants as ISO text, JSON columns as
text). SQLite has no arrays: a primitive over a batch passes it as one JSON array that its
statement reads with ``json_each``, or runs its statement once per row (``executemany``) when it
needs no answer per row, inside the one transaction. :mod:`goatbeat.stores.dialects.sqlite` says how the connection is
kept and how writers share the lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from goatbeat.core.health import SchedulerBeat
from goatbeat.core.model import (
    ENDED_BY_REPORT,
    FAILURE_STATUSES,
    OPEN_STATUSES,
    ExecutionStatus,
    LeaseGrant,
    Miss,
    SubmitOutcome,
)
from goatbeat.core.shards import Shard
from goatbeat.stores.definitions import JSON_COLUMNS, SCHEDULE_TIMES
from goatbeat.stores.dialect import (
    Advanced,
    ClaimCheck,
    Completion,
    NewExecution,
    Replace,
    Tx,
    heartbeat_columns,
    miss_rows,
)
from goatbeat.stores.rows import buffer_ready_at


class Connections(Protocol):
    """What the primitives take from the dialect that opened their connection
    (:class:`~goatbeat.stores.dialects.sqlite.SQLiteDialect`): named here, so this module
    does not import the one that imports it."""

    q: dict[str, str]
    timed: frozenset[str]
    """The queries that take the store's clock as ``:now``."""
    data_version: int | None

    def now(self) -> datetime: ...

    def wake_local(self) -> None: ...


__all__ = ["SQLiteTx", "encode_time", "decode_time"]

_SCAN_OVER = 200  # a publication reading more rows than this scans the table once

# The schedule's instants, and those of the other tables and of the queries' own columns.
_TIME_COLUMNS = frozenset(SCHEDULE_TIMES) | frozenset(
    {
        "refused_at",
        "scheduled_at",
        "claimed_at",
        "submitted_at",
        "finished_at",
        "expires_at",
        "run_submitted_at",
        "run_claimed_at",
        "buffered_at",
        "at",
        # Schema version 5.
        "started_at",
        "last_success_at",
        "last_failure_at",
        "heartbeat_at",
    }
)


def encode_time(value: datetime | None) -> str | None:
    """Fixed-width UTC text: text order is time order (years 1000-9999)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def decode_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value).astimezone(UTC)


def _lenient(decode: Any, value: Any) -> Any:
    # A value damaged by hand stays as stored: decoding the row then names its column
    # (goatbeat.stores.rows) instead of failing the whole query.
    try:
        return decode(value)
    except (TypeError, ValueError, OverflowError):
        return value


def _encode(row: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as stored: JSON columns as text, instants as :func:`encode_time`, booleans
    as 0 or 1."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in JSON_COLUMNS:
            out[key] = json.dumps(value, sort_keys=True, allow_nan=False)
        elif isinstance(value, datetime):
            out[key] = encode_time(value)
        elif isinstance(value, bool):
            out[key] = int(value)
        else:
            out[key] = value
    return out


def _batch(rows: Iterable[Any]) -> str:
    """A batch as one JSON array of objects, each encoded as :func:`_encode` (a dataclass by its
    fields), for a statement that reads it with ``json_each``."""
    return json.dumps([_encode(r if isinstance(r, Mapping) else _fields(r)) for r in rows])


def _fields(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in item.__slots__}


def _decode(row: sqlite3.Row, *, json_columns: bool = True) -> dict[str, Any]:
    out = dict(row)
    if json_columns:  # the claim path leaves them as text for the schedule cache
        for key in out.keys() & JSON_COLUMNS:
            if out[key] is not None:
                out[key] = _lenient(json.loads, out[key])
    for key in out.keys() & _TIME_COLUMNS:
        out[key] = _lenient(decode_time, out[key])
    return out


class SQLiteTx(Tx):
    """The primitives on one connection. Outside a transaction, a primitive that writes runs
    in its own ``BEGIN IMMEDIATE``."""

    def __init__(self, dialect: Connections, conn: sqlite3.Connection) -> None:
        self.d = dialect
        self.q = dialect.q
        self.conn = conn
        self._open = False
        self._notified = False

    # -- transactions ----------------------------------------------------------------------

    def begin(self, statement: str) -> None:
        self.conn.execute(statement)
        self._open = True

    def commit(self) -> None:
        if self._open:
            self._open = False
            self.conn.execute("COMMIT")
        if self._notified:
            self._notified = False
            self.d.wake_local()

    def rollback(self) -> None:
        self._notified = False
        if self._open:
            self._open = False
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")

    @contextmanager
    def _atomic(self) -> Iterator[sqlite3.Connection]:
        if self._open:
            yield self.conn
            return
        self.begin("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def _run(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        values = {} if params is None else _encode(params)
        if name in self.d.timed and "now" not in values:
            values["now"] = encode_time(self.now())
        return self.conn.execute(self.q[name], values)

    def _write(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        with self._atomic():
            return self._run(name, params).rowcount

    def _array(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def _many(self, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """``name`` once per row (its ``:now`` one instant for all, unless a row has one)."""
        now = {"now": self.now()} if name in self.d.timed else {}
        return self.conn.executemany(self.q[name], (_encode({**now, **r}) for r in rows)).rowcount

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return [_decode(r) for r in self._run(name, params).fetchall()]

    def now(self) -> datetime:
        return self.d.now()

    def notify(self, payload: str) -> None:
        with self._atomic():
            self._run("notify", {"payload": payload})
            # Our own commits do not move PRAGMA data_version: force the next wait() to look.
            self.d.data_version = None
            self._notified = True

    # -- schedules -------------------------------------------------------------------------

    def schedules(self, source: str | None) -> list[dict[str, Any]]:
        if source is None:
            return self._rows("schedules_all")
        return self._rows("schedules_by_source", {"source": source})

    def schedules_named(self, names: Sequence[str]) -> list[dict[str, Any]]:
        if len(names) > _SCAN_OVER:
            # One scan beats thousands of lookups when a whole code base is published.
            wanted = set(names)
            return [_decode(r) for r in self._run("schedules_all") if r["name"] in wanted]
        found = (self.schedule(name) for name in dict.fromkeys(names))
        return [row for row in found if row is not None]

    def current_publication(self) -> dict[str, Any] | None:
        row = self._run("publication_current").fetchone()
        if row is None:
            return None
        found = dict(row)
        found["published_at"] = decode_time(found["published_at"])
        return found

    def insert_schedules(self, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._atomic():
            self._many("schedule_insert", rows)

    def create_schedule(self, row: Mapping[str, Any]) -> dict[str, Any]:
        with self._atomic():
            self.insert_schedules([row])
            stored = self.schedule(row["name"])
        assert stored is not None
        return stored

    def replace_schedules(self, replaces: Sequence[Replace]) -> int:
        with self._atomic():
            rows = ({**r.values, "id": r.id, "version": r.version} for r in replaces)
            return self._many("schedule_replace", rows)

    def set_fingerprints(self, pairs: Sequence[tuple[int, str]]) -> None:
        with self._atomic():
            rows = ({"id": sid, "published_fingerprint": printed} for sid, printed in pairs)
            self._many("schedule_set_fingerprint", rows)

    def insert_backfill(
        self, schedule_id: int, name: str, instants: Sequence[datetime], keys: Sequence[str]
    ) -> set[datetime]:
        with self._atomic():
            runs = _batch({"at": at, "key": key} for at, key in zip(instants, keys, strict=True))
            params = {"schedule_id": schedule_id, "name": name, "runs": runs}
            landed = {r[0] for r in self._run("backfill_insert", params)}
        return {at for at, key in zip(instants, keys, strict=True) if key in landed}

    def request_run(
        self, schedule_id: int, name: str, at: datetime, key: str
    ) -> dict[str, Any] | None:
        with self._atomic():
            self._run(
                "request_run", {"schedule_id": schedule_id, "name": name, "at": at, "key": key}
            )
            return self._one("execution_by_key", {"key": key})

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self._atomic():
            now = self.now()
            params = {"name": name, "holder": holder, "now": now, "expires_at": now + ttl}
            row = self._run("lease_acquire", params).fetchone()
        if row is None:
            return None
        expires_at = decode_time(row["expires_at"])
        assert expires_at is not None
        return LeaseGrant(name=name, holder=holder, token=int(row["token"]), expires_at=expires_at)

    def release_lease(self, name: str, holder: str, token: int, payload: str | None) -> bool:
        with self._atomic():
            params = {"name": name, "holder": holder, "token": token}
            released = self._run("lease_release", params).rowcount == 1
            if released and payload is not None:
                self.notify(payload)
        return released

    def read_leases(self, names: Sequence[str]) -> list[dict[str, Any]]:
        rows = [dict(r) for r in self._run("lease_read", {"names": json.dumps(list(names))})]
        now = self.now()
        for row in rows:
            row["expires_at"] = expires_at = decode_time(row["expires_at"])
            assert expires_at is not None
            row.update(token=int(row["token"]), expired=expires_at <= now)
        return rows

    def scheduler_leases(self) -> list[dict[str, Any]]:
        return []  # one shard: the lease is "scheduler"

    def _lease_holds(self, lease: LeaseGrant) -> bool:
        params = {"name": lease.name, "holder": lease.holder, "token": lease.token}
        return self._run("lease_check", params).fetchone() is not None

    # -- claiming --------------------------------------------------------------------------

    def check_lease(self, lease: LeaseGrant) -> ClaimCheck | None:
        now = self.now()
        if not self._lease_holds(lease):
            return None
        return ClaimCheck(now=now, buffered=self._run("buffered_runs").fetchone() is not None)

    def due(self, now: datetime, limit: int, shard: Shard) -> list[dict[str, Any]]:
        rows = self._run("claim_select_due", {"now": now, "limit": limit})
        return [_decode(r, json_columns=False) for r in rows.fetchall()]

    def recording(self, outcomes: Sequence[SubmitOutcome]) -> Any:
        self.record_outcomes(outcomes)  # records_in_claim is False: only a refused claim's
        return nullcontext()

    def begin_writes(self, lease: LeaseGrant) -> bool:
        self.begin("BEGIN IMMEDIATE")
        return self._lease_holds(lease)

    def quarantine(self, damaged: Sequence[tuple[int, int]], status: str) -> set[int]:
        rows = _batch({"id": id, "version": version} for id, version in damaged)
        return {r[0] for r in self._run("claim_quarantine", {"rows": rows, "status": status})}

    def advance(self, advances: Sequence[Advanced], lease: LeaseGrant) -> set[int]:
        rows = _batch(advances)
        return {r[0] for r in self._run("claim_advance", {"advances": rows})}

    def insert_executions(
        self, executions: Sequence[NewExecution], token: int, scheduler_id: str
    ) -> dict[str, int]:
        params = {"token": token, "scheduler_id": scheduler_id, "runs": _batch(executions)}
        rows = self._run("claim_insert_executions", params)
        return {r["idempotency_key"]: int(r["id"]) for r in rows}

    def started_runs(self, runs: Mapping[int, int]) -> None:
        rows = _batch({"id": sid, "execution_id": eid} for sid, eid in runs.items())
        self._run("started_runs", {"runs": rows})

    def promote(self, ids: Sequence[int], token: int, scheduler_id: str) -> list[dict[str, Any]]:
        params = {"ids": json.dumps(list(ids)), "token": token, "scheduler_id": scheduler_id}
        started = dict(self._run("promote_buffered", params).fetchall())
        order = [i for i in dict.fromkeys(ids) if started.get(i) is not None]
        status = ExecutionStatus.CLAIMED.value
        runs = ({"id": started[i], "execution_id": i, "runs": 1, "status": status} for i in order)
        self._many("started_run", runs)
        return self._rows("promoted_pending", {"ids": json.dumps(order)})

    def abandon(self, failed: Sequence[tuple[int, str]]) -> None:
        with self._atomic():
            self._many("abandon_damaged", ({"id": i, "error": e} for i, e in failed))

    def next_due_at(self, shard: Shard) -> datetime | None:
        row = self._run("next_due_at").fetchone()
        due = [decode_time(row[0])] if row is not None and row[0] is not None else []
        due += [at for r in self._rows("buffered_runs") if (at := buffer_ready_at(r)) is not None]
        return min((d for d in due if d is not None), default=None)

    def next_retry_at(self, shard: Shard) -> datetime | None:
        row = self._run("next_retry_at").fetchone()
        return None if row is None else decode_time(row["at"])

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        with self._atomic():
            now = self.now()
            latest: dict[int, tuple[str, str]] = {}
            missed: dict[int, int] = {}
            for outcome in outcomes:
                retry_at = None
                if outcome.retry_in is not None:
                    retry_at = now + timedelta(seconds=max(0.0, float(outcome.retry_in)))
                row = self._run(
                    "record_outcome",
                    {
                        "id": outcome.execution_id,
                        "key": outcome.idempotency_key,
                        "ok": outcome.ok,
                        "final": outcome.final,
                        "backend_task_id": outcome.backend_task_id,
                        "error": outcome.error,
                        "now": now,
                        "retry_at": retry_at,
                    },
                ).fetchone()
                if row is None or row["schedule_id"] is None:
                    continue
                sid = int(row["schedule_id"])
                status = row["status"]
                if not outcome.ok and outcome.final and outcome.missed:
                    missed[sid] = missed.get(sid, 0) + 1
                    status = "missed"
                if sid not in latest or latest[sid][0] <= row["scheduled_at"]:
                    latest[sid] = (row["scheduled_at"], status)
            for sid, (_, status) in latest.items():
                params = {"id": sid, "status": status, "missed": missed.get(sid, 0)}
                self._run("schedule_last_status", params)

    def refuse(self, schedule_id: int, task: str, reason: str) -> bool:
        with self._atomic():
            target = self._run("refuse_target", {"id": schedule_id, "task": task}).fetchone()
            if target is None:
                return False
            self._run("refuse_executions", {"id": schedule_id, "reason": reason})
            self._run("refuse", {"id": schedule_id, "park": bool(target["park"])})
        return True

    def claim_manual_runs(
        self, lease: LeaseGrant, scheduler_id: str, ids: Sequence[int], shard: Shard
    ) -> list[int]:
        with self._atomic():
            if not self._lease_holds(lease):
                return []
            params = {"ids": json.dumps(list(ids)), "scheduler_id": scheduler_id}
            rows = self._run("claim_manual_run", {**params, "token": lease.token}).fetchall()
            runs = [r for r in rows if r["schedule_id"] is not None]
            self._many("manual_run", ({"schedule_id": r[1], "at": r[2]} for r in runs))
        return [int(r["id"]) for r in rows]

    # -- reports and operations --------------------------------------------------------------

    def record_started(self, key: str, worker: str | None) -> bool:
        with self._atomic():
            row = self._run("execution_for_report", {"key": key}).fetchone()
            if row is None:
                return False
            now = self.now()
            self._run("record_started", {"id": row["id"], "now": now, "worker": worker})
            self._report_to_schedule(row, ExecutionStatus.RUNNING.value, now, False)
        return True

    def record_completion(
        self,
        key: str,
        outcome: str,
        error: str | None,
        runtime: float | None,
        worker: str | None,
        only_open: bool = False,
    ) -> Completion:
        with self._atomic():
            row = self._run("execution_for_report", {"key": key}).fetchone()
            if row is None or (only_open and row["status"] not in OPEN_STATUSES):
                return Completion(matched=False)
            now = self.now()
            seconds = runtime
            started = _lenient(decode_time, row["started_at"])
            if seconds is None and isinstance(started, datetime):
                seconds = (now - started).total_seconds()
            params = {"id": row["id"], "outcome": outcome, "now": now, "error": error}
            self._run("record_completion", {**params, "runtime": seconds, "worker": worker})
            counts = outcome in FAILURE_STATUSES and row["status"] not in FAILURE_STATUSES
            self._report_to_schedule(row, outcome, now, counts)
            sid = row["schedule_id"]
            ended = outcome in ENDED_BY_REPORT
            if ended and sid is not None:
                if self._run("has_buffered", {"id": sid}).fetchone() is not None:
                    self.notify(f"schedule:{sid}")  # the run ended: the leader starts that one
            pause = None
            if sid is not None and outcome in FAILURE_STATUSES:
                state = self._run("failure_pause", {"id": sid}).fetchone()
                if state is not None:
                    pause = (str(state["name"]), int(state["consecutive_failures"]))
        return Completion(matched=True, pause=pause)

    def _report_to_schedule(
        self, row: sqlite3.Row, status: str, now: datetime, counts_failure: bool
    ) -> None:
        if row["schedule_id"] is not None:
            params = {"id": row["schedule_id"], "scheduled_at": row["scheduled_at"], "now": now}
            self._run(
                "schedule_report", {**params, "status": status, "counts_failure": counts_failure}
            )

    def heartbeat(self, beat: SchedulerBeat, retention: timedelta) -> None:
        now = self.now()
        with self._atomic():
            self._run(
                "heartbeat", {**heartbeat_columns(beat), "now": now, "expires_at": now + beat.ttl}
            )
            self._run("scheduler_cleanup", {"before": now - retention})

    def record_misses(
        self, misses: Sequence[Miss], scheduler_id: str, retention: timedelta
    ) -> None:
        now = self.now()
        with self._atomic():
            self._many("record_miss", ({**r, "now": now} for r in miss_rows(misses, scheduler_id)))
            self._run("miss_prune", {"before": now - retention})

    def live_schedulers(self, within: timedelta, shards: int) -> list[str]:
        now = self.now()
        params = {"now": now, "since": now - within, "pattern": f"scheduler/%-of-{int(shards)}"}
        return [str(r["scheduler_id"]) for r in self._run("live_schedulers", params)]
