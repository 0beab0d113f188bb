"""The dialect contract: what one database gives :class:`~goatbeat.stores.store.DialectStore`,
the one implementation of the ScheduleStore contract.

The store knows what each operation means (what is validated, planned, written and returned);
a dialect knows how its database runs it. A dialect hands out a :class:`Tx` (transaction
handle) from one of four contexts, and the handle answers *named primitives*, each one query
of the dialect's ``sql/<dialect>/queries.sql`` (or a few, where the database lacks arrays),
each taking and returning whole batches so PostgreSQL keeps its arrays, pipelining and COPY:

- :meth:`Dialect.session`: each primitive is atomic on its own (PostgreSQL: an autocommit
  statement; SQLite: its own ``BEGIN IMMEDIATE`` when it writes);
- :meth:`Dialect.transaction`: every primitive in one write transaction, committed when the
  block ends (rolled back when it raises); notifications sent in it go out at commit;
- :meth:`Dialect.claim`: one claim's reads, then, once :meth:`Tx.begin_writes` said the lease
  still holds, its writes, atomically with that check (PostgreSQL: one transaction holding the
  lease row ``FOR SHARE`` from the first read; SQLite: reads without the write lock, then
  ``BEGIN IMMEDIATE`` and the lease checked again);
- :meth:`Dialect.snapshot`: read-only primitives that see one snapshot (``status``).

Rows follow :mod:`goatbeat.stores.definitions`: dicts keyed by column, JSON columns decoded,
instants aware UTC datetimes, booleans as the database gives them (SQLite: 0 or 1). The claim
path's rows (:meth:`Tx.due`) keep JSON columns as text, for the schedule cache. A row damaged
by hand keeps the value it cannot decode, so the row decoders can name the column.

Adding a store operation: its contract in ``core/store.py``, the operation once in
``DialectStore``, and the primitive it needs here, answered by one named query per dialect
(docs/architecture.md).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from goatbeat.core.errors import InvalidValue, StoreError
from goatbeat.core.health import SchedulerBeat
from goatbeat.core.model import LeaseGrant, Miss, SubmitOutcome
from goatbeat.core.shards import Shard

__all__ = [
    "Dialect",
    "Tx",
    "ClaimCheck",
    "Completion",
    "Advanced",
    "NewExecution",
    "RolledBack",
    "NameTaken",
    "Replace",
    "validate_payload",
    "check_payload",
    "lease_payload",
    "heartbeat_columns",
    "miss_rows",
    "executions_query",
]


class RolledBack(StoreError):
    """The database rolled the transaction back (a deadlock, a serialization failure): nothing
    was written, and running it again is safe."""


class NameTaken(StoreError):
    """An insert lost the race for a schedule name to a concurrent one."""


@dataclass(slots=True)
class Replace:
    """A definition change for an existing row, written with compare-and-set on ``version``."""

    id: int
    version: int
    values: dict[str, Any]
    """Definition columns + enabled + next_run_at + last_status; last_run_at and
    published_fingerprint, where None keeps the stored value."""

    @classmethod
    def of(cls, row: Mapping[str, Any], values: dict[str, Any]) -> Replace:
        """``values`` for the stored ``row``, at the version it was read at."""
        return cls(id=int(row["id"]), version=int(row["version"]), values=values)


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """A claim's lease check that passed: the store's now, and whether any occurrence is
    buffered (overlap ``buffer_one``) so the claim looks for those ready to start."""

    now: datetime
    buffered: bool


@dataclass(frozen=True, slots=True)
class Advanced:
    """One schedule's compare-and-set in a claim (``claim_advance``)."""

    id: int
    version: int
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_status: str | None
    runs: int
    missed: int
    skipped: int
    disable: bool


@dataclass(frozen=True, slots=True)
class NewExecution:
    """One execution a claim inserts (``ON CONFLICT (idempotency_key) DO NOTHING``)."""

    schedule_id: int
    schedule_name: str
    scheduled_at: datetime
    key: str
    status: str
    retry_at: datetime | None


