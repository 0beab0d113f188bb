"""What an importer reads, and how it lands in a goatbeat store.

Each source (a celery ``beat_schedule``, django-celery-beat's tables) yields
:class:`SourceEntry` values: the converted :class:`~goatbeat.core.model.Schedule`, or the reason
it could not be converted, plus notes (a celery bug goatbeat corrects, an option mapped to
something else) and the celery schedule object as celery itself would compute it (for
``goatbeat diff``). :func:`import_entries` publishes them: upsert by name, idempotent, every
failure reported with its name while the rest import, celery's phase kept (the later of its
last run and goatbeat's own), an operator's edit in goatbeat never overwritten silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.errors import GoatbeatError, InvalidValue
from goatbeat.core.model import DEFAULT_MISFIRE_GRACE, DamagedSchedule, Schedule, Source
from goatbeat.core.store import PublishResult, ScheduleStore
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import IntervalTrigger, Trigger
from goatbeat.importers.comparison import BEAT_FIELDS, DCB_FIELDS, differences
from goatbeat.importers.grid import celery_lateness, grid_offset, late_on_grid

__all__ = [
    "ImportPlan",
    "ImportReport",
    "SourceEntry",
    "celery_lateness",
    "celery_misfire_grace",
    "grid_offset",
    "import_entries",
    "late_on_grid",
    "plan_import",
]


def celery_instant(value: Any, field: str, naive_tz: str = "UTC") -> datetime | None:
    """An instant as celery stored it (a datetime or ISO-8601 text, ``Z`` accepted), in UTC;
    a naive one is read in ``naive_tz``. None for no value; InvalidValue naming ``field``."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidValue(field, value, f"{value!r} is not a datetime") from None
    if not isinstance(value, datetime):
        raise InvalidValue(field, value, f"{value!r} is not a datetime")
    if value.tzinfo is None:
        value = value.replace(tzinfo=get_zone(naive_tz))
    result: datetime = value.astimezone(UTC)
    return result


def celery_misfire_grace(trigger: Trigger) -> timedelta:
    """The misfire grace that keeps celery's catch-up: after an outage celery beat runs an
    entry ONCE. goatbeat runs every occurrence still within the grace, so an interval shorter
    than the default grace (60 s) gets half its period: at most one on-time occurrence."""
    if isinstance(trigger, IntervalTrigger) and trigger.every < 2 * DEFAULT_MISFIRE_GRACE:
        return trigger.every / 2
    return DEFAULT_MISFIRE_GRACE


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceEntry:
    """One schedule as a source declares it."""

    name: str
    source: Source
    schedule: Schedule | None = None
    """The converted schedule; ``None`` when it could not be converted (see ``problem``)."""
    problem: str | None = None
    """Why the entry cannot be imported."""
    notes: tuple[str, ...] = ()
    """Imported, but worth knowing: a celery bug goatbeat corrects, a mapped option..."""
    celery_schedule: Any = None
    """The celery schedule object celery itself would use; ``None`` when celery would not
    schedule the entry at all (django-celery-beat drops rows it cannot load)."""
    celery_tz: str = "UTC"
    """The zone celery evaluates ``celery_schedule`` in."""
    last_run_at: datetime | None = None
    """celery's last run (django-celery-beat's column; unknown for beat_schedule entries)."""
    ran: bool = True
    """Whether ``last_run_at`` is a run: False for a django-celery-beat row that never ran,
    whose ``last_run_at`` is the row's last change (``date_changed``), where it counts from."""
    enabled: bool = True
    task: str | None = None
    args: Any = None
    kwargs: Any = None
    routing: dict[str, Any] = field(default_factory=dict)
    bugs: tuple[str, ...] = ()
    """Keys of :data:`goatbeat.compat.CELERY_BUGS` that apply to this entry."""

    @property
    def ok(self) -> bool:
        return self.schedule is not None


