"""DialectStore: the ScheduleStore contract (:mod:`goatbeat.core.store`), implemented once.

Every operation is written here, once (the workers' reports and the operators' reads in
:mod:`~goatbeat.stores.operations`, a mixin DialectStore inherits): what is validated before
anything is read, what is read, how the writes are planned (:mod:`~goatbeat.stores.publication`,
:mod:`~goatbeat.stores.claims`, :mod:`~goatbeat.stores.control`), what is written in which
transaction, and what is returned. The database is a :class:`~goatbeat.stores.dialect.Dialect`
answering named primitives over its own ``queries.sql`` (SQLite, PostgreSQL): the dialect says
how a primitive runs there, never what an operation means.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.bounded import bound_calls
from goatbeat.core.clock import Clock
from goatbeat.core.errors import ConflictError, InvalidSchedule, ScheduleNotFound
from goatbeat.core.misfire import plan as default_plan
from goatbeat.core.model import (
    SCHEDULE_INVALID,
    ClaimResult,
    Execution,
    ExecutionStatus,
    LeaseGrant,
    Occurrence,
    OverlapPolicy,
    Schedule,
    Source,
    StoredSchedule,
    SubmitOutcome,
    idempotency_key,
    manual_key,
)
from goatbeat.core.shards import ALL, Shard, parse_lease_name
from goatbeat.core.store import BackfillResult, PublishResult, ResumeResult
from goatbeat.stores.arguments import check_execution_ids, check_positive
from goatbeat.stores.claims import Planner, occurrence_for, plan_batch, run_states
from goatbeat.stores.control import (
    ABANDONED_ERROR,
    PAUSE_WITHDRAWN,
    backfill_instants,
    check_pause,
    pause_values,
    resume_values,
)
from goatbeat.stores.definitions import (
    Comparison,
    SetFingerprint,
    edited,
    first_run,
    schedule_to_row,
    validate_batch,
    validate_schedule,
)
from goatbeat.stores.dialect import (
    Advanced,
    Dialect,
    NameTaken,
    NewExecution,
    RolledBack,
    Tx,
    check_payload,
    lease_payload,
)
from goatbeat.stores.operations import BOUND_REFRESH, OperationsMixin
from goatbeat.stores.publication import (
    enabled_values,
    plan_publish,
    publication_order,
    update_replace,
)
from goatbeat.stores.rows import (
    ScheduleCache,
    buffer_ready_at,
    decode_due,
    decode_pending,
    execution_from_row,
    read_schedule,
    schedule_from_row,
)

__all__ = ["DialectStore", "BOUND_REFRESH"]

_COMPARE_CHUNK = 2500
"""Declarations per ``publish_unchanged`` statement (about 100 KB of JSON each): small enough
that the database starts comparing soon and the last chunk's wait is short, large enough that
the statements' own cost does not count."""


