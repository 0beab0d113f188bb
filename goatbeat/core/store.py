"""The ScheduleStore contract: where schedules, executions and the lease live.

Three implementations pass one conformance suite (``tests/conformance/``): ``MemoryStore``
(tests, single process), ``SQLiteStore`` (the embedded default; several processes on one host)
and ``PostgresStore`` (production; many hosts). Each method's docstring says which rows it may
touch; an implementation that touches others is wrong.

Clocks. Lease expiry is always judged by the *store's* clock (PostgreSQL's ``now()``), never by
the caller's. Due-ness (``next_run_at <= now``) uses the store's clock too unless the caller
passes ``now`` explicitly (tests, replay tools).

Errors. Validation happens before anything is written: a bad schedule raises an
``InvalidValue`` subclass and the store is unchanged. Lost connections raise ``StoreError``;
the next call may reconnect.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from goatbeat.core.model import (
    ClaimResult,
    Execution,
    ExecutionStatus,
    LeaseGrant,
    Occurrence,
    Schedule,
    Source,
    SubmitOutcome,
)

__all__ = ["ScheduleStore", "PublishResult", "NOTIFY_CHANNEL", "SCHEMA_VERSION"]

NOTIFY_CHANNEL = "goatbeat"
"""The one LISTEN/NOTIFY channel. Payloads carry identifiers only: ``schedule:<id>``,
``run:<id>``, ``lease:<name>``; receivers validate them and treat anything else as a plain wake-up."""

SCHEMA_VERSION = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # definition changed: next_run_at recomputed
    unchanged: list[str] = field(default_factory=list)


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
        self, schedules: Sequence[Schedule], *, source: Source = Source.CODE
    ) -> PublishResult:
        """Upsert declared schedules by name, all in one transaction.

        - New name: inserted with ``next_run_at = schedule.first_run_after(anchor)`` where anchor
          is ``schedule.last_run_at`` when given (importers carry celery's last run so the first
          goatbeat run is the one celery would have made next) else the store's now.
        - Existing row of the same ``source`` whose ``definition()`` differs: definition replaced,
          ``next_run_at`` recomputed from the store's now, ``version`` bumped.
        - Same definition: untouched (no version bump, no write).
        - The row's ``enabled`` flag is NEVER changed by publish (an operator's toggle survives
          redeploys); a new row takes ``schedule.enabled``.
        - A name that exists with another source raises ``InvalidSchedule`` (field ``name``)
          and nothing is written.
        Touches: schedule rows named in ``schedules``. Notifies the channel when anything changed.
        """
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

        ``next_run_at`` is recomputed from now when the definition changed or the schedule was
        re-enabled. With ``expected_version``, a row whose version differs raises
        ``ConflictError`` and nothing is written. Bumps ``version``. ``ScheduleNotFound`` if absent.
        Touches: that row."""
        ...

    def set_enabled(self, name: str, enabled: bool) -> Schedule:
        """Enable or disable one schedule (allowed for every source, code included). Enabling
        recomputes ``next_run_at`` from now; disabling clears it. Bumps version. Notifies."""
        ...

    def delete(self, name: str) -> None:
        """Delete a schedule; its executions stay as history (schedule id set to NULL), and
        those still ``claimed`` (never submitted) become ``submit_failed`` with the reason,
        since nothing can submit them any more. ``ScheduleNotFound`` if absent."""
        ...

    def get(self, name: str) -> Schedule:
        """One schedule by name; ``ScheduleNotFound`` if absent."""
        ...

    def list_schedules(self, *, source: Source | None = None) -> list[Schedule]:
        """Every schedule (optionally of one source), ordered by name."""
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
        """The earliest ``next_run_at`` of an enabled schedule (uses the index). Read-only."""
        ...

    def claim_due(
        self,
        lease: LeaseGrant,
        *,
        scheduler_id: str,
        limit: int,
        now: datetime | None = None,
    ) -> ClaimResult:
        """Claim up to ``limit`` due schedules in ONE transaction.

        1. Check the lease row: holder and token equal ``lease``'s and unexpired by the store's
           clock, row-locked (``FOR SHARE``). Otherwise return ``ClaimResult(refused=True)``
           having written nothing.
        2. Read enabled schedules with ``next_run_at <= now`` ordered by ``next_run_at``,
           at most ``limit``; plan each with :func:`goatbeat.core.misfire.plan`.
        3. Advance each with compare-and-set: ``next_run_at``, ``last_run_at`` (latest planned
           instant), ``last_status='claimed'``, ``total_run_count``, ``missed_count``,
           ``version+1`` WHERE ``version`` = the version read. A row changed meanwhile is
           skipped (counted in ``conflicts``): the concurrent edit wins. ``one_off`` schedules
           are disabled after their claim.
        4. Insert one execution per planned instant for the rows advanced: status ``claimed``,
           key :func:`~goatbeat.core.model.idempotency_key`, the fencing token, scheduler id,
           ``ON CONFLICT (idempotency_key) DO NOTHING``. Only inserted rows become occurrences.
        Touches: due schedule rows, new execution rows."""
        ...

    def pending(self, *, limit: int, exclude: Collection[int] = ()) -> list[Occurrence]:
        """Executions in status ``claimed`` (left by a crash between claim and bookkeeping, or
        manual run requests), oldest first, as occurrences to (re)submit, leaving out rows
        backing off from a failed submission (``retry_at`` later than the store's now) and the
        execution ids in ``exclude``. Each occurrence carries its schedule's ``misfire_grace``.
        Read-only."""
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
        the batch (``'missed'`` for a missed one). Only rows still ``claimed`` change.
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

    def record_finished(
        self, idempotency_key: str, *, succeeded: bool, error: str | None = None
    ) -> bool:
        """The backend reported completion (Django Tasks signal, inline submitter): status
        ``succeeded`` or ``failed``, ``finished_at``. Returns whether a row matched."""
        ...

    def request_run(self, name: str, *, now: datetime | None = None) -> Execution:
        """Ask for an extra run of ``name`` now: inserts a ``manual`` execution in status
        ``claimed`` with key :func:`~goatbeat.core.model.manual_key` and notifies; the leader
        submits it through :meth:`pending`. ``ScheduleNotFound`` if absent."""
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
