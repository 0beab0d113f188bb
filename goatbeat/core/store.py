"""The ScheduleStore contract: where schedules, executions and the lease live.

Three stores pass one conformance suite (``tests/conformance/``): ``MemoryStore`` (tests,
single process), ``SQLiteStore`` (the embedded default; several processes on one host) and
``PostgresStore`` (production; many hosts). They are one implementation,
``goatbeat.stores.store.DialectStore``, over the SQLite and PostgreSQL dialects (the memory
store is SQLite in memory). Each method's docstring says which rows it may touch; an
implementation that touches others is wrong.

Clocks. Lease expiry is always judged by the *store's* clock (PostgreSQL's ``now()``), never by
the caller's. Due-ness (``next_run_at <= now``) uses the store's clock too unless the caller
passes ``now`` explicitly (tests, replay tools).

Errors. Validation happens before anything is written: a bad schedule raises an
``InvalidValue`` subclass and the store is unchanged. Lost connections raise ``StoreError``;
the next call may reconnect.

Damaged rows. A stored row that cannot be decoded (edited by hand, restored from a bad dump:
an unknown trigger kind or zone, args that are not a JSON array, ``catch_up_limit`` 0 ...)
never stops the others. Reading it (``get``, ``list_schedules``) gives a
:class:`~goatbeat.core.model.DamagedSchedule` naming the column; a claim quarantines it
(``last_status`` ``'invalid'``, ``next_run_at`` NULL, version bumped, reported in
``ClaimResult.quarantined``) and claims the rest; ``pending`` ends its claimed executions as
``submit_failed``; ``request_run`` and enabling it raise ``DamagedRow``. Writing a valid
definition over it (``update``, ``publish``) or enabling it once repaired by hand schedules it
again from now.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from goatbeat.core.errors import InvalidValue
from goatbeat.core.health import (
    Outcome,
    Refusals,
    ScheduleHealth,
    SchedulerBeat,
    StatusSnapshot,
)
from goatbeat.core.model import (
    ClaimResult,
    Execution,
    ExecutionStatus,
    LeaseGrant,
    Miss,
    Occurrence,
    Schedule,
    Source,
    StoredSchedule,
    SubmitOutcome,
    json_safe,
)
from goatbeat.core.shards import ALL, Shard
from goatbeat.core.triggers import trigger_from_spec

__all__ = [
    "ShardedStore",
    "ScheduleStore",
    "PublishResult",
    "ResumeResult",
    "BackfillResult",
    "FieldChange",
    "definition_changes",
    "NOTIFY_CHANNEL",
    "SCHEMA_VERSION",
]

NOTIFY_CHANNEL = "goatbeat"
"""The one LISTEN/NOTIFY channel. Payloads carry identifiers only: ``schedule:<id>``,
``run:<id>``, ``lease:<name>``; receivers validate them and treat anything else as a plain wake-up."""

SCHEMA_VERSION = 9


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldChange:
    """One stored column of a schedule's definition that a write changes: ``old`` as stored,
    ``new`` as written, both JSON-able (a trigger as its spec, an instant as ISO text)."""

    field: str
    old: Any
    new: Any

    def describe(self) -> str:
        """``"trigger: cron 0 9 * * * (UTC) -> cron 30 8 * * * (UTC)"``."""
        return f"{self.field}: {_shown(self.field, self.old)} -> {_shown(self.field, self.new)}"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}


def _shown(field_name: str, value: Any) -> str:
    if field_name == "trigger" and isinstance(value, Mapping):
        try:
            return trigger_from_spec(value).describe()
        except (InvalidValue, TypeError, ValueError):
            pass  # a damaged spec: shown as stored
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def definition_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """The columns whose values differ between two definitions (stored column -> value), in
    ``new``'s order. ``timezone`` repeats the trigger's zone, so it is named only when the
    trigger itself is unchanged (a row whose two columns disagreed)."""
    changes = [
        FieldChange(field=name, old=json_safe(old.get(name)), new=json_safe(value))
        for name, value in new.items()
        if old.get(name) != value
    ]
    if any(c.field == "trigger" for c in changes):
        changes = [c for c in changes if c.field != "timezone"]
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishResult:
    """What one publication did (or, with ``dry_run``, would do), schedule by schedule."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # definition changed: next_run_at recomputed
    unchanged: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    """Same definition, but another scheduler ran it since (``follow_last_run``): last_run_at
    and next_run_at moved forward."""
    changes: dict[str, list[FieldChange]] = field(default_factory=dict)
    """For each name in ``updated``: the columns that changed, old -> new (a damaged row that
    was rewritten also names ``last_status`` ``'invalid'`` -> None)."""
    orphaned: list[str] = field(default_factory=list)
    """Code publications only: enabled ``code`` schedules this publication does not declare
    (removed from the code, or declared by another checkout), by name. They keep running
    until pruned (``prune``) or deleted."""
    refused: dict[str, str] = field(default_factory=dict)
    """Code publications only: declarations left out of this publication, by name, with the
    reason (a new one-off whose instant is already past). The others are published; a stored
    row of a refused name keeps what it had and is not counted orphaned."""
    dry_run: bool = False
    renamed: dict[str, str] = field(default_factory=dict)
    """Code publications: ``{new name: old name}`` of each declaration whose old name's row it
    took over (same row: history, last run and phase kept; the old name stops in the same
    step)."""
    retired: list[str] = field(default_factory=list)
    """Old names of renamed declarations whose new name already had a row: disabled in the
    same step (the new row keeps its own history)."""
    superseded: bool = False
    """Code publications: this code is older than the release the store's definitions come
    from (see :meth:`ScheduleStore.publish`), so nothing was written: the schedulers keep
    dispatching the stored definitions. ``created``, ``updated`` and ``orphaned`` are then
    empty and ``kept`` names what this code would have changed."""
    kept: list[str] = field(default_factory=list)
    """With ``superseded``: the schedules this code declares otherwise (or not at all) whose
    stored definitions were kept, by name."""
    generation: int | None = None
    """Code publications: the publication generation the stored definitions are at afterwards
    (1, 2, ...: one more each time a code set is published; None before schema 8's first)."""
    release: int | None = None
    """The release number of that generation, as its deploy gave it (None: none given)."""
    reason: str = ""
    """With ``superseded``: why this code was found older, in words."""

    @property
    def changed(self) -> bool:
        """Whether the publication wrote (or would write) anything."""
        return bool(self.created or self.updated or self.refreshed or self.renamed or self.retired)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndedRun:
    """A run :meth:`ScheduleStore.end_lost_runs` ended: ``status`` ``lost`` or ``expired``."""

    schedule_name: str
    idempotency_key: str
    status: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeResult:
    """What one :meth:`ScheduleStore.resume` did."""

    schedule: StoredSchedule
    """The row as written."""
    was_paused: bool
    """False: it was not paused, and nothing was written."""
    catch_up: bool = False
    skipped: int = 0
    """Occurrences of the pause recorded as skipped (``catch_up=False``), added to
    ``skipped_count``; none with ``catch_up``, where the misfire policy decides."""
    skipped_is_lower_bound: bool = False
    first_skipped: datetime | None = None
    last_skipped: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillResult:
    """What one :meth:`ScheduleStore.backfill` did (or, with ``dry_run``, would do)."""

    name: str
    instants: list[datetime]
    """Every instant of the range, oldest first."""
    created: list[datetime] = field(default_factory=list)
    """Instants inserted for the leader to submit (with ``dry_run``: that would be)."""
    existing: dict[datetime, str] = field(default_factory=dict)
    """Instants that already had an execution (a scheduled run, an earlier backfill), and
    its status: never submitted again."""
    dry_run: bool = False


