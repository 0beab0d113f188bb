"""The SQLite dialect's transaction primitives: :class:`SQLiteTx`, the answers to
:mod:`goatbeat.stores.dialect`'s ``Tx`` on the connection of a
:class:`~goatbeat.stores.dialects.sqlite.SQLiteDialect`, with the named queries of
``sql/sqlite/queries.sql``, and how values are stored (instants as ISO text, JSON columns as
text). SQLite has no arrays, so a primitive over a batch runs its statement once per row,
inside the one transaction. :mod:`goatbeat.stores.dialects.sqlite` says how the connection is
kept and how writers share the lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
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
    executions_query,
    heartbeat_columns,
)
from goatbeat.stores.rows import buffer_ready_at


class Connections(Protocol):
    """What the primitives take from the dialect that opened their connection
    (:class:`~goatbeat.stores.dialects.sqlite.SQLiteDialect`): named here, so this module
    does not import the one that imports it."""

    q: dict[str, str]
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


def _decode(row: sqlite3.Row, *, json_columns: bool = True) -> dict[str, Any]:
    out = dict(row)
    if json_columns:  # the claim path leaves them as text for the schedule cache
        for key in out.keys() & JSON_COLUMNS:
            if out[key] is not None:
                out[key] = _lenient(json.loads, out[key])
    for key in out.keys() & _TIME_COLUMNS:
        out[key] = _lenient(decode_time, out[key])
    return out


class SQLiteTx:
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
        return self.conn.execute(self.q[name], {} if params is None else params)

    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return [_decode(r) for r in self._run(name, params).fetchall()]

    def _now_text(self) -> str:
        text = encode_time(self.now())
        assert text is not None
        return text

    def now(self) -> datetime:
        return self.d.now()

    def notify(self, payload: str) -> None:
        with self._atomic():
            self._run("notify", {"payload": payload})
            # Our own commits do not move PRAGMA data_version: force the next wait() to look.
            self.d.data_version = None
            self._notified = True

    # -- schedules -------------------------------------------------------------------------

    def schedule(self, name: str) -> dict[str, Any] | None:
        row = self._run("schedule_by_name", {"name": name}).fetchone()
        return None if row is None else _decode(row)

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

    def source_has_rows(self, source: str) -> bool:
        return self._run("source_has_rows", {"source": source}).fetchone() is not None

    def unchanged(
        self, declared: Sequence[Sequence[Any]], shared: Sequence[Sequence[Any]], source: str
    ) -> Collection[str] | None:
        return None  # compares_publications is False: the store compares

    def comparing(self) -> Any:
        return nullcontext()

    def orphans(self, source: str, declared: Sequence[str]) -> list[str]:
        rows = self._run("orphans", {"source": source, "names": json.dumps(list(declared))})
        return [r["name"] for r in rows]

    def lock_publication(self) -> None:
        return None  # BEGIN IMMEDIATE serialises every writer already

    def current_publication(self) -> dict[str, Any] | None:
        row = self._run("publication_current").fetchone()
        if row is None:
            return None
        found = dict(row)
        found["published_at"] = decode_time(found["published_at"])
        return found

    def publication_generation(self, fingerprint: str) -> int | None:
        row = self._run("publication_generation_of", {"fingerprint": fingerprint}).fetchone()
        return None if row is None or row["generation"] is None else int(row["generation"])

    def record_publication(self, fingerprint: str, release: int | None, schedules: int) -> int:
        with self._atomic():
            params = {
                "fingerprint": fingerprint,
                "release": release,
                "schedules": schedules,
                "now": self._now_text(),
            }
            return int(self._run("publication_record", params).fetchone()["generation"])

    def rename_schedule(self, id: int, version: int, new_name: str) -> int:
        with self._atomic():
            params = {"id": id, "version": version, "new_name": new_name, "now": self._now_text()}
            written = self._run("schedule_rename", params).rowcount
            if written:
                self._run("schedule_rename_history", {"id": id, "new_name": new_name})
                self._run("schedule_rename_misses", {"id": id, "new_name": new_name})
            return written

    def _insert(self, row: Mapping[str, Any], now: str) -> int:
        params = _encode(row)
        params["now"] = now
        cur = self._run("schedule_insert", params)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def insert_schedules(self, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._atomic():
            now = self._now_text()
            for row in rows:
                self._insert(row, now)

    def create_schedule(self, row: Mapping[str, Any]) -> dict[str, Any]:
        with self._atomic():
            self._insert(row, self._now_text())
            stored = self.schedule(row["name"])
        assert stored is not None
        return stored

    def replace_schedules(self, replaces: Sequence[Replace]) -> int:
        written = 0
        with self._atomic():
            now = self._now_text()
            for rep in replaces:
                params = _encode(rep.values)
                params.update(id=rep.id, version=rep.version, now=now)
                written += self._run("schedule_replace", params).rowcount
        return written

    def set_fingerprints(self, pairs: Sequence[tuple[int, str]]) -> None:
        with self._atomic():
            for sid, printed in pairs:
                self._run("schedule_set_fingerprint", {"id": sid, "published_fingerprint": printed})

    def set_enabled(self, id: int, version: int, values: Mapping[str, Any]) -> int:
        with self._atomic():
            params = {
                "enabled": int(values["enabled"]),
                "next_run_at": encode_time(values["next_run_at"]),
                "last_status": values["last_status"],
                "id": id,
                "version": version,
                "now": self._now_text(),
            }
            return self._run("schedule_set_enabled", params).rowcount

    def prune(self, source: str, keep: Collection[str]) -> list[str]:
        with self._atomic():
            params = {"source": source, "keep": json.dumps(list(keep)), "now": self._now_text()}
            return [r["name"] for r in self._run("prune", params).fetchall()]

    def withdraw_waiting(self, schedule_id: int, error: str) -> int:
        with self._atomic():
            params = {"id": schedule_id, "error": error, "now": self._now_text()}
            return self._run("pause_withdraw", params).rowcount

    def pause(self, schedule_id: int, values: Mapping[str, Any], withdrawn: int) -> None:
        with self._atomic():
            self._run(
                "pause",
                {
                    "id": schedule_id,
                    "paused_at": encode_time(values["paused_at"]),
                    "paused_by": values["paused_by"],
                    "pause_note": values["pause_note"],
                    "withdrawn": withdrawn,
                    "now": self._now_text(),
                },
            )

    def resume(self, id: int, version: int, next_run_at: datetime | None, skipped: int) -> int:
        with self._atomic():
            params = {
                "id": id,
                "version": version,
                "next_run_at": encode_time(next_run_at),
                "skipped_count": skipped,
                "now": self._now_text(),
            }
            return self._run("resume", params).rowcount

    def delete_schedule(self, schedule_id: int, error: str) -> None:
        with self._atomic():
            self._run("abandon_claimed", {"id": schedule_id, "error": error})
            self._run("schedule_delete", {"id": schedule_id})

    def execution_statuses(self, keys: Sequence[str]) -> dict[str, str]:
        found = self._run("statuses_by_keys", {"keys": json.dumps(list(keys))})
        return {r["idempotency_key"]: r["status"] for r in found.fetchall()}

    def insert_backfill(
        self, schedule_id: int, name: str, instants: Sequence[datetime], keys: Sequence[str]
    ) -> set[datetime]:
        landed: set[datetime] = set()
        with self._atomic():
            now = self._now_text()
            for at, key in zip(instants, keys, strict=True):
                params = {
                    "schedule_id": schedule_id,
                    "name": name,
                    "at": encode_time(at),
                    "key": key,
                    "now": now,
                }
                if self._run("backfill_insert", params).rowcount == 1:
                    landed.add(at)
        return landed

    def request_run(
        self, schedule_id: int, name: str, at: datetime, key: str
    ) -> dict[str, Any] | None:
        with self._atomic():
            params = {
                "schedule_id": schedule_id,
                "name": name,
                "at": encode_time(at),
                "key": key,
                "now": self._now_text(),
            }
            self._run("request_run", params)
            row = self._run("execution_by_key", {"key": key}).fetchone()
        return None if row is None else _decode(row)

    def executions(self, name: str | None, status: str | None, limit: int) -> list[dict[str, Any]]:
        params = {"limit": limit, "name": name, "status": status}
        return self._rows(executions_query(name, status), params)

    # -- the lease -------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self._atomic():
            now = self.now()
            params = {
                "name": name,
                "holder": holder,
                "now": encode_time(now),
                "expires_at": encode_time(now + ttl),
            }
            row = self._run("lease_acquire", params).fetchone()
        if row is None:
            return None
        expires_at = decode_time(row["expires_at"])
        assert expires_at is not None
        return LeaseGrant(name=name, holder=holder, token=int(row["token"]), expires_at=expires_at)

    def release_lease(self, name: str, holder: str, token: int, payload: str | None) -> bool:
        with self._atomic():
            params = {"name": name, "holder": holder, "token": token, "now": self._now_text()}
            released = self._run("lease_release", params).rowcount == 1
            if released and payload is not None:
                self.notify(payload)
        return released

    def read_leases(self, names: Sequence[str]) -> list[dict[str, Any]]:
        out = []
        for name in names:
            row = self._run("lease_read", {"name": name}).fetchone()
            if row is None:
                continue
            expires_at = decode_time(row["expires_at"])
            assert expires_at is not None
            out.append(
                {
                    "name": name,
                    "holder": row["holder"],
                    "token": int(row["token"]),
                    "expires_at": expires_at,
                    "expired": expires_at <= self.now(),
                }
            )
        return out

    def scheduler_leases(self) -> list[dict[str, Any]]:
        return []  # one shard: the lease is "scheduler"

    def _lease_holds(self, lease: LeaseGrant) -> bool:
        params = {
            "name": lease.name,
            "holder": lease.holder,
            "token": lease.token,
            "now": self._now_text(),
        }
        return self._run("lease_check", params).fetchone() is not None

    # -- claiming --------------------------------------------------------------------------

    def check_lease(self, lease: LeaseGrant) -> ClaimCheck | None:
        now = self.now()
        if not self._lease_holds(lease):
            return None
        return ClaimCheck(now=now, buffered=self._run("buffered_runs").fetchone() is not None)

    def due(self, now: datetime, limit: int, shard: Shard) -> list[dict[str, Any]]:
        rows = self._run("claim_select_due", {"now": encode_time(now), "limit": limit})
        return [_decode(r, json_columns=False) for r in rows.fetchall()]

    def recording(self, outcomes: Sequence[SubmitOutcome]) -> Any:
        self.record_outcomes(outcomes)  # records_in_claim is False: only a refused claim's
        return nullcontext()

    def begin_writes(self, lease: LeaseGrant) -> bool:
        self.begin("BEGIN IMMEDIATE")
        return self._lease_holds(lease)

    def quarantine(self, damaged: Sequence[tuple[int, int]], status: str) -> set[int]:
        written: set[int] = set()
        for id, version in damaged:
            params = {"id": id, "version": version, "status": status}
            if self._run("claim_quarantine", params).rowcount == 1:
                written.add(id)
        return written

    def advance(self, advances: Sequence[Advanced], lease: LeaseGrant) -> set[int]:
        advanced: set[int] = set()
        for a in advances:
            params = {
                "id": a.id,
                "version": a.version,
                "next_run_at": encode_time(a.next_run_at),
                "last_run_at": encode_time(a.last_run_at),
                "last_status": a.last_status,
                "runs": a.runs,
                "missed": a.missed,
                "skipped": a.skipped,
                "disable": int(a.disable),
            }
            if self._run("claim_advance", params).rowcount == 1:
                advanced.add(a.id)
        return advanced

    def insert_executions(
        self, executions: Sequence[NewExecution], token: int, scheduler_id: str
    ) -> dict[str, int]:
        claimed_at = self._now_text()
        inserted: dict[str, int] = {}
        for e in executions:
            row = self._run(
                "claim_insert_execution",
                {
                    "schedule_id": e.schedule_id,
                    "schedule_name": e.schedule_name,
                    "scheduled_at": encode_time(e.scheduled_at),
                    "key": e.key,
                    "status": e.status,
                    "token": token,
                    "scheduler_id": scheduler_id,
                    "now": claimed_at,
                    "retry_at": encode_time(e.retry_at),
                },
            ).fetchone()
            if row is not None:
                inserted[e.key] = int(row[0])
        return inserted

    def started_runs(self, runs: Mapping[int, int]) -> None:
        for sid, execution_id in runs.items():
            params = {"id": sid, "execution_id": execution_id, "runs": 0, "status": None}
            self._run("started_run", params)

    def buffered_runs(self, shard: Shard) -> list[dict[str, Any]]:
        return self._rows("buffered_runs")

    def promote(self, ids: Sequence[int], token: int, scheduler_id: str) -> list[dict[str, Any]]:
        now = self._now_text()
        joined: list[dict[str, Any]] = []
        for execution_id in ids:
            params = {"id": execution_id, "token": token, "scheduler_id": scheduler_id, "now": now}
            promoted = self._run("promote_buffered", params).fetchone()
            if promoted is None or promoted["schedule_id"] is None:
                continue
            self._run(
                "started_run",
                {
                    "id": promoted["schedule_id"],
                    "execution_id": execution_id,
                    "runs": 1,
                    "status": ExecutionStatus.CLAIMED.value,
                },
            )
            joined += self._rows("promoted_pending", {"id": execution_id})
        return joined

    def abandon(self, failed: Sequence[tuple[int, str]]) -> None:
        with self._atomic():
            for execution_id, error in failed:
                self._run("abandon_damaged", {"id": execution_id, "error": error})

    def next_due_at(self, shard: Shard) -> datetime | None:
        row = self._run("next_due_at").fetchone()
        due = [decode_time(row[0])] if row is not None and row[0] is not None else []
        due += [at for r in self._rows("buffered_runs") if (at := buffer_ready_at(r)) is not None]
        return min((d for d in due if d is not None), default=None)

    def pending(self, limit: int, exclude: Sequence[int], shard: Shard) -> list[dict[str, Any]]:
        params = {"limit": limit, "exclude": json.dumps(list(exclude)), "now": self._now_text()}
        return self._rows("pending", params)

    def next_retry_at(self, shard: Shard) -> datetime | None:
        row = self._run("next_retry_at").fetchone()
        return None if row is None else decode_time(row["at"])

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        with self._atomic():
            at = self.now()
            now = encode_time(at)
            latest: dict[int, tuple[str, str]] = {}
            missed: dict[int, int] = {}
            for outcome in outcomes:
                retry_at = None
                if outcome.retry_in is not None:
                    retry_at = encode_time(
                        at + timedelta(seconds=max(0.0, float(outcome.retry_in)))
                    )
                row = self._run(
                    "record_outcome",
                    {
                        "id": outcome.execution_id,
                        "key": outcome.idempotency_key,
                        "ok": int(outcome.ok),
                        "final": int(outcome.final),
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
            params = {"id": schedule_id, "park": int(bool(target["park"])), "now": self._now_text()}
            self._run("refuse", params)
        return True

    def claim_manual_runs(
        self, lease: LeaseGrant, scheduler_id: str, ids: Sequence[int], shard: Shard
    ) -> list[int]:
        claimed: list[int] = []
        with self._atomic():
            if not self._lease_holds(lease):
                return claimed
            for execution_id in ids:
                row = self._run(
                    "claim_manual_run",
                    {
                        "id": execution_id,
                        "scheduler_id": scheduler_id,
                        "token": lease.token,
                        "now": self._now_text(),
                    },
                ).fetchone()
                if row is None:
                    continue
                claimed.append(execution_id)
                if row["schedule_id"] is not None:
                    params = {"schedule_id": row["schedule_id"], "at": row["scheduled_at"]}
                    self._run("manual_run", params)
        return claimed

    # -- reports and operations --------------------------------------------------------------

    def record_started(self, key: str, worker: str | None) -> bool:
        with self._atomic():
            row = self._run("execution_for_report", {"key": key}).fetchone()
            if row is None:
                return False
            now = self._now_text()
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
            now_text = encode_time(now)
            self._run(
                "record_completion",
                {
                    "id": row["id"],
                    "outcome": outcome,
                    "now": now_text,
                    "error": error,
                    "runtime": seconds,
                    "worker": worker,
                },
            )
            counts = outcome in FAILURE_STATUSES and row["status"] not in FAILURE_STATUSES
            self._report_to_schedule(row, outcome, now_text, counts)
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

    def open_runs(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        started = self._rows("open_runs_started", {"limit": limit})
        submitted = self._rows("open_runs_submitted", {"since": encode_time(since), "limit": limit})
        return started + submitted

    def retry_now(self) -> int:
        with self._atomic():
            return int(self._run("retry_now", {"now": self._now_text()}).rowcount)

    def refused_schedules(self) -> list[dict[str, Any]]:
        return self._rows("refused_schedules")

    def refusals(self, name: str | None, limit: int | None) -> list[dict[str, Any]]:
        query = "refusals" if name is None else "refusal_named"
        return self._rows(query, {"name": name, "limit": -1 if limit is None else limit})

    def longest_bound(self) -> float:
        row = self._run("longest_bound").fetchone()
        return float(row["seconds"] or 0) if row is not None else 0.0

    def _report_to_schedule(
        self, row: sqlite3.Row, status: str, now: str | None, counts_failure: bool
    ) -> None:
        if row["schedule_id"] is None:
            return
        self._run(
            "schedule_report",
            {
                "id": row["schedule_id"],
                "scheduled_at": row["scheduled_at"],
                "status": status,
                "now": now,
                "counts_failure": int(counts_failure),
            },
        )

    def heartbeat(self, beat: SchedulerBeat, retention: timedelta) -> None:
        now = self.now()
        with self._atomic():
            times = {"now": encode_time(now), "expires_at": encode_time(now + beat.ttl)}
            self._run("heartbeat", {**heartbeat_columns(beat), **times})
            self._run("scheduler_cleanup", {"before": encode_time(now - retention)})

    def remove_scheduler(self, scheduler_id: str) -> None:
        with self._atomic():
            self._run("scheduler_remove", {"scheduler_id": scheduler_id})

    def record_misses(
        self, misses: Sequence[Miss], scheduler_id: str, retention: timedelta
    ) -> None:
        now = self.now()
        with self._atomic():
            for miss in misses:
                self._run(
                    "record_miss",
                    {
                        "schedule_id": miss.schedule_id,
                        "schedule_name": miss.schedule_name,
                        "missed": miss.count,
                        "first_at": encode_time(miss.first_at),
                        "last_at": encode_time(miss.last_at),
                        "scheduler_id": scheduler_id,
                        "now": encode_time(now),
                    },
                )
            self._run("miss_prune", {"before": encode_time(now - retention)})

    def status_counts(self, now: datetime, since: datetime) -> dict[str, int]:
        params = {"now": encode_time(now), "since": encode_time(since)}
        return {k: int(v) for k, v in dict(self._run("status_counts", params).fetchone()).items()}

    def status_oldest(self, now: datetime) -> dict[str, Any] | None:
        row = self._run("status_oldest", {"now": encode_time(now)}).fetchone()
        return None if row is None else _decode(row)

    def schedulers(self) -> list[dict[str, Any]]:
        return self._rows("schedulers", {"now": self._now_text()})

    def schedule_health(self, late: datetime, limit: int | None) -> list[dict[str, Any]]:
        params = {"late": encode_time(late), "limit": -1 if limit is None else limit}
        return self._rows("schedule_health", params)

    def live_schedulers(self, within: timedelta, shards: int) -> list[str]:
        now = self.now()
        params = {
            "now": encode_time(now),
            "since": encode_time(now - within),
            "pattern": f"scheduler/%-of-{int(shards)}",
        }
        return [str(r["scheduler_id"]) for r in self._run("live_schedulers", params)]