class DialectStore(OperationsMixin):
    """The ScheduleStore over one :class:`~goatbeat.stores.dialect.Dialect`.

    ``clock`` is the store's clock where the database has none of its own (SQLite); PostgreSQL
    reads ``now()``. ``planner`` is :func:`goatbeat.core.misfire.plan` unless a test injects
    another."""

    def __init__(self, dialect: Dialect, clock: Clock, planner: Planner | None = None) -> None:
        self.dialect = dialect
        self.clock: Clock = clock
        self.planner: Planner = planner or default_plan
        self.supports_shards = dialect.supports_shards
        self._cache = ScheduleCache()
        # The longest max_runtime or expires of any schedule, and when (store clock) it was
        # read: end_lost_runs needs it every few seconds, and it takes a pass over the
        # schedule table. Forgotten on every definition change this store writes or hears of.
        self._bound: tuple[datetime, float] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def migrate(self) -> None:
        self.dialect.migrate()

    def close(self) -> None:
        self.dialect.close()

    def bound_calls(self, seconds: float) -> None:
        """Bound every wait for the database at ``seconds`` (the scheduler calls it with its
        :func:`~goatbeat.core.bounded.io_timeout`), where the dialect can: PostgreSQL's
        statements and connections. SQLite's waits are its ``busy_timeout``."""
        bound_calls(self.dialect, seconds)

    def database_identity(self) -> tuple[str, int] | None:
        """(system identifier, timeline) of the database, where the dialect can tell
        (PostgreSQL); None otherwise. See ``ScheduleStore``'s optional capabilities."""
        identity = getattr(self.dialect, "identity", None)
        if not callable(identity):
            return None
        found: tuple[str, int] | None = identity()
        return found

    def bound_connects(self, seconds: float) -> None:
        """Bound only the wait for a new connection (PostgreSQL), from the scheduler's start."""
        method = getattr(self.dialect, "bound_connects", None)
        if callable(method):
            method(seconds)

    def now(self) -> datetime:
        return self.dialect.now()

    def info(self) -> dict[str, Any]:
        return self.dialect.info()

    # -- schedules -----------------------------------------------------------------------------

    def publish(
        self,
        schedules: Sequence[Schedule],
        *,
        source: Source = Source.CODE,
        follow_last_run: bool = False,
        dry_run: bool = False,
        release: int | None = None,
        rollback: bool = False,
        renames: Mapping[str, str] | None = None,
    ) -> PublishResult:
        schedules = list(schedules)
        source = Source(source)
        code = source is Source.CODE
        renames = dict(renames or {}) if code else {}
        with self.dialect.transaction() as tx:
            tx.lock_publication()
            now = tx.now()
            setprint = SetFingerprint() if code else None
            # Validated before anything is written (a refusal rolls the whole publication back).
            definitions, unchanged = self._validate_and_compare(
                tx, schedules, source, follow_last_run, setprint
            )
            order = None
            current = None
            if setprint is not None:
                printed = setprint.digest()
                current = tx.current_publication()
                earlier = None
                if current is not None and current["fingerprint"] != printed:
                    earlier = tx.publication_generation(printed)
                order = publication_order(
                    current, printed, release, earlier=earlier, rollback=rollback
                )
            superseded = order is not None and order.verdict == "older"
            renamed, retired, taken_over = self._renames(
                tx, renames, source, write=not (dry_run or superseded)
            )
            rest = [s.name for s in schedules if s.name not in unchanged]
            existing = {r["name"]: r for r in tx.schedules_named(rest)} if rest else {}
            existing.update({k: v for k, v in taken_over.items() if k not in existing})
            actions = plan_publish(
                schedules,
                existing,
                source=source,
                now=now,
                definitions=definitions,
                follow_last_run=follow_last_run,
                unchanged=unchanged,
                keep_phase=renamed,
            )
            orphaned: list[str] = []
            if code:
                gone = set(renamed.values()) | set(retired)
                orphaned = [
                    n
                    for n in tx.orphans(source.value, [s.name for s in schedules])
                    if n not in gone
                ]
            if superseded:
                assert order is not None and current is not None
                return PublishResult(
                    unchanged=actions.unchanged,
                    kept=sorted({*actions.created, *actions.updated, *orphaned, *renamed}),
                    superseded=True,
                    reason=order.reason,
                    generation=int(current["generation"]),
                    release=current["release"],
                    dry_run=dry_run,
                )
            generation = None if current is None else int(current["generation"])
            published_release = None if current is None else current["release"]
            if order is not None and order.record:
                assert setprint is not None
                published_release = release
                if not dry_run:
                    generation = tx.record_publication(printed, release, len(schedules))
            result = replace(
                actions.result(orphaned=orphaned, dry_run=dry_run),
                renamed=renamed,
                retired=retired,
                generation=generation,
                release=published_release,
            )
            if dry_run:
                return result
            if actions.inserts:
                tx.insert_schedules(actions.inserts)
            if actions.replaces and tx.replace_schedules(actions.replaces) != len(actions.replaces):
                raise ConflictError("a schedule changed while it was being published")
            if actions.fingerprints:
                tx.set_fingerprints(actions.fingerprints)
            if actions.changed or renamed or retired:
                self._changed(tx, 0)
        return result

    @staticmethod
    def _renames(
        tx: Any, renames: Mapping[str, str], source: Source, *, write: bool
    ) -> tuple[dict[str, str], list[str], dict[str, dict[str, Any]]]:
        """Carry out (``write``) or only plan the renames of a code publication: ``{new:
        old}`` of the rows taken over, the old names disabled because the new one had a row,
        and (planning only) each taken-over row as it will read under its new name."""
        if not renames:
            return {}, [], {}
        names = sorted(set(renames) | set(renames.values()))
        rows = {r["name"]: r for r in tx.schedules_named(names)}
        renamed: dict[str, str] = {}
        retired: list[str] = []
        taken_over: dict[str, dict[str, Any]] = {}
        for new, old in sorted(renames.items()):
            before = rows.get(old)
            if before is None or before["source"] != source.value or new == old:
                continue
            if new not in rows:
                if (
                    write
                    and tx.rename_schedule(int(before["id"]), int(before["version"]), new) != 1
                ):
                    raise ConflictError(f"schedule {old!r} changed while it was being renamed")
                rows[new] = {**before, "name": new}
                taken_over[new] = {**before, "name": new, "version": int(before["version"]) + 1}
                renamed[new] = old
            elif before["enabled"]:
                if write:
                    values = {
                        "enabled": False,
                        "next_run_at": None,
                        "last_status": before["last_status"],
                    }
                    if tx.set_enabled(int(before["id"]), int(before["version"]), values) != 1:
                        raise ConflictError(f"schedule {old!r} changed while it was being retired")
                retired.append(old)
        return renamed, retired, ({} if write else taken_over)

    def _validate_and_compare(
        self,
        tx: Any,
        schedules: Sequence[Schedule],
        source: Source,
        follow_last_run: bool,
        setprint: SetFingerprint | None = None,
    ) -> tuple[list[dict[str, Any] | None], set[str]]:
        """Each declaration validated (:func:`~goatbeat.stores.definitions.validate_batch`'s
        checks, in its order) and its definition, and the names the dialect finds stored
        exactly as declared: one ``unchanged`` primitive per chunk carrying the chunk's
        declarations (:class:`~goatbeat.stores.definitions.Comparison`: each one's own
        columns, and the columns they share once per distinct combination), which the dialect
        may overlap with the validation of the next chunk. A declaration that may move the last
        run forward (``follow_last_run``) is left to the full comparison; so is every one when
        the dialect compares nothing. The definition of a declaration found unchanged may be
        None: it is not needed."""
        if not self.dialect.compares_publications or not tx.source_has_rows(source.value):
            validated = validate_batch(schedules)
            if setprint is not None:
                for declared, columns in zip(schedules, validated, strict=True):
                    setprint.add_definition(declared.name, columns)
            return list(validated), set()
        found: list[dict[str, Any] | None] = []
        seen: set[str] = set()
        answers: list[Collection[str]] = []
        chunk: list[list[Any]] = []
        comparison = Comparison()
        if setprint is not None:
            setprint.comparison = comparison
            setprint_parts = setprint.parts
        local: dict[int, int] = {}
        shared: list[list[Any]] = []
        compares = True

        def send() -> None:
            nonlocal compares
            answer = tx.unchanged(chunk, shared, source.value)
            if answer is None:
                compares = False
            else:
                answers.append(answer)
            chunk.clear()
            local.clear()
            shared.clear()

        with tx.comparing():
            for schedule in schedules:
                # An import (follow_last_run) compares each row in Python: its last run may
                # move forward, and the source's enabled flag is read from the fingerprint.
                if not compares or follow_last_run:
                    definition: dict[str, Any] | None = validate_schedule(schedule)
                    part = None
                else:
                    part, definition = comparison.add(schedule)
                if schedule.name in seen:
                    raise InvalidSchedule(
                        "name", schedule.name, f"{schedule.name!r} is declared twice"
                    )
                seen.add(schedule.name)
                found.append(definition)
                if setprint is not None:
                    if part is not None:
                        # Its text is made at digest(): one call per declaration here.
                        setprint_parts.append((part[0], part[1], part[2], part[3], part[4]))
                    else:
                        assert definition is not None
                        setprint.add_definition(schedule.name, definition)
                if part is None:
                    continue
                # The chunk carries the combinations its declarations use, renumbered.
                k = local.get(part[4])
                if k is None:
                    k = local[part[4]] = len(shared)
                    shared.append(comparison.shared[part[4]])
                part[4] = k
                chunk.append(part)
                if len(chunk) == _COMPARE_CHUNK:
                    send()
            if chunk:
                send()
        unchanged: set[str] = set()
        for answer in answers:
            unchanged.update(answer)
        for i, schedule in enumerate(schedules):
            if found[i] is None and schedule.name not in unchanged:
                found[i] = validate_schedule(schedule)
        return found, unchanged

    def edited_since_publish(self, names: Collection[str]) -> set[str]:
        with self.dialect.session() as tx:
            rows = tx.schedules_named(sorted(set(names)))
        return {r["name"] for r in rows if edited(r)}

    def prune(self, keep: Collection[str], *, source: Source = Source.CODE) -> list[str]:
        with self.dialect.transaction() as tx:
            pruned = tx.prune(Source(source).value, set(keep))
            if pruned:
                self._changed(tx, 0)
        return sorted(pruned)

    def create(self, schedule: Schedule) -> Schedule:
        definition = validate_schedule(schedule)
        taken = InvalidSchedule("name", schedule.name, f"{schedule.name!r} already exists")
        try:
            with self.dialect.transaction() as tx:
                if tx.schedule(schedule.name) is not None:
                    raise taken
                row = schedule_to_row(
                    schedule,
                    source=schedule.source,
                    enabled=schedule.enabled,
                    next_run_at=first_run(schedule, schedule.last_run_at or tx.now()),
                    definition=definition,
                )
                stored = tx.create_schedule(row)
                self._changed(tx, stored["id"])
        except NameTaken:  # lost a race for the name
            raise taken from None
        return schedule_from_row(stored)

    def _required(self, tx: Any, name: str) -> dict[str, Any]:
        row: dict[str, Any] | None = tx.schedule(name)
        if row is None:
            raise ScheduleNotFound(name)
        return row

    def _changed(self, tx: Tx, schedule_id: Any) -> None:
        """After a write to schedule ``schedule_id`` (0: several): the others are told, and
        the kept longest bound is read again (a definition changed)."""
        tx.notify(f"schedule:{schedule_id}")
        self._bound = None

    def _rewritten(
        self, tx: Tx, row: Mapping[str, Any], doing: str, written: int = 1
    ) -> dict[str, Any]:
        """Schedule ``row`` as read back after a write to it that changed ``written`` rows
        (anything but one: ConflictError, it "changed while being <doing>"), told as
        :meth:`_changed` tells it."""
        if written != 1:
            raise ConflictError(f"schedule {row['name']!r} changed while being {doing}")
        self._changed(tx, row["id"])
        return self._required(tx, row["name"])

    def update(self, schedule: Schedule, *, expected_version: int | None = None) -> Schedule:
        definition = validate_schedule(schedule)
        with self.dialect.transaction() as tx:
            row = self._required(tx, schedule.name)
            if expected_version is not None and row["version"] != expected_version:
                raise ConflictError(
                    f"schedule {schedule.name!r} is at version {row['version']}, "
                    f"not {expected_version}"
                )
            replace = update_replace(schedule, row, now=tx.now(), definition=definition)
            stored = self._rewritten(tx, row, "updated", tx.replace_schedules([replace]))
        return schedule_from_row(stored)

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        with self.dialect.transaction() as tx:
            row = self._required(tx, name)
            values = enabled_values(row, enabled, now=tx.now())
            if values is None:
                return read_schedule(row)
            written = tx.set_enabled(row["id"], row["version"], values)
            stored = self._rewritten(tx, row, "toggled", written)
        return read_schedule(stored)

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        note, by = check_pause(note, by)
        with self.dialect.transaction() as tx:
            row = self._required(tx, name)
            withdrawn = tx.withdraw_waiting(row["id"], PAUSE_WITHDRAWN)
            tx.pause(row["id"], pause_values(row, note=note, by=by, now=tx.now()), withdrawn)
            stored = self._rewritten(tx, row, "paused")
        return read_schedule(stored)

    def resume(
        self, name: str, *, catch_up: bool = False, now: datetime | None = None
    ) -> ResumeResult:
        with self.dialect.transaction() as tx:
            row = self._required(tx, name)
            at = (now or tx.now()).astimezone(UTC)
            planned = resume_values(row, catch_up=catch_up, now=at)
            if planned is None:
                return ResumeResult(schedule=read_schedule(row), was_paused=False)
            written = tx.resume(
                row["id"],
                row["version"],
                planned.values["next_run_at"],
                planned.values["skipped_count"],
            )
            stored = self._rewritten(tx, row, "resumed", written)
        return planned.result(read_schedule(stored), catch_up=catch_up)

    def backfill(
        self,
        name: str,
        *,
        start: datetime,
        end: datetime,
        limit: int,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> BackfillResult:
        with self.dialect.transaction() as tx:
            row = self._required(tx, name)
            at = (now or tx.now()).astimezone(UTC)
            instants = backfill_instants(row, start=start, end=end, limit=limit, now=at)
            key_of = {t: idempotency_key(name, t) for t in instants}
            by_key = {key: t for t, key in key_of.items()}
            found = tx.execution_statuses(list(key_of.values()))
            existing = {by_key[key]: status for key, status in found.items()}
            created = [t for t in instants if t not in existing]
            if created and not dry_run:
                wanted = [key_of[t] for t in created]
                landed = tx.insert_backfill(row["id"], name, created, wanted)
                # A concurrent writer may have taken an instant between the read and the write.
                for t in created:
                    if t not in landed:
                        existing[t] = ExecutionStatus.CLAIMED.value
                created = [t for t in created if t in landed]
                if created:
                    self._changed(tx, row["id"])
        return BackfillResult(
            name=name, instants=instants, created=created, existing=existing, dry_run=dry_run
        )

    def delete(self, name: str) -> None:
        with self.dialect.transaction() as tx:
            row = self._required(tx, name)
            tx.delete_schedule(row["id"], ABANDONED_ERROR)
            self._changed(tx, row["id"])

    def get(self, name: str) -> StoredSchedule:
        with self.dialect.session() as tx:
            return read_schedule(self._required(tx, name))

    def list_schedules(self, *, source: Source | None = None) -> list[StoredSchedule]:
        with self.dialect.session() as tx:
            rows = tx.schedules(None if source is None else Source(source).value)
        return [read_schedule(r) for r in rows]

    # -- the lease -----------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        with self.dialect.session() as tx:
            return tx.acquire_lease(name, holder, ttl)

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        with self.dialect.session() as tx:
            return tx.release_lease(name, holder, token, lease_payload(name))

    def read_lease(self, name: str) -> tuple[str, int, datetime, bool] | None:
        return self.read_leases([name]).get(name)

    def read_leases(self, names: Sequence[str]) -> dict[str, tuple[str, int, datetime, bool]]:
        with self.dialect.session() as tx:
            rows = tx.read_leases(list(names))
        return {r["name"]: _lease_tuple(r) for r in rows}

    def live_schedulers(self, within: timedelta, *, shards: int) -> list[str]:
        with self.dialect.session() as tx:
            return tx.live_schedulers(within, shards)

    # -- claiming ------------------------------------------------------------------------------

    def next_due_at(self, *, shard: Shard = ALL) -> datetime | None:
        with self.dialect.session() as tx:
            return tx.next_due_at(shard)

    def claim_due(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None = None,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        check_positive("limit", limit)
        if record and not self.dialect.records_in_claim:
            self.record_outcomes(record)
            record = ()
        attempts = self.dialect.claim_attempts
        for attempt in range(1, attempts + 1):
            try:
                return self._claim_once(lease, scheduler_id, limit, now, record)
            except RolledBack:
                # Rolled back as a whole, so nothing was written: safe to run again.
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _claim_once(
        self,
        lease: LeaseGrant,
        scheduler_id: str,
        limit: int,
        now: datetime | None,
        record: Sequence[SubmitOutcome],
    ) -> ClaimResult:
        with self.dialect.claim() as tx:
            check = tx.check_lease(lease)
            if check is None:
                if record:
                    with tx.recording(record):
                        pass
                return ClaimResult(occurrences=[], refused=True)
            at = (now or check.now).astimezone(UTC)
            shard = parse_lease_name(lease.name)
            rows = tx.due(at, limit, shard)
            # The earlier batch's outcomes are written while the rows are decoded and planned.
            with tx.recording(record) if record else nullcontext():
                schedules, damaged = decode_due(rows, self._cache.from_row)
                batch = plan_batch(schedules, at, self.planner, run_states(rows, at))
            batch.schedules_seen = len(rows)
            advs = batch.advances
            if not advs and not damaged and not check.buffered:
                return ClaimResult(occurrences=[], schedules_seen=batch.schedules_seen)
            if not tx.begin_writes(lease):
                return ClaimResult(occurrences=[], refused=True)
            quarantined = []
            if damaged:
                ids = [(d.id, d.version) for d in damaged if d.id is not None]
                written = tx.quarantine(ids, SCHEDULE_INVALID)
                quarantined = [d for d in damaged if d.id in written]
            advanced: set[int] = set()
            if advs:
                advanced = tx.advance(
                    [
                        Advanced(
                            id=a.schedule.id,  # type: ignore[arg-type]
                            version=a.schedule.version,
                            next_run_at=a.plan.next_run_at,
                            last_run_at=a.last_run_at,
                            last_status=a.last_status,
                            runs=len(a.starts),
                            missed=a.plan.missed,
                            skipped=len(a.skips),
                            disable=a.disable,
                        )
                        for a in advs
                    ],
                    lease,
                )
            occurrences: list[Occurrence] = []
            deferred = buffered = 0
            planned = batch.executions_for(advanced)
            if planned:
                waits = [p.due_at is not None and p.due_at > at for p in planned]
                inserted = tx.insert_executions(
                    [
                        NewExecution(
                            schedule_id=p.schedule.id,  # type: ignore[arg-type]
                            schedule_name=p.schedule.name,
                            scheduled_at=p.scheduled_at,
                            key=p.key,
                            status=p.status,
                            retry_at=p.due_at if wait else None,
                        )
                        for p, wait in zip(planned, waits, strict=True)
                    ],
                    lease.token,
                    scheduler_id,
                )
                started: dict[int, int] = {}
                for p, wait in zip(planned, waits, strict=True):
                    execution_id = inserted.get(p.key)
                    if execution_id is None:
                        continue
                    if p.status == ExecutionStatus.BUFFERED.value:
                        buffered += 1
                    if p.status != ExecutionStatus.CLAIMED.value:
                        continue
                    if p.schedule.overlap is not OverlapPolicy.ALLOW:
                        assert p.schedule.id is not None
                        started[p.schedule.id] = execution_id
                    if wait:
                        deferred += 1
                        continue
                    occurrences.append(
                        occurrence_for(
                            p.schedule,
                            execution_id=execution_id,
                            scheduled_at=p.scheduled_at,
                            key=p.key,
                            token=lease.token,
                            due_at=p.due_at,
                        )
                    )
                if started:
                    tx.started_runs(started)
            if check.buffered:
                occurrences += self._promote_buffered(tx, lease, scheduler_id, check.now, shard)
        # Committed: only now may the cache believe the rows are at their new versions.
        if advanced:
            self._cache.advanced_all(a.schedule for a in advs if a.schedule.id in advanced)
        return ClaimResult(
            occurrences=occurrences,
            conflicts=len(advs) - len(advanced),
            missed=batch.missed_for(advanced),
            misses=batch.misses_for(advanced),
            schedules_seen=batch.schedules_seen,
            quarantined=quarantined,
            skipped=batch.skipped_for(advanced),
            buffered=buffered,
            deferred=deferred,
        )

    def _promote_buffered(
        self, tx: Any, lease: LeaseGrant, scheduler_id: str, now: datetime, shard: Shard
    ) -> list[Occurrence]:
        """Buffered occurrences (of the lease's shard) whose schedule's run ended (or expired
        by ``max_runtime``) start now: they become this claim's, and the run their schedule
        waits for next."""
        ready = [
            int(r["buffered_id"])
            for r in tx.buffered_runs(shard)
            if (at := buffer_ready_at(r)) is not None and at <= now
        ]
        if not ready:
            return []
        occurrences, failed = decode_pending(tx.promote(ready, lease.token, scheduler_id))
        if failed:  # nothing can submit them
            tx.abandon(failed)
        return occurrences

    def pending(
        self, *, limit: int, exclude: Collection[int] = (), shard: Shard = ALL
    ) -> list[Occurrence]:
        check_positive("limit", limit)
        skip = check_execution_ids("exclude", exclude)
        with self.dialect.session() as tx:
            rows = tx.pending(limit, skip, shard)
        occurrences, failed = decode_pending(rows)
        if failed:  # nothing can submit them
            with self.dialect.session() as tx:
                tx.abandon(failed)
        return occurrences

    def next_retry_at(self, *, shard: Shard = ALL) -> datetime | None:
        with self.dialect.session() as tx:
            return tx.next_retry_at(shard)

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        if not outcomes:
            return
        with self.dialect.session() as tx:
            tx.record_outcomes(outcomes)

    def refuse(self, schedule_id: int, task: str, *, reason: str) -> bool:
        with self.dialect.session() as tx:
            return tx.refuse(int(schedule_id), task, reason)

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        wanted = check_execution_ids("execution_ids", execution_ids)
        if not wanted:
            return []
        shard = parse_lease_name(lease.name)
        with self.dialect.session() as tx:
            return sorted(tx.claim_manual_runs(lease, scheduler_id, wanted, shard))

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        with self.dialect.transaction() as tx:
            schedule = self._required(tx, name)
            schedule_from_row(schedule)  # a damaged schedule cannot run: DamagedRow
            at = (now or tx.now()).astimezone(UTC)
            key = manual_key(name, at)
            row = tx.request_run(schedule["id"], name, at, key)
            if row is None:  # a concurrent identical request committed between our reads
                raise ConflictError(f"run of {name!r} at {at.isoformat()} is being requested")
            execution = execution_from_row(row)
            tx.notify(f"run:{execution.id}")
        return execution

    def executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[Execution]:
        check_positive("limit", limit)
        wanted = None if status is None else ExecutionStatus(status).value
        with self.dialect.session() as tx:
            rows = tx.executions(name, wanted, limit)
        return [execution_from_row(r) for r in rows]

    # -- wake-ups ------------------------------------------------------------------------------

    def notify(self, payload: str) -> None:
        check_payload(payload)
        with self.dialect.session() as tx:
            tx.notify(payload)

    def wait(self, timeout: float) -> bool:
        woke = self.dialect.wait(timeout)
        if woke:
            # A notification: a schedule changed somewhere (or a run was asked for).
            self._bound = None
        return woke


def _lease_tuple(row: dict[str, Any]) -> tuple[str, int, datetime, bool]:
    return (row["holder"], int(row["token"]), row["expires_at"], bool(row["expired"]))