@dataclass(frozen=True, slots=True)
class Completion:
    """What recording a worker's completion report did: whether a row matched, and the
    ``pause_on_failure`` pause it calls for (the schedule's name and failures in a row)."""

    matched: bool
    pause: tuple[str, int] | None = None


def heartbeat_columns(beat: SchedulerBeat) -> dict[str, Any]:
    """The columns of a scheduler's row that :meth:`Tx.heartbeat` writes as they are."""
    return {
        "scheduler_id": beat.scheduler_id,
        "role": beat.role.value,
        "lease": beat.lease,
        "fencing_token": beat.fencing_token,
        "hostname": beat.hostname,
        "pid": beat.pid,
        "version": beat.version,
    }


class Tx(ABC):
    """The primitives, grouped as the store uses them. Each says what it reads or writes;
    none decides anything the store decides. Those that are one named query (or a few, run
    together) in every dialect are written here, over four hooks each dialect answers (how a
    query's rows are read, how a write runs, what makes several statements one, how an array
    is passed); its own ``queries.sql`` holds the text under the same name and parameters."""

    # -- the hooks ----------------------------------------------------------------------------

    @abstractmethod
    def _rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run query ``name``: its rows, decoded (as the module docstring says)."""

    @abstractmethod
    def _write(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run the write ``name`` atomically on its own (or in the open transaction): the rows
        it changed."""

    @abstractmethod
    def _atomic(self) -> AbstractContextManager[Any]:
        """Several statements as one: a transaction of their own outside the caller's."""

    @abstractmethod
    def _array(self, values: Sequence[Any]) -> Any:
        """``values`` as the dialect's queries take an array parameter."""

    def _one(self, name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        rows = self._rows(name, params)
        return rows[0] if rows else None

    def _utc(self, value: datetime) -> datetime:
        """An instant of a row as aware UTC: as it is where :meth:`_rows` decodes it so."""
        return value

    def _shard(self, shard: Shard) -> dict[str, Any]:
        """The shard filter's parameters (none where the dialect has no shards)."""
        return {}

    @abstractmethod
    def now(self) -> datetime:
        """The store's clock (PostgreSQL: the transaction's ``now()``)."""

    @abstractmethod
    def notify(self, payload: str) -> None:
        """Send a checked payload on the wake-up channel (at commit, inside a transaction)."""

    # -- schedules ----------------------------------------------------------------------------

    def schedule(self, name: str) -> dict[str, Any] | None:
        """The schedule row ``name`` (with ``published_fingerprint``), or None."""
        return self._one("schedule_by_name", {"name": name})

    @abstractmethod
    def schedules(self, source: str | None) -> list[dict[str, Any]]:
        """Every schedule row (of ``source``), by name."""

    @abstractmethod
    def schedules_named(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of those of ``names`` that exist (with ``published_fingerprint``)."""

    def source_has_rows(self, source: str) -> bool:
        """Whether any schedule of ``source`` exists."""
        return self._one("source_has_rows", {"source": source}) is not None

    def unchanged(
        self, declared: Sequence[Sequence[Any]], shared: Sequence[Sequence[Any]], source: str
    ) -> Collection[str] | None:
        """The names stored exactly as declared (``publish_unchanged``; the parts of
        :class:`~goatbeat.stores.definitions.Comparison`), or None when the dialect leaves
        every comparison to the store. May be a collection that fills in when the block of
        :meth:`comparing` ends (pipelined)."""
        return None

    def comparing(self) -> AbstractContextManager[None]:
        """The block in which :meth:`unchanged` statements may overlap the store's work."""
        return nullcontext()

    def orphans(self, source: str, declared: Sequence[str]) -> list[str]:
        """Names of the enabled rows of ``source`` not in ``declared``, sorted."""
        rows = self._rows("orphans", {"source": source, "names": json.dumps(list(declared))})
        return [r["name"] for r in rows]

    def lock_publication(self) -> None:
        """Serialise concurrent publications (a no-op where the transaction already does)."""
        return None

    @abstractmethod
    def current_publication(self) -> dict[str, Any] | None:
        """The latest code publication (``generation``, ``fingerprint``, ``release``,
        ``schedules``, ``published_at``), or None before the first. Under
        :meth:`lock_publication`."""

    def publication_generation(self, fingerprint: str) -> int | None:
        """The latest generation that published the set ``fingerprint``, or None."""
        row = self._one("publication_generation_of", {"fingerprint": fingerprint})
        return None if row is None or row["generation"] is None else int(row["generation"])

    def record_publication(self, fingerprint: str, release: int | None, schedules: int) -> int:
        """Record a code publication as the next generation; returns it."""
        params = {"fingerprint": fingerprint, "release": release, "schedules": schedules}
        with self._atomic():
            row = self._one("publication_record", params)
        assert row is not None
        return int(row["generation"])

    def rename_schedule(self, id: int, version: int, new_name: str) -> int:
        """Give row ``id`` (compare-and-set on ``version``, bumped) the name ``new_name``,
        and its executions and misses too: the rows written (0 or 1)."""
        with self._atomic():
            written = self._write(
                "schedule_rename", {"id": id, "version": version, "new_name": new_name}
            )
            if written:
                self._write("schedule_rename_history", {"id": id, "new_name": new_name})
                self._write("schedule_rename_misses", {"id": id, "new_name": new_name})
            return written

    @abstractmethod
    def insert_schedules(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert new schedule rows (version 1, created and updated now)."""

    @abstractmethod
    def create_schedule(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Insert one schedule row and return it as stored; :class:`NameTaken` when a
        concurrent insert took the name."""

    @abstractmethod
    def replace_schedules(self, replaces: Sequence[Replace]) -> int:
        """Each :class:`Replace`, compare-and-set on version
        (``last_run_at`` and ``published_fingerprint`` kept when None): the rows written."""

    @abstractmethod
    def set_fingerprints(self, pairs: Sequence[tuple[int, str]]) -> None:
        """Record ``(id, fingerprint)`` on rows that have none, without a version bump."""

    def set_enabled(self, id: int, version: int, values: Mapping[str, Any]) -> int:
        """``enabled``, ``next_run_at``, ``last_status`` (compare-and-set): rows written."""
        return self._write("schedule_set_enabled", {**values, "id": id, "version": version})

    def prune(self, source: str, keep: Collection[str]) -> list[str]:
        """Disable the enabled rows of ``source`` not in ``keep``: their names, any order."""
        with self._atomic():
            rows = self._rows("prune", {"source": source, "keep": self._array(sorted(keep))})
        return [r["name"] for r in rows]

    def withdraw_waiting(self, schedule_id: int, error: str) -> int:
        """Buffered occurrences, and claimed ones never tried waiting for their jittered
        instant, become ``skipped`` with ``error``: how many."""
        return self._write("pause_withdraw", {"id": schedule_id, "error": error})

    def pause(self, schedule_id: int, values: Mapping[str, Any], withdrawn: int) -> None:
        """Write the pause columns, add ``withdrawn`` to ``skipped_count``, bump version."""
        self._write("pause", {**values, "id": schedule_id, "withdrawn": withdrawn})

    def resume(self, id: int, version: int, next_run_at: datetime | None, skipped: int) -> int:
        """Clear the pause, write ``next_run_at`` and ``skipped_count`` (compare-and-set)."""
        params = {"id": id, "version": version, "next_run_at": next_run_at}
        return self._write("resume", {**params, "skipped_count": skipped})

    def delete_schedule(self, schedule_id: int, error: str) -> None:
        """End its unsent (claimed, buffered) executions as ``submit_failed`` with ``error``,
        then delete the row (executions keep their history, schedule id NULL)."""
        with self._atomic():
            self._write("abandon_claimed", {"id": schedule_id, "error": error})
            self._write("schedule_delete", {"id": schedule_id})

    def execution_statuses(self, keys: Sequence[str]) -> dict[str, str]:
        """``{idempotency key: status}`` of the executions that exist."""
        rows = self._rows("statuses_by_keys", {"keys": self._array(list(keys))})
        return {r["idempotency_key"]: str(r["status"]) for r in rows}

    @abstractmethod
    def insert_backfill(
        self, schedule_id: int, name: str, instants: Sequence[datetime], keys: Sequence[str]
    ) -> set[datetime]:
        """Insert unclaimed ``backfill`` executions (``DO NOTHING`` on a taken key): the
        instants written."""

    @abstractmethod
    def request_run(
        self, schedule_id: int, name: str, at: datetime, key: str
    ) -> dict[str, Any] | None:
        """Insert a ``manual`` execution (or find the one with ``key``): its row, or None when
        a concurrent request holds the key and is not visible yet."""

    def executions(self, name: str | None, status: str | None, limit: int) -> list[dict[str, Any]]:
        """Executions, newest ``scheduled_at`` first."""
        params = {"limit": limit, "name": name, "status": status}
        return self._rows(executions_query(name, status), params)

    # -- the lease ----------------------------------------------------------------------------

    @abstractmethod
    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        """Take or renew the lease (store clock): the grant, or None while another holds it."""

    @abstractmethod
    def release_lease(self, name: str, holder: str, token: int, payload: str | None) -> bool:
        """Expire the lease now if still held so, notifying ``payload``: whether it did."""

    @abstractmethod
    def read_leases(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """Lease rows (name, holder, token, expires_at, expired by the store's clock)."""

    @abstractmethod
    def scheduler_leases(self) -> list[dict[str, Any]]:
        """Every lease row of the scheduler, shard leases included, by name."""

    # -- claiming -----------------------------------------------------------------------------

    @abstractmethod
    def check_lease(self, lease: LeaseGrant) -> ClaimCheck | None:
        """A claim's lease check (holder, token, unexpired; row-locked where the database
        can): None when the lease does not hold."""

    @abstractmethod
    def due(self, now: datetime, limit: int, shard: Shard) -> list[dict[str, Any]]:
        """Enabled, unpaused rows due at ``now`` (of ``shard``), by ``next_run_at``, with the
        run each overlap policy waits for; JSON columns as text."""

    @abstractmethod
    def recording(self, outcomes: Sequence[SubmitOutcome]) -> AbstractContextManager[None]:
        """Write ``outcomes`` (:meth:`record_outcomes`) in the claim while the block runs; the
        block must not use the handle. Only called when :attr:`Dialect.records_in_claim`."""

    @abstractmethod
    def begin_writes(self, lease: LeaseGrant) -> bool:
        """From here on the claim writes: whether its lease still holds."""

    @abstractmethod
    def quarantine(self, damaged: Sequence[tuple[int, int]], status: str) -> set[int]:
        """``(id, version)`` rows out of scheduling (compare-and-set): the ids written."""

    @abstractmethod
    def advance(self, advances: Sequence[Advanced], lease: LeaseGrant) -> set[int]:
        """The batch's compare-and-set: the ids advanced."""

    @abstractmethod
    def insert_executions(
        self, executions: Sequence[NewExecution], token: int, scheduler_id: str
    ) -> dict[str, int]:
        """Insert the claim's executions, claimed now: ``{key: id}`` of those written."""

    @abstractmethod
    def started_runs(self, runs: Mapping[int, int]) -> None:
        """``{schedule id: execution id}``: the runs their overlap policies wait for now."""

    def buffered_runs(self, shard: Shard) -> list[dict[str, Any]]:
        """Buffered occurrences with the run each waits for
        (:func:`~goatbeat.stores.rows.buffer_ready_at`'s columns), by id."""
        return self._rows("buffered_runs", self._shard(shard))

    @abstractmethod
    def promote(self, ids: Sequence[int], token: int, scheduler_id: str) -> list[dict[str, Any]]:
        """Start those buffered occurrences (claimed now, their schedule's run, counted as a
        run): their rows as :meth:`pending` returns them."""

    @abstractmethod
    def abandon(self, failed: Sequence[tuple[int, str]]) -> None:
        """``(execution id, error)``: claimed executions nothing can submit end as
        ``submit_failed``."""

    @abstractmethod
    def next_due_at(self, shard: Shard) -> datetime | None:
        """The earliest ``next_run_at`` of an enabled, unpaused row, or the instant a buffered
        occurrence may start (:meth:`~goatbeat.core.store.ScheduleStore.next_due_at`)."""

    def pending(self, limit: int, exclude: Sequence[int], shard: Shard) -> list[dict[str, Any]]:
        """Claimed executions due for (re)submission with their schedules' columns."""
        params = {"limit": limit, "exclude": self._array(exclude), **self._shard(shard)}
        return self._rows("pending", params)

    @abstractmethod
    def next_retry_at(self, shard: Shard) -> datetime | None:
        """The earliest ``retry_at`` of a claimed execution."""

    @abstractmethod
    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        """:meth:`~goatbeat.core.store.ScheduleStore.record_outcomes`, atomically."""

    @abstractmethod
    def refuse(self, schedule_id: int, task: str, reason: str) -> bool:
        """:meth:`~goatbeat.core.store.ScheduleStore.refuse`, atomically."""

    @abstractmethod
    def claim_manual_runs(
        self, lease: LeaseGrant, scheduler_id: str, ids: Sequence[int], shard: Shard
    ) -> list[int]:
        """:meth:`~goatbeat.core.store.ScheduleStore.claim_manual_runs`, with its lease
        check, atomically: the ids claimed."""

    # -- reports and operations ---------------------------------------------------------------

    @abstractmethod
    def record_started(self, key: str, worker: str | None) -> bool:
        """:meth:`~goatbeat.core.store.ScheduleStore.record_started`, atomically."""

    @abstractmethod
    def record_completion(
        self,
        key: str,
        outcome: str,
        error: str | None,
        runtime: float | None,
        worker: str | None,
        only_open: bool = False,
    ) -> Completion:
        """:meth:`~goatbeat.core.store.ScheduleStore.record_completion`'s writes, atomically
        (the pause it calls for is the store's). ``only_open``: write nothing (not matched)
        unless the run is still open (submitted, running, retried): the leader ending a run
        as lost never overwrites a report that came meanwhile. ``lost`` counts as a failure
        (``failed`` and ``lost`` count once between them), ``expired`` as neither."""

    def open_runs(self, since: datetime, limit: int) -> list[dict[str, Any]]:
        """The open runs :meth:`~goatbeat.core.store.ScheduleStore.end_lost_runs` judges (the
        ``submitted`` ones scheduled after ``since``), at most ``limit`` of each kind, each
        with ``id``, ``idempotency_key``, ``schedule_name``, ``status``, ``claimed_at``,
        ``submitted_at``, ``started_at``, ``finished_at`` and its schedule's ``max_runtime``
        and ``expires`` (seconds or None)."""
        started = self._rows("open_runs_started", {"limit": limit})
        return started + self._rows("open_runs_submitted", {"since": since, "limit": limit})

    def retry_now(self) -> int:
        """:meth:`~goatbeat.core.store.ScheduleStore.retry_now`: the rows changed."""
        return self._write("retry_now")

    def refused_schedules(self) -> list[dict[str, Any]]:
        """The rows of :meth:`~goatbeat.core.store.ScheduleStore.refused_schedules`."""
        return self._rows("refused_schedules")

    def refusals(self, name: str | None, limit: int | None) -> list[dict[str, Any]]:
        """The rows of :meth:`~goatbeat.core.store.ScheduleStore.refusals`: ``name``,
        ``task``, ``source``, ``reason``, ``refused_at`` (aware UTC) and ``total`` (of every
        refused row, on each)."""
        query = "refusals" if name is None else "refusal_named"
        rows = self._rows(query, {"name": name, "limit": limit})
        for row in rows:
            if row["refused_at"] is not None:
                row["refused_at"] = self._utc(row["refused_at"])
        return rows

    def longest_bound(self) -> float:
        """The longest ``max_runtime`` or ``expires`` of any schedule, in seconds (0: none)."""
        row = self._one("longest_bound")
        return float(row["seconds"] or 0) if row is not None else 0.0

    @abstractmethod
    def heartbeat(self, beat: SchedulerBeat, retention: timedelta) -> None:
        """Upsert the scheduler's row, delete the rows expired ``retention`` ago."""

    def remove_scheduler(self, scheduler_id: str) -> None:
        self._write("scheduler_remove", {"scheduler_id": scheduler_id})

    @abstractmethod
    def record_misses(
        self, misses: Sequence[Miss], scheduler_id: str, retention: timedelta
    ) -> None:
        """One miss record each, then delete those older than ``retention``."""

    def status_counts(self, now: datetime, since: datetime) -> dict[str, int]:
        """``due``, ``pending``, ``missed``, ``failed`` as ``status`` counts them."""
        row = self._one("status_counts", {"now": now, "since": since})
        assert row is not None
        return {k: int(v) for k, v in row.items()}

    def status_oldest(self, now: datetime) -> dict[str, Any] | None:
        """The oldest due or pending instant (``at``) and its schedule's ``name``."""
        row = self._one("status_oldest", {"now": now})
        if row is not None:
            row["at"] = self._utc(row["at"])
        return row

    def schedulers(self) -> list[dict[str, Any]]:
        """Every scheduler row, ``stale`` by the store's clock, by role and id."""
        return self._rows("schedulers")

    def schedule_health(self, late: datetime, limit: int | None) -> list[dict[str, Any]]:
        """The rows ``schedule_health`` reports, ``overdue`` computed, in its order."""
        return self._rows("schedule_health", {"late": late, "limit": limit})

    @abstractmethod
    def live_schedulers(self, within: timedelta, shards: int) -> list[str]:
        """:meth:`~goatbeat.core.store.ShardedStore.live_schedulers`."""


class Dialect(Protocol):
    """One database, as :class:`~goatbeat.stores.store.DialectStore` uses it."""

    kind: str
    """``info()``'s kind: ``"sqlite"``, ``"postgres"``."""
    supports_shards: bool
    """Whether claims and reads may be limited to one shard (PostgreSQL)."""
    records_in_claim: bool
    """Whether ``claim_due(record=...)`` writes the outcomes inside the claim
    (:meth:`Tx.recording`); otherwise the store records them first, on their own."""
    compares_publications: bool
    """Whether the database compares a publication's declarations with the stored rows
    (:meth:`Tx.unchanged`); otherwise the store compares every row it reads."""
    claim_attempts: int
    """How often a claim rolled back by the database (:class:`RolledBack`) is run again."""

    def session(self) -> AbstractContextManager[Tx]: ...

    def transaction(self) -> AbstractContextManager[Tx]: ...

    def claim(self) -> AbstractContextManager[Tx]: ...

    def snapshot(self) -> AbstractContextManager[Tx]: ...

    def now(self) -> datetime:
        """The store's clock, outside any transaction."""
        ...

    def migrate(self) -> None: ...

    def close(self) -> None: ...

    def info(self) -> dict[str, Any]: ...

    def wait(self, timeout: float) -> bool:
        """:meth:`~goatbeat.core.store.ScheduleStore.wait`."""
        ...


# -- the wake-up channel's payloads (see goatbeat.core.store.NOTIFY_CHANNEL) -----------------

_PAYLOAD = re.compile(r"\A(?:schedule:[0-9]{1,19}|run:[0-9]{1,19}|lease:[A-Za-z0-9_.:/-]{1,64})\Z")


def validate_payload(payload: object) -> bool:
    """Whether ``payload`` is one of the identifiers the channel carries (see NOTIFY_CHANNEL).
    Receivers treat anything else as a plain wake-up."""
    return isinstance(payload, str) and _PAYLOAD.match(payload) is not None


def check_payload(payload: object) -> str:
    """``payload`` if it is a valid identifier; InvalidValue naming ``payload`` otherwise (we
    never send user text over the channel)."""
    if not validate_payload(payload):
        raise InvalidValue(
            "payload", payload, f"{payload!r} is not schedule:<id>, run:<id> or lease:<name>"
        )
    assert isinstance(payload, str)
    return payload


def lease_payload(name: str) -> str | None:
    payload = f"lease:{name}"
    return payload if validate_payload(payload) else None


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
    """The named query :meth:`Tx.executions` runs (with ``limit``, ``name`` and
    ``status``): four spellings rather than "param IS NULL OR ...", so each one gets an index
    plan."""
    if name is not None:
        return "executions_by_name_status" if status is not None else "executions_by_name"
    return "executions" if status is None else "executions_by_status"