@dataclass(slots=True, kw_only=True)
class ImportReport:
    """What an import did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    """The definition changed in the source (its next run follows the later last run)."""
    refreshed: list[str] = field(default_factory=list)
    """Unchanged definitions that celery ran since the last import: phase moved forward."""
    changed_unrun: list[str] = field(default_factory=list)
    """Those of ``refreshed`` that never ran in the source: it changed the row since the last
    import (``date_changed``), which the phase counts from. Celery did not run them."""
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """Rows edited in goatbeat since the last import, whose source changed: kept as edited."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    toggled: list[tuple[str, bool]] = field(default_factory=list)
    """(name, enabled): the source enabled or disabled it since the last import, and goatbeat
    follows (nobody toggled it in goatbeat since). Also counted where it falls (updated...)."""

    @property
    def total(self) -> int:
        return (
            len(self.created)
            + len(self.updated)
            + len(self.refreshed)
            + len(self.unchanged)
            + len(self.conflicts)
            + len(self.failed)
        )

    @property
    def ok(self) -> bool:
        """Everything the sources declare is in goatbeat as declared."""
        return not self.failed and not self.conflicts

    def summary(self) -> str:
        would = "would " if self.dry_run else ""
        parts = [
            f"{len(self.created)} {'would create' if self.dry_run else 'created'}",
            f"{len(self.updated)} {would}{'update' if self.dry_run else 'updated'}",
            f"{len(self.refreshed)} {would}{'refresh' if self.dry_run else 'refreshed'}",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.conflicts)} conflict(s)",
            f"{len(self.failed)} failed",
        ]
        text = ", ".join(parts)
        if self.toggled:
            flips = f"{len(self.toggled)} {'would follow' if self.dry_run else 'followed'}"
            text += f", {flips} the source's enabled flag"
        if self.notes:
            text += f", {len(self.notes)} note(s)"
        return text + (" (dry run: nothing written)" if self.dry_run else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "created": self.created,
            "updated": self.updated,
            "refreshed": self.refreshed,
            "unchanged": self.unchanged,
            "conflicts": [{"name": n, "reason": r} for n, r in self.conflicts],
            "failed": [{"name": n, "reason": r} for n, r in self.failed],
            "notes": [{"name": n, "note": r} for n, r in self.notes],
            "toggled": [{"name": n, "enabled": e} for n, e in self.toggled],
            "changed_unrun": self.changed_unrun,
        }


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What importing the entries changes, decided without writing (:func:`plan_import`)."""

    create: list[Schedule]
    update: list[Schedule]
    refresh: list[Schedule]
    unchanged: list[str]
    conflicts: list[tuple[str, str]]
    failed: list[tuple[str, str]]
    unchanged_schedules: list[Schedule] = field(default_factory=list)
    """The schedules of ``unchanged``: an import still publishes them, so that the store
    records the source's enabled flag, and follows it when the source changed it."""
    stored_enabled: dict[str, bool] = field(default_factory=dict)
    """The ``enabled`` flag of each existing row, before the import."""
    exported_back: list[str] = field(default_factory=list)
    """Schedules made in goatbeat that ``goatbeat export`` wrote to the source, which still
    says the same: left as they are (goatbeat's own, source admin)."""


EDITED = (
    "edited in goatbeat since it was imported, and the source says otherwise: kept as edited "
    "(re-run with --overwrite to replace the edit with the source's definition, or change the "
    "source to match)"
)