@runtime_checkable
class ScheduleStore(Protocol):
    """Schedules, executions and the lease, behind one contract."""

    # -- lifecycle -----------------------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade the schema; idempotent; records the schema version.
        Touches only goatbeat's own tables."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...

    def now(self) -> datetime:
        """The store's clock (aware UTC): PostgreSQL ``now()``; an injectable clock elsewhere."""
        ...

    # -- schedules ------------------------------------------------------------------------------

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
        """Upsert declared schedules by name, all in one transaction.

        Code publications are ordered (schema 8, ``goatbeat_publication``). The whole declared
        set has a fingerprint; each publication of a new set is recorded as the next
        *generation*, with the ``release`` number its deploy gave (None: none). Before writing
        anything, a code publication is compared with the latest generation:

        - the latest's own set: the same release, published as usual (recorded as a new
          generation only for a higher release number);
        - a ``release`` lower than the latest's, both given: older code;
        - otherwise (no release, or the same one) the set published before the latest (its
          fingerprint is an earlier generation's): older code;
        - no release while the latest has one: older code too (the deploy numbers its
          releases; a command without the number cannot say it is newer);
        - anything else is newer: published, recorded as the next generation.

        Older code writes nothing: the result is ``superseded``, ``kept`` naming what it would
        have changed. ``rollback`` publishes older code on purpose (a new generation).

        ``renames``: ``{new name: old name}`` of code declarations renamed. When the old name
        has a row of this source and the new one none, that row is renamed in place (its id,
        executions, misses, last run and phase kept: ``next_run_at`` stays unless the trigger
        or its zone changed) before the publication compares it; when both have rows, the old
        one is disabled in the same transaction (``retired``).

        - New name: inserted with ``next_run_at = schedule.first_run_after(anchor)`` where anchor
          is ``schedule.last_run_at`` when given (importers carry celery's last run so the first
          goatbeat run is the one celery would have made next) else the store's now.
        - Existing row of the same ``source`` whose ``definition()`` differs: definition replaced,
          ``next_run_at`` recomputed from the store's now, ``version`` bumped.
        - Same definition: untouched (no version bump, no write), unless the row was
          quarantined as damaged: then it is rewritten and scheduled again (from now, or from
          the later last run below).
        - ``follow_last_run`` (importers: ``schedule.last_run_at`` is when ANOTHER scheduler,
          celery, last ran it): for a schedule that carries a ``last_run_at``, the row's phase
          follows the later of that and the row's own ``last_run_at`` (which goatbeat's claims
          advance). A changed definition gets ``next_run_at = first_run_after(later)`` instead
          of from now, so an occurrence due since is still run (once, by the misfire policy);
          the same definition with a later last run than the row's moves ``last_run_at`` to it
          and ``next_run_at`` forward to ``first_run_after(later)`` (never backwards), version
          bumped, reported in ``refreshed``. ``last_run_at`` never moves backwards.
        - The row's pause is NEVER changed by publish, nor its ``enabled`` flag (an operator's
          toggle survives redeploys), with one exception for ``follow_last_run``: when the
          source changed ``schedule.enabled`` since the last publication and the row still has
          the flag that publication declared (nobody toggled it in goatbeat), the row follows
          the source (``next_run_at`` from the later last run, else now; reported in
          ``updated`` with an ``enabled`` change). A new row takes ``schedule.enabled``,
          unpaused.
        - Every row publish writes (or finds unchanged) records a fingerprint of the definition
          it published, so :meth:`edited_since_publish` can tell an edit made since; with
          ``follow_last_run`` the fingerprint also holds the declared ``enabled`` flag.
        - A name that exists with another source raises ``InvalidSchedule`` (field ``name``)
          and nothing is written.
        The result names each schedule created, updated (with its ``changes``, old -> new per
        column, read in the same transaction as the write) and unchanged; for ``source=code``
        also the ``orphaned`` ones: enabled code rows not in ``schedules`` (never touched here;
        see :meth:`prune`). With ``dry_run`` it computes the same result and writes nothing.
        Touches: schedule rows named in ``schedules``. Notifies the channel when anything changed.
        """
        ...

    def edited_since_publish(self, names: Collection[str]) -> set[str]:
        """Those of ``names`` whose definition is no longer the one :meth:`publish` last wrote:
        an :meth:`update` (the admin, the API) changed it since. Rows :meth:`create` made, and
        rows not published since schema version 3 (no fingerprint yet), are never reported.
        Read-only."""
        ...

    def prune(self, keep: Collection[str], *, source: Source = Source.CODE) -> list[str]:
        """Disable (never delete) enabled schedules of ``source`` whose name is not in ``keep``.
        Returns the names disabled. Touches: those rows (enabled, next_run_at, version)."""
        ...

    def create(self, schedule: Schedule) -> Schedule:
        """Insert one schedule (usually ``source=admin``); ``next_run_at`` computed as in publish.
        Raises ``InvalidSchedule`` (field ``name``) if the name exists. Returns the stored row."""
        ...

    def update(self, schedule: Schedule, *, expected_version: int | None = None) -> Schedule:
        """Replace the definition and ``enabled`` of the row named ``schedule.name``.

        ``next_run_at`` is recomputed from now when the definition changed, the schedule was
        re-enabled, or it had been quarantined as damaged (``last_status`` is then cleared). With ``expected_version``, a row whose version differs raises
        ``ConflictError`` and nothing is written. Bumps ``version``. ``ScheduleNotFound`` if absent.
        Touches: that row."""
        ...

    def set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        """Enable or disable one schedule (allowed for every source, code included). Enabling
        recomputes ``next_run_at`` from now; disabling clears it. Bumps version. Notifies.
        A damaged row can be disabled; enabling it raises ``DamagedRow`` until it is repaired,
        and enabling a quarantined row that was repaired by hand schedules it again."""
        ...

    def pause(self, name: str, *, note: str = "", by: str | None = None) -> StoredSchedule:
        """Pause one schedule (any source, code included; a damaged row too): ``paused``,
        ``paused_at`` (the store's now; kept when it was already paused), ``paused_by`` and
        ``pause_note`` are written, ``version`` bumped, the channel notified. ``next_run_at``
        is kept (where the pause began) but a paused row is never due: the due index leaves
        it out, so :meth:`claim_due` and :meth:`next_due_at` never see it. Occurrences of it
        waiting to start are withdrawn: ``buffered`` ones, and ``claimed`` ones never tried
        that wait for their jittered instant (``retry_at`` later than now, ``attempts`` 0)
        become ``skipped`` (counted in ``skipped_count``). ``ScheduleNotFound`` if absent.
        Touches: that row and those executions."""
        ...

    def resume(
        self, name: str, *, catch_up: bool = False, now: datetime | None = None
    ) -> ResumeResult:
        """Resume a paused schedule; clears the pause columns, bumps ``version``, notifies.

        - ``catch_up=False`` (from now): ``next_run_at`` becomes the first instant after now;
          the instants from the stored ``next_run_at`` up to now are *skipped*, counted (not
          one execution each: a long pause of a per-second schedule would write millions of
          rows) into ``skipped_count`` and the result.
        - ``catch_up=True``: ``next_run_at`` is kept, so the next claim plans the pause's
          instants with the schedule's misfire policy and ``catch_up_limit`` (what the policy
          drops counts as missed, as after an outage).
        A disabled schedule is only unpaused (it owes nothing). Not paused: nothing is
        written (``was_paused=False``). ``DamagedRow`` when resuming from now needs the
        trigger of a row that cannot be decoded. ``ScheduleNotFound`` if absent.
        Touches: that row."""
        ...

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
        """Ask the leader to submit every instant of ``name``'s trigger in ``[start, end)``
        (within ``start_at``/``end_at``), once per instant: one execution each, kind
        ``backfill``, status ``claimed``, under the instant's scheduled idempotency key
        (``ON CONFLICT DO NOTHING``), so an instant that already ran (or was skipped, or
        backfilled before) is reported in ``existing`` and never submitted again. Like a
        run-now request the rows wait unclaimed (no token) until the leader claims them
        (:meth:`claim_manual_runs`) and submits them through :meth:`pending`; the channel is
        notified. Nothing is written, and ``InvalidValue`` names the field, when ``end`` is
        not after ``start`` (``to``), ``end`` is later than the store's now (``to``: only past
        instants are backfilled), or the range holds more than ``limit`` instants (``limit``).
        ``dry_run`` computes the same result and writes nothing. ``ScheduleNotFound`` if
        absent; ``DamagedRow`` if its row cannot be decoded. Touches: new execution rows."""
        ...

    def delete(self, name: str) -> None:
        """Delete a schedule; its executions stay as history (schedule id set to NULL), and
        those still ``claimed`` or ``buffered`` (never submitted) become ``submit_failed`` with the reason,
        since nothing can submit them any more. ``ScheduleNotFound`` if absent."""
        ...

    def get(self, name: str) -> StoredSchedule:
        """One schedule by name (a DamagedSchedule for a row that cannot be decoded);
        ``ScheduleNotFound`` if absent."""
        ...

    def list_schedules(self, *, source: Source | None = None) -> list[StoredSchedule]:
        """Every schedule (optionally of one source), ordered by name; a row that cannot be
        decoded comes as a DamagedSchedule naming the column, never as an error."""
        ...

    # -- the lease ------------------------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        """Take or renew the lease ``name`` for ``holder``, expiring ``ttl`` after the STORE's now.

        Succeeds when the row is absent, expired (store clock), or already held by ``holder``.
        The fencing token is incremented whenever the holder changes (a renewal keeps it; a
        re-acquire by the same holder after expiry keeps it too, because nobody else held it
        meanwhile). Returns None when somebody else holds an unexpired lease.
        Touches: the lease row."""
        ...

    def release_lease(self, name: str, holder: str, token: int) -> bool:
        """Expire the lease now if ``holder`` still holds it with ``token``; notify the channel
        so a standby takes over at once. Returns whether it released."""
        ...

    def read_lease(self, name: str) -> tuple[str, int, datetime, bool] | None:
        """(holder, token, expires_at, expired_by_store_clock) or None. Read-only."""
        ...

    # -- claiming -------------------------------------------------------------------------------

    def next_due_at(self) -> datetime | None:
        """The earliest instant a claim has work: the earliest ``next_run_at`` of an enabled,
        unpaused schedule (uses the index), or of a ``buffered`` occurrence, the end of the
        run it waits for (at once when that run ended; its submission plus the schedule's
        ``max_runtime``; none while that run is still ``claimed``). Read-only."""
        ...

    def claim_due(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None = None,
        record: Sequence[SubmitOutcome] = (),
    ) -> ClaimResult:
        """Claim up to ``limit`` due schedules in ONE transaction.

        ``record``: outcomes of an earlier batch's submissions, written exactly as
        :meth:`record_outcomes` writes them, before step 1 or in the same transaction, also when
        the claim is refused (a claim that fails may leave them unwritten: the loop then
        records them itself). The loop hands the
        outcomes of a batch to the claim of the next one, so a store that can may overlap
        their write with the claim's own work (PostgreSQL sends it right behind the due read
        and decodes the rows while the server writes).

        1. Check the lease row: holder and token equal ``lease``'s and unexpired by the store's
           clock, row-locked (``FOR SHARE``). Otherwise return ``ClaimResult(refused=True)``
           having written nothing (``record`` apart).
        2. Read enabled, unpaused schedules with ``next_run_at <= now`` ordered by
           ``next_run_at``, at most ``limit``; plan each with
           :func:`goatbeat.core.misfire.plan`, and split the plan by the schedule's overlap
           policy (:func:`goatbeat.stores.claims.split_overlap`: whether the run
           ``active_execution_id`` names is still running, judged at ``now``, and whether an
           occurrence of it is already ``buffered``). A row that
           cannot be decoded is quarantined instead (compare-and-set on version): ``next_run_at``
           NULL, ``last_status='invalid'``, ``version+1``; it is returned in ``quarantined``.
        3. Advance each with compare-and-set: ``next_run_at``, ``last_run_at`` (latest planned
           instant), ``last_status='claimed'``, ``total_run_count``, ``missed_count``,
           ``version+1`` WHERE ``version`` = the version read. A row changed meanwhile is
           skipped (counted in ``conflicts``): the concurrent edit wins. ``one_off`` schedules
           are disabled after their claim.
           ``skipped_count`` grows by the occurrences the overlap policy skips;
           ``total_run_count`` counts the ones started.
        4. Insert one execution per planned instant for the rows advanced: status ``claimed``
           (``buffered`` or ``skipped`` as the overlap policy says), key
           :func:`~goatbeat.core.model.idempotency_key`, the fencing token, scheduler id,
           ``ON CONFLICT (idempotency_key) DO NOTHING``. A claimed occurrence of a schedule
           with ``jitter`` whose jittered instant (:mod:`goatbeat.core.jitter`) is later than
           ``now`` gets ``retry_at`` = that instant and is not returned (counted in
           ``deferred``: :meth:`pending` returns it then); the others become occurrences
           (``due_at`` = the jittered instant). A schedule whose overlap is not allow records
           the occurrence it started in ``active_execution_id``.
        5. Start the ``buffered`` occurrences whose run has ended (or is older than its
           schedule's ``max_runtime``, by the store's clock): status ``claimed`` with this
           lease's token and scheduler id, ``claimed_at`` now, returned as occurrences; each
           becomes its schedule's ``active_execution_id`` and counts as a run.
        Touches: due schedule rows, new execution rows, buffered executions and their
        schedules. ``schedules_seen`` counts every due row read, damaged ones included."""
        ...

    def pending(self, *, limit: int, exclude: Collection[int] = ()) -> list[Occurrence]:
        """Executions in status ``claimed`` (left by a crash between claim and bookkeeping, or
        manual run requests and backfills), oldest first, as occurrences to (re)submit, leaving
        out rows backing off from a failed submission or waiting for their jittered instant
        (``retry_at`` later than the store's now) and the execution ids in ``exclude``. Each
        occurrence carries its schedule's ``misfire_grace`` and its ``due_at``: a backfill's
        ``claimed_at``, a scheduled occurrence's jittered instant (recomputed from the
        schedule's ``jitter``), else None.
        Read-only, except that a row whose schedule cannot be decoded becomes ``submit_failed``
        with the reason (nothing could ever submit it) instead of being returned."""
        ...

    def next_retry_at(self) -> datetime | None:
        """The earliest ``retry_at`` of a ``claimed`` execution backing off (store clock), or
        None when none is. Read-only."""
        ...

    def record_outcomes(self, outcomes: Sequence[SubmitOutcome]) -> None:
        """Bookkeeping after submission, one transaction for the batch.

        ``ok``: status ``submitted``, ``submitted_at``, ``backend_task_id``, attempts+1.
        not ok and ``final``: ``submit_failed`` with the error, attempts+1; with ``missed``
        (the occurrence's grace ran out) its schedule's ``missed_count`` grows by one.
        not ok, not final: stays ``claimed``, attempts+1, error recorded, ``retry_at`` set to
        the store's now plus ``retry_in`` (``pending`` leaves it out until then; the backoff
        outlives the process that failed, so a new leader keeps it).
        Also sets the schedule's ``last_status`` to the status of its latest occurrence in
        the batch (``'missed'`` for a missed one). Only rows still ``claimed`` change, except
        that an ``ok`` outcome for a row a worker already reported on (``running``,
        ``retried``, ``succeeded``, ``failed``: the worker outran the bookkeeping) records
        ``submitted_at``, ``backend_task_id`` and attempts+1 and keeps the worker's status.
        Touches: those execution rows and their schedules' ``last_status`` and
        ``missed_count``."""
        ...

    def refuse(self, schedule_id: int, task: str, *, reason: str) -> bool:
        """The scheduler will not run ``task`` (outside its allow-list). If schedule
        ``schedule_id`` still names ``task``: its ``claimed`` executions end as
        ``submit_failed`` with ``reason`` and its ``last_status`` becomes ``'refused'``; a
        schedule not declared in code (``source`` other than ``code``) is also taken out of
        scheduling (``next_run_at`` NULL, ``version+1``, unless it already is; ``enabled``
        unchanged), so it is not claimed again until an edit, or disabling and enabling it,
        schedules it again. A ``code`` row keeps its schedule: the replica that refuses it may
        run older code than the one that declared it, and publishing rewrites a row whose task
        was changed behind goatbeat's back. Returns whether the row still named ``task``;
        nothing happens when it is gone or names another task (an edit fixed it meanwhile:
        its claimed executions then go out with the new task).
        Touches: that schedule row and its claimed executions."""
        ...

    def claim_manual_runs(
        self, lease: LeaseGrant, *, scheduler_id: str, execution_ids: Collection[int]
    ) -> list[int]:
        """Claim run-now (and backfill) executions for the lease holder before it submits
        them, in ONE transaction, as :meth:`claim_due` claims occurrences: check the lease row
        (holder, token, unexpired by the store's clock; row-locked), then each execution of
        ``execution_ids`` that is ``manual`` or ``backfill``, still ``claimed`` and not yet claimed by a
        scheduler (``fencing_token`` NULL) takes ``scheduler_id``, the lease's token and
        ``claimed_at`` = the store's now (the request's instant stays its ``scheduled_at``), and
        counts as a run of its schedule: ``last_run_at`` becomes its instant when later,
        ``total_run_count`` + 1, ``last_status`` ``'claimed'`` (``next_run_at`` and
        ``version`` unchanged: the schedule's own phase does not move). A resubmission later
        carries the same token. Returns the ids claimed, sorted; with a stale lease, none, and
        nothing is written. Touches: those execution rows and their schedules."""
        ...

    def record_started(self, idempotency_key: str, *, worker: str | None = None) -> bool:
        """A worker started running the execution with ``idempotency_key`` (an attempt, or a
        retry): status ``running``, ``started_at`` = the store's now, ``worker``; its
        schedule's ``last_status`` becomes ``running`` when the execution is the schedule's
        latest run (``scheduled_at >= last_run_at``). Any status may start again: a worker
        reports what really ran, a duplicate delivery included. Returns whether a row
        matched. Touches: that execution row and its schedule's ``last_status``."""
        ...

    def record_completion(
        self,
        idempotency_key: str,
        *,
        outcome: Outcome,
        error: str | None = None,
        runtime: float | None = None,
        worker: str | None = None,
    ) -> bool:
        """A worker reports how an attempt of the execution with ``idempotency_key`` ended.

        The execution: status ``outcome``, ``finished_at`` = the store's now, ``error`` (None
        on success), ``runtime`` in seconds (when None: from ``started_at`` to now, if it
        started), ``worker`` when given; ``retried`` also counts ``retries`` + 1.
        Its schedule: ``succeeded`` sets ``last_success_at`` to now and
        ``consecutive_failures`` to 0; ``failed`` sets ``last_failure_at`` to now and adds 1
        to ``consecutive_failures`` unless the execution was already ``failed`` (a duplicate
        report counts once); ``last_status`` becomes ``outcome`` when the execution is the
        schedule's latest run. A report may arrive before the scheduler recorded the
        submission (a fast worker): :meth:`record_outcomes` then keeps the worker's status.
        A run that ends (``succeeded``/``failed``) while an occurrence of its schedule is
        ``buffered`` notifies the channel (``schedule:<id>``) so the leader starts that one.
        A failure that brings ``consecutive_failures`` to the schedule's ``pause_on_failure``
        pauses it (:meth:`pause`, by ``goatbeat``, the note saying why) unless it is paused.
        Returns whether a row matched. Touches: that execution and its schedule."""
        ...

    def end_lost_runs(self, *, lost_after: timedelta, limit: int = 1000) -> list[EndedRun]:
        """End the runs no report will end (the leading scheduler calls it now and then):
        each open run (``submitted``, ``running``, ``retried``) that
        :func:`~goatbeat.core.health.judge_open_run` judges at the store's now is recorded as
        :meth:`record_completion` records ``lost`` or ``expired``, with the reason as its
        error, only if it is still open (a report that came meanwhile wins). ``submitted``
        runs are judged only for schedules whose workers report (a success or failure
        recorded) and up to :data:`~goatbeat.core.health.LOST_LOOKBACK` after the longest
        bound of any schedule (a store may keep that bound a few minutes, reading it again
        after a definition change it wrote or was notified of: a stale one only delays
        ending runs older than its window). At most ``limit`` runs of each kind per call. Returns the runs ended. Touches: those
        execution rows and their schedules (a ``lost`` run counts as a failure, and may
        pause its schedule by ``pause_on_failure``)."""
        ...

    def retry_now(self) -> int:
        """Bring every ``claimed`` execution backing off from a failed submission forward:
        ``retry_at`` = the store's now where it was later (the leader calls it when a
        submission succeeds after failures: the backend is back). Returns how many. Touches:
        those execution rows' ``retry_at``."""
        ...

    def refused_schedules(self) -> list[tuple[str, str]]:
        """``(name, task)`` of each enabled, unpaused schedule not declared in code that
        :meth:`refuse` took out of scheduling (``last_status`` ``'refused'``, no
        ``next_run_at``), by name: a scheduler that now knows the task schedules it again
        (:meth:`set_enabled` ``True`` recomputes its next run). Read-only."""
        ...

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        """:meth:`record_completion` with outcome ``succeeded`` or ``failed``: the Django
        Tasks signal and the inline submitter report this way."""
        ...

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        """Ask for an extra run of ``name`` now: inserts a ``manual`` execution in status
        ``claimed`` with key :func:`~goatbeat.core.model.manual_key` and notifies; the leader
        submits it through :meth:`pending` (its ``scheduler_id`` and ``fencing_token`` stay
        NULL until the leader claims it: see :meth:`claim_manual_runs`). ``ScheduleNotFound`` if absent; ``DamagedRow`` if
        its row cannot be decoded."""
        ...

    def executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[Execution]:
        """Recent executions, newest ``scheduled_at`` first. Read-only."""
        ...

    # -- operations: heartbeats, misses, health ---------------------------------------------------

    def heartbeat(self, beat: SchedulerBeat) -> None:
        """Record that scheduler ``beat.scheduler_id`` is alive, in one transaction: upsert
        its row (role, lease, fencing token, host, pid, version; ``heartbeat_at`` = the
        store's now, ``expires_at`` = now + ``beat.ttl``; ``started_at`` kept from the first
        beat), then delete every scheduler row that expired more than
        :data:`~goatbeat.core.health.STALE_RETENTION` ago. Schedulers call it at most once
        per lease renewal, and at once when their role changes.
        Touches: the scheduler rows only."""
        ...

    def remove_scheduler(self, scheduler_id: str) -> None:
        """Delete the row of ``scheduler_id`` (a graceful stop). Touches: that row."""
        ...

    def record_misses(self, misses: Sequence[Miss], *, scheduler_id: str) -> None:
        """Keep a record of occurrences dropped by misfire policies (from
        ``ClaimResult.misses``): one row per :class:`~goatbeat.core.model.Miss` with the
        store's now, in one transaction that also deletes the records older than
        :data:`~goatbeat.core.health.MISS_RETENTION`. The schedules' ``missed_count`` is the
        claim's business, not this. Touches: the miss records only."""
        ...

    def status(
        self,
        *,
        lease_name: str = "scheduler",
        window: timedelta = timedelta(hours=1),
        now: datetime | None = None,
    ) -> StatusSnapshot:
        """The system at one instant (:class:`~goatbeat.core.health.StatusSnapshot`): the
        lease ``lease_name`` and every scheduler row (validity and staleness judged by the
        store's clock, always), the due schedules and pending executions whose instant is
        ``<= now`` and the oldest of those instants (with its schedule's name), the misses
        recorded and the executions ``failed`` or ``submit_failed`` whose ``scheduled_at``
        falls within ``window`` before ``now``. ``now`` defaults to the store's clock.
        Cost follows what is due, pending or recent (indexed), never the number of
        schedules. Read-only."""
        ...

    def refusals(self, *, limit: int | None = None, name: str | None = None) -> Refusals:
        """The schedules that stay refused (:func:`~goatbeat.core.health.is_refused`), by
        name: their ``total`` and the first ``limit`` (None: all), each with the reason of its
        latest refused run and since when it is refused (the first refused run after its
        latest run of any other outcome; the row's ``updated_at`` when those runs are gone).
        ``name``: that schedule only (total 0 when it is not refused). One pass over the
        schedule table, then the refused rows' runs by index. Read-only."""
        ...

    def schedule_health(
        self,
        *,
        overdue_after: timedelta,
        limit: int | None = None,
        now: datetime | None = None,
    ) -> list[ScheduleHealth]:
        """The schedules with something to report: a worker-reported success or failure,
        a miss (``missed_count > 0``), or overdue at ``now`` by
        :func:`~goatbeat.core.health.is_overdue` with ``overdue_after``. Overdue ones first,
        then by ``consecutive_failures`` (most first), then by name; at most ``limit``
        (None: all). ``now`` defaults to the store's clock. Read-only."""
        ...

    # -- wake-ups -------------------------------------------------------------------------------

    def notify(self, payload: str) -> None:
        """Send ``payload`` (an identifier, see NOTIFY_CHANNEL) to waiting schedulers."""
        ...

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; return True early when a notification arrived.
        A store receives notifications from its first ``wait`` on (``wait(0)`` starts
        listening without blocking), so stores that never wait never accumulate them.
        Stores without notifications (memory, SQLite across processes) may poll cheaply."""
        ...

    def info(self) -> dict[str, Any]:
        """A short description for logs (kind, database, schema version)."""
        ...


class ShardedStore(ScheduleStore, Protocol):
    """A store that runs more than one shard (:mod:`goatbeat.core.shards`): PostgresStore.
    SQLite and memory serve a single process and keep one shard; a scheduler configured with
    ``shards`` > 1 on them refuses to start, naming the setting.

    ``claim_due`` reads the shard from the lease's name (``scheduler/shard-K-of-N``) and claims
    only schedules of that shard; any other lease name covers every schedule. The three reads
    below take the shard to look at (default: every schedule)."""

    supports_shards: bool

    def next_due_at(self, *, shard: Shard = ALL) -> datetime | None:
        """As :meth:`ScheduleStore.next_due_at`, counting only ``shard``'s schedules."""
        ...

    def pending(
        self, *, limit: int, exclude: Collection[int] = (), shard: Shard = ALL
    ) -> list[Occurrence]:
        """As :meth:`ScheduleStore.pending`, only executions of ``shard``'s schedules."""
        ...

    def next_retry_at(self, *, shard: Shard = ALL) -> datetime | None:
        """As :meth:`ScheduleStore.next_retry_at`, only executions of ``shard``'s schedules."""
        ...

    def read_leases(self, names: Sequence[str]) -> dict[str, tuple[str, int, datetime, bool]]:
        """:meth:`ScheduleStore.read_lease` for several names at once (absent rows left out)."""
        ...

    def live_schedulers(self, within: timedelta, *, shards: int) -> list[str]:
        """Ids of the schedulers running ``shards`` shards (their heartbeat's ``lease`` is
        ``scheduler/...-of-<shards>``) whose heartbeat is younger than ``within`` by the
        store's clock and not expired, sorted. Read-only."""
        ...
