"""What an importer reads, and how it lands in a goatbeat store.

Each source (a celery ``beat_schedule``, django-celery-beat's tables) yields
:class:`SourceEntry` values: the converted :class:`~goatbeat.core.model.Schedule`, or the reason
it could not be converted, plus notes (a celery bug goatbeat corrects, an option mapped to
something else) and the celery schedule object as celery itself would compute it (for
``goatbeat diff``). :func:`import_entries` publishes them: upsert by name, idempotent, every
failure reported with its name while the rest import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from goatbeat.core.errors import GoatbeatError, InvalidValue
from goatbeat.core.model import DEFAULT_MISFIRE_GRACE, Schedule, Source
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import get_zone
from goatbeat.core.triggers import IntervalTrigger, Trigger

__all__ = ["SourceEntry", "ImportReport", "import_entries", "plan_import", "celery_misfire_grace"]


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
    refreshed: list[str] = field(default_factory=list)
    """Unchanged definitions whose never-run row got celery's newer last run."""
    unchanged: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (
            len(self.created)
            + len(self.updated)
            + len(self.refreshed)
            + len(self.unchanged)
            + len(self.failed)
        )

    def summary(self) -> str:
        verb = "would create" if self.dry_run else "created"
        parts = [
            f"{len(self.created)} {verb}",
            f"{len(self.updated)} {'would update' if self.dry_run else 'updated'}",
            f"{len(self.refreshed)} {'would refresh' if self.dry_run else 'refreshed'}",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.failed)} failed",
        ]
        text = ", ".join(parts)
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
            "failed": [{"name": n, "reason": r} for n, r in self.failed],
            "notes": [{"name": n, "note": r} for n, r in self.notes],
        }


@dataclass(frozen=True, slots=True)
class _Plan:
    create: list[Schedule]
    update: list[Schedule]
    refresh: list[Schedule]
    unchanged: list[str]
    failed: list[tuple[str, str]]


def plan_import(
    store: ScheduleStore,
    entries: Sequence[SourceEntry],
    *,
    check_task: Callable[[str], None] | None = None,
) -> _Plan:
    """Decide, without writing, what importing ``entries`` changes in ``store``.
    ``check_task`` (the app's allow-list, ``Beat.check_task``) fails an entry whose task a
    schedule stored outside code may not name."""
    existing = {s.name: s for s in store.list_schedules()}
    create: list[Schedule] = []
    update: list[Schedule] = []
    refresh: list[Schedule] = []
    unchanged: list[str] = []
    failed: list[tuple[str, str]] = []
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            failed.append((entry.name, "the name appears twice in the sources"))
            continue
        seen.add(entry.name)
        if entry.schedule is None:
            failed.append((entry.name, entry.problem or "could not be converted"))
            continue
        sched = entry.schedule
        if check_task is not None:
            try:
                check_task(sched.task)
            except InvalidValue as exc:
                failed.append((sched.name, str(exc)))
                continue
        row = existing.get(sched.name)
        if row is None:
            create.append(sched)
        elif row.source != sched.source:
            failed.append(
                (
                    sched.name,
                    f"a goatbeat schedule of that name already exists with source "
                    f"{row.source.value!r}; rename one of them",
                )
            )
        elif row.definition() != sched.definition():
            update.append(sched)
        elif _needs_refresh(row, sched):
            refresh.append(sched)
        else:
            unchanged.append(sched.name)
    return _Plan(create, update, refresh, unchanged, failed)


def _needs_refresh(row: Schedule, incoming: Schedule) -> bool:
    # A row imported earlier (a rehearsal) that goatbeat never ran still carries the last run
    # celery had then; celery has run since, so its next run is stale and would fire twice.
    if row.last_status is not None or row.total_run_count > incoming.total_run_count:
        return False
    if incoming.last_run_at is None:
        return False
    return row.last_run_at is None or row.last_run_at < incoming.last_run_at


def import_entries(
    store: ScheduleStore,
    entries: Sequence[SourceEntry],
    *,
    dry_run: bool = False,
    chunk_size: int = 500,
    progress: Callable[[int], None] | None = None,
    check_task: Callable[[str], None] | None = None,
) -> ImportReport:
    """Publish the convertible ``entries`` into ``store``; report everything else.

    Upsert by name (:meth:`ScheduleStore.publish`): re-running with the same sources changes
    nothing. An operator's ``enabled`` toggle on an existing row survives. ``dry_run`` reads
    the store and writes nothing. ``progress(n)`` is called as ``n`` more entries are done.
    ``check_task``: see :func:`plan_import` (an entry outside the allow-list fails)."""
    report = ImportReport(dry_run=dry_run)
    for entry in entries:
        for note in entry.notes:
            report.notes.append((entry.name, note))
    plan = plan_import(store, entries, check_task=check_task)
    report.failed.extend(plan.failed)
    report.unchanged.extend(plan.unchanged)
    if progress is not None and (plan.failed or plan.unchanged):
        progress(len(plan.failed) + len(plan.unchanged))
    if dry_run:
        report.created.extend(s.name for s in plan.create)
        report.updated.extend(s.name for s in plan.update)
        report.refreshed.extend(s.name for s in plan.refresh)
        if progress is not None:
            progress(len(plan.create) + len(plan.update) + len(plan.refresh))
        return report
    for sched in plan.refresh:
        # Only rows goatbeat never ran get here: no execution history is lost.
        store.delete(sched.name)
    by_source: dict[Source, list[Schedule]] = {}
    for sched in [*plan.create, *plan.update, *plan.refresh]:
        by_source.setdefault(sched.source, []).append(sched)
    refreshed = {s.name for s in plan.refresh}
    for source, schedules in by_source.items():
        for chunk in _chunks(schedules, chunk_size):
            try:
                result = store.publish(chunk, source=source)
            except (InvalidValue, GoatbeatError) as exc:
                # One bad schedule fails its chunk's transaction: retry one by one so the
                # others still import and the culprit is named.
                result = None
                for sched in chunk:
                    try:
                        one = store.publish([sched], source=source)
                    except GoatbeatError as one_exc:
                        report.failed.append((sched.name, str(one_exc)))
                        continue
                    _record(report, one.created, one.updated, one.unchanged, refreshed)
                del exc
            if result is not None:
                _record(report, result.created, result.updated, result.unchanged, refreshed)
            if progress is not None:
                progress(len(chunk))
    return report


def _record(
    report: ImportReport,
    created: Iterable[str],
    updated: Iterable[str],
    unchanged: Iterable[str],
    refreshed: set[str],
) -> None:
    for name in created:
        (report.refreshed if name in refreshed else report.created).append(name)
    report.updated.extend(updated)
    report.unchanged.extend(unchanged)


def _chunks(items: list[Schedule], size: int) -> Iterable[list[Schedule]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