def plan_import(
    store: ScheduleStore,
    entries: Sequence[SourceEntry],
    *,
    overwrite: bool = False,
    check_task: Callable[[str], None] | None = None,
) -> ImportPlan:
    """Decide, without writing, what importing ``entries`` changes in ``store``.

    Like :meth:`ScheduleStore.publish` with ``follow_last_run``: a changed definition is
    updated, the same definition that celery ran since is refreshed (the later last run
    wins: goatbeat's own runs are never repeated, celery's are not either). A row an operator
    edited in goatbeat since the last import (:meth:`ScheduleStore.edited_since_publish`) is
    a conflict when the source differs from it, unless ``overwrite``. ``check_task`` (the
    app's allow-list, ``Beat.check_task``) fails an entry whose task a schedule stored
    outside code may not name."""
    existing = {s.name: s for s in store.list_schedules()}
    edited = store.edited_since_publish(
        [e.name for e in entries if e.schedule is not None and e.name in existing]
    )
    plan = ImportPlan([], [], [], [], [], [])
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            plan.failed.append((entry.name, "the name appears twice in the sources"))
            continue
        seen.add(entry.name)
        if entry.schedule is None:
            reason = entry.problem or "could not be converted"
            row = existing.get(entry.name)
            if isinstance(row, Schedule) and row.source == entry.source and row.enabled:
                reason += (
                    f"; the schedule imported earlier under this name is left as it was "
                    f"({row.trigger.describe()}) and still runs: disable it (goatbeat schedule "
                    f"disable {entry.name}) unless that is what you want"
                )
            plan.failed.append((entry.name, reason))
            continue
        if check_task is not None:
            try:
                check_task(entry.schedule.task)
            except InvalidValue as exc:
                plan.failed.append((entry.name, str(exc)))
                continue
        row = existing.get(entry.name)
        sched = _same_grid(entry.schedule, row if isinstance(row, Schedule) else None)
        if row is None:
            plan.create.append(sched)
        elif row.source != sched.source:
            if isinstance(row, Schedule) and _exported_back(row, sched, store.now()):
                # Made in goatbeat and exported back (goatbeat export), and the source still
                # says what goatbeat has: the same schedule, goatbeat's own.
                plan.exported_back.append(sched.name)
                continue
            plan.failed.append(
                (
                    sched.name,
                    f"a goatbeat schedule of that name already exists with source "
                    f"{str(row.source)!r}; rename one of them",
                )
            )
        elif isinstance(row, DamagedSchedule):
            plan.update.append(sched)  # a damaged row is repaired by writing the import over it
        elif row.definition() != sched.definition():
            if sched.name in edited and not overwrite:
                plan.conflicts.append((sched.name, EDITED))
            else:
                plan.update.append(sched)
        elif _ran_since(row, sched):
            plan.refresh.append(sched)
        else:
            plan.unchanged.append(sched.name)
            plan.unchanged_schedules.append(sched)
        if isinstance(row, Schedule):
            plan.stored_enabled[sched.name] = row.enabled
    return plan


def _exported_back(row: Schedule, incoming: Schedule, now: datetime) -> bool:
    """A schedule made in goatbeat (source admin) that ``goatbeat export`` wrote to the
    source, which still says the same (:func:`goatbeat.importers.comparison.differences`)."""
    if row.source is not Source.ADMIN:
        return False
    dcb = incoming.source is Source.DJANGO_CELERY_BEAT
    fields = DCB_FIELDS if dcb else BEAT_FIELDS
    return not differences(row, incoming, now=now, fields=fields, dcb=dcb)


def _same_grid(incoming: Schedule, row: Schedule | None) -> Schedule:
    """``incoming`` with the stored interval trigger when both lie on the same grid (same
    period, the incoming anchor on the stored grid, or celery's run of one of its instants,
    late: :func:`late_on_grid`): a later last run on goatbeat's own grid (goatbeat's runs
    handed back, celery running on from them) is no new definition, and the phase goatbeat
    had is kept rather than moved by celery's lateness."""
    new, old = incoming.trigger, None if row is None else row.trigger
    if (
        isinstance(new, IntervalTrigger)
        and isinstance(old, IntervalTrigger)
        and new.every == old.every
        and new.anchor is not None
        and old.anchor is not None
        and old.anchor <= new.anchor  # an interval never fires before its anchor
        and late_on_grid(new.anchor, new.every, old.anchor)
    ):
        return replace(incoming, trigger=old)
    return incoming


def _ran_since(row: Schedule, incoming: Schedule) -> bool:
    # celery ran it after the last run goatbeat knows of (its own or the last import's).
    if incoming.last_run_at is None:
        return False
    return row.last_run_at is None or incoming.last_run_at > row.last_run_at


def import_entries(
    store: ScheduleStore,
    entries: Sequence[SourceEntry],
    *,
    dry_run: bool = False,
    overwrite: bool = False,
    chunk_size: int = 500,
    progress: Callable[[int], None] | None = None,
    check_task: Callable[[str], None] | None = None,
) -> ImportReport:
    """Publish the convertible ``entries`` into ``store``; report everything else.

    Upsert by name (:meth:`ScheduleStore.publish` with ``follow_last_run``): re-running with
    the same sources changes nothing; the later of celery's and goatbeat's last runs sets the
    phase, so nothing runs twice and nothing owed is dropped. The source's ``enabled`` flag is
    followed when it changed since the last import and nobody toggled the row in goatbeat
    (``toggled``); otherwise an operator's toggle survives (with a note when the source says
    otherwise). An operator's edit of the definition is reported as a conflict and kept, unless
    ``overwrite``. Each entry is written whole or not at all, and a failing entry never undoes
    the others. ``dry_run`` reads the store and writes nothing. ``progress(n)`` is called as
    ``n`` more entries are done. ``check_task``: see :func:`plan_import` (an entry outside
    the allow-list fails)."""
    report = ImportReport(dry_run=dry_run)
    for entry in entries:
        for note in entry.notes:
            report.notes.append((entry.name, note))
    plan = plan_import(store, entries, overwrite=overwrite, check_task=check_task)
    report.failed.extend(plan.failed)
    report.conflicts.extend(plan.conflicts)
    report.unchanged.extend(plan.exported_back)
    for name in plan.exported_back:
        report.notes.append(
            (
                name,
                "made in goatbeat and exported back (goatbeat export); the source still says "
                "the same: kept as goatbeat's own schedule",
            )
        )
    settled = len(plan.failed) + len(plan.conflicts) + len(plan.exported_back)
    if progress is not None and settled:
        progress(settled)
    results: list[PublishResult] = []
    if dry_run:
        report.created.extend(s.name for s in plan.create)
        report.updated.extend(s.name for s in plan.update)
        report.refreshed.extend(s.name for s in plan.refresh)
        if progress is not None:
            progress(len(plan.create) + len(plan.update) + len(plan.refresh) + len(plan.unchanged))
        # Unchanged definitions may still follow the source's enabled flag: ask the store.
        results = _publish(store, plan.unchanged_schedules, report, chunk_size, progress, True)
        for result in results:
            report.updated.extend(result.updated)
            report.unchanged.extend(result.unchanged)
    else:
        todo = [*plan.create, *plan.update, *plan.refresh, *plan.unchanged_schedules]
        results = _publish(store, todo, report, chunk_size, progress, False)
        for result in results:
            report.created.extend(result.created)
            report.updated.extend(result.updated)
            report.refreshed.extend(result.refreshed)
            report.unchanged.extend(result.unchanged)
    toggled: dict[str, bool] = {}
    for result in results:
        for name, changes in result.changes.items():
            for change in changes:
                if change.field == "enabled":
                    toggled[name] = bool(change.new)
    report.toggled.extend(sorted(toggled.items()))
    unrun = {e.name for e in entries if not e.ran}
    report.changed_unrun.extend(n for n in report.refreshed if n in unrun)
    for entry in entries:
        if entry.schedule is None or entry.name not in plan.stored_enabled:
            continue
        if any(n == entry.name for n, _ in plan.conflicts):
            continue
        now = toggled.get(entry.name, plan.stored_enabled[entry.name])
        if now != entry.schedule.enabled:
            ours, theirs = _flag(now), _flag(entry.schedule.enabled)
            report.notes.append(
                (
                    entry.name,
                    f"{ours} in goatbeat, {theirs} in the source: kept as goatbeat has it (it "
                    "was toggled in goatbeat while the source kept its flag, or imported before "
                    "goatbeat recorded the source's flag); to follow the source: goatbeat "
                    f"schedule {'enable' if entry.schedule.enabled else 'disable'} {entry.name}",
                )
            )
    return report


def _flag(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def _publish(
    store: ScheduleStore,
    schedules: list[Schedule],
    report: ImportReport,
    chunk_size: int,
    progress: Callable[[int], None] | None,
    dry_run: bool,
) -> list[PublishResult]:
    """Publish ``schedules`` by source and in chunks, following celery's last runs; an entry
    the store refuses fails alone (in ``report.failed``)."""
    by_source: dict[Source, list[Schedule]] = {}
    for sched in schedules:
        by_source.setdefault(sched.source, []).append(sched)
    results: list[PublishResult] = []
    for source, listed in by_source.items():
        for chunk in _chunks(listed, chunk_size):
            try:
                results.append(
                    store.publish(chunk, source=source, follow_last_run=True, dry_run=dry_run)
                )
            except GoatbeatError:
                # One bad schedule fails its chunk's transaction: retry one by one so the
                # others still import and the culprit is named.
                for sched in chunk:
                    try:
                        results.append(
                            store.publish(
                                [sched], source=source, follow_last_run=True, dry_run=dry_run
                            )
                        )
                    except GoatbeatError as one_exc:
                        report.failed.append((sched.name, str(one_exc)))
            if progress is not None and not dry_run:
                progress(len(chunk))
    return results


def _chunks(items: list[Schedule], size: int) -> Iterable[list[Schedule]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
