"""The cutover's checks, before anything changes and again after the old beat stopped: which
source is read (:class:`CutoverSource`), the rows the import would leave
(:func:`predicted_rows`), and whether goatbeat would fire what celery beat would
(:func:`check_entries`, as ``diff`` does); the command is :mod:`goatbeat.cli.cutover`."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import click

from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.cli.sources import (
    collect_entries,
    one_line,
)
from goatbeat.core.durations import format_duration
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import Schedule, Source, StoredSchedule
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import iso_z

if TYPE_CHECKING:
    from goatbeat.diff import DiffReport, ScheduleDiff
    from goatbeat.importers.entries import ImportReport, SourceEntry


class CutoverSource(Protocol):
    """Where the schedules come from: read once before the stop (the check) and once after
    (the last runs). Each read is the whole source, as ``import_celery_beat`` reads it."""

    @property
    def sources(self) -> frozenset[Source]:
        """The goatbeat sources its entries land in (the rows the diff compares)."""
        ...

    def read(self, *, stopped: bool = True) -> tuple[list[SourceEntry], list[str]]:
        """(entries, human lines about what was read). Raises ``GoatbeatError`` (one line).
        ``stopped``: whether the old beat is stopped (False for the check before the stop)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ImporterSource:
    """The importers' own sources (:func:`goatbeat.cli.sources.collect_entries`): a Celery
    app's ``beat_schedule`` (with ``last_runs_file``, the dump of stock beat's schedule file),
    django-celery-beat's tables, or, under Django, the project's."""

    from_app: str | None = None
    from_dcb: str | None = None
    last_runs_file: str | None = None
    naive_timezone: str | None = None
    check_tasks: bool = True
    from_redbeat: str | None = None
    redbeat_prefix: str | None = None
    redbeat_timezone: str | None = None

    @property
    def sources(self) -> frozenset[Source]:
        out = set()
        if self.from_app or self.from_redbeat is not None:
            out.add(Source.CELERY)  # redbeat's entries are imported as celery's
        if self.from_dcb is not None:
            out.add(Source.DJANGO_CELERY_BEAT)
        # Under Django without a source option: the project's beat schedule and tables.
        return frozenset(out or (Source.CELERY, Source.DJANGO_CELERY_BEAT))

    def read(self, *, stopped: bool = True) -> tuple[list[SourceEntry], list[str]]:
        """``stopped`` False (the check, the old beat running): a ``last_runs_file`` not
        there yet is no error, the stop command writes it; intervals are then compared on
        goatbeat's grid."""
        last_runs = self.last_runs_file
        pending = not stopped and last_runs is not None and not os.path.exists(last_runs)
        entries, lines = collect_entries(
            from_app=self.from_app,
            from_dcb=self.from_dcb,
            check_tasks=self.check_tasks,
            naive_timezone=self.naive_timezone,
            last_runs_file=None if pending else last_runs,
            from_redbeat=self.from_redbeat,
            redbeat_prefix=self.redbeat_prefix,
            timezone=self.redbeat_timezone,
        )
        if pending:
            lines.append(
                f"--last-runs {last_runs}: not there yet (the stop is to write it): read after "
                "the stop"
            )
            return entries, lines
        if self.last_runs_file is None and any(e.source is Source.CELERY for e in entries):
            lines.append(
                "no --last-runs: beat_schedule intervals are aligned on goatbeat's grid, not "
                "on celery's last runs (docs/migration/celery-beat-schedule.md)"
            )
        return entries, lines


@dataclass(slots=True, kw_only=True)
class Check:
    """What step 2 (or the re-check of step 4) found."""

    report: ImportReport
    diff: DiffReport
    refusals: list[tuple[str, str]] = field(default_factory=list)
    """(name, why): each reason the cutover does not go on."""

    @property
    def ok(self) -> bool:
        return not self.refusals

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "refusals": [{"name": n, "reason": r} for n, r in self.refusals],
            "import": self.report.to_dict(),
            "diff": self.diff.to_dict(),
        }


def held_leases(store: ScheduleStore) -> list[tuple[str, str, datetime]]:
    """(lease name, holder, expires_at) of every lease a live scheduler holds, by the store's
    clock: the single lease and any shard's."""
    snapshot = store.status()
    leases = [snapshot.lease, *snapshot.shard_leases]
    return [(le.name, le.holder, le.expires_at) for le in leases if le is not None and le.valid]


def predicted_rows(
    store: ScheduleStore,
    entries: Sequence[SourceEntry],
    report: ImportReport,
    *,
    overwrite: bool,
    check_task: Callable[[str], None] | None,
) -> list[StoredSchedule]:
    """The rows the import of ``entries`` would leave, written nowhere: the plan of
    :func:`~goatbeat.importers.entries.plan_import`, each row's ``next_run_at`` counted as
    :meth:`ScheduleStore.publish` counts it (from the later of the two last runs), and the
    enabled flag the dry-run ``report`` says the import follows."""
    from goatbeat.importers.entries import plan_import

    stored = {s.name: s for s in store.list_schedules()}
    plan = plan_import(store, entries, overwrite=overwrite, check_task=check_task)
    toggled = dict(report.toggled)
    now = store.now()
    out = dict(stored)
    for sched in plan.create:
        anchor = sched.last_run_at or now
        out[sched.name] = replace(
            sched, next_run_at=sched.first_run_after(anchor) if sched.enabled else None
        )
    for sched in plan.update:
        row = stored.get(sched.name)
        ours = row.last_run_at if isinstance(row, Schedule) else None
        later = max((t for t in (ours, sched.last_run_at) if t is not None), default=None)
        enabled = toggled.get(
            sched.name, row.enabled if isinstance(row, Schedule) else sched.enabled
        )
        out[sched.name] = replace(
            sched,
            enabled=enabled,
            last_run_at=later,
            next_run_at=sched.first_run_after(later or now) if enabled else None,
        )
    for sched in plan.unchanged_schedules:
        row = stored.get(sched.name)
        if sched.name in toggled and isinstance(row, Schedule):
            enabled = toggled[sched.name]
            out[sched.name] = replace(
                row,
                enabled=enabled,
                next_run_at=row.first_run_after(row.last_run_at or now) if enabled else None,
            )
    # Refreshed rows are left as stored: diff compares them as that import leaves them.
    return list(out.values())


def _why(d: ScheduleDiff, *, accept_known: bool) -> str:
    if d.refused is not None:
        return (
            f"the importer refuses it ({d.refused}); accept it with --accept-refused {d.name} "
            "if it stays on celery beat"
        )
    if d.status == "only_old":
        return "celery runs it; goatbeat would have no schedule of that name"
    if d.status == "only_new":
        return "in goatbeat only (not in the sources)"
    if d.status == "damaged":
        return "goatbeat's stored row is damaged: " + "; ".join(d.notes)
    parts = []
    for name, (old, new) in d.fields.items():
        if name == "enabled":
            parts.append(
                f"enabled: celery {old!r} -> goatbeat {new!r} (toggled in goatbeat and kept: "
                f"do not start goatbeat yet; 'goatbeat schedule "
                f"{'enable' if old else 'disable'} {d.name}' follows the source)"
            )
        else:
            parts.append(f"{name}: celery {old!r} -> goatbeat {new!r}")
    shown = [f for f in d.fire_times if not (accept_known and f.known)]
    if d.fire_difference_count and shown:
        first = shown[0]
        side = "celery only" if first.old else "goatbeat only"
        parts.append(
            f"{d.fire_difference_count} fire time(s) differ; first {iso_z(first.at)} {side}: "
            f"{first.reason or ''}".rstrip(": ")
        )
    return "; ".join(parts) or d.status


def check_entries(
    entries: Sequence[SourceEntry],
    sources: frozenset[Source],
    *,
    report: ImportReport,
    refused: Collection[str] | None = None,
    rows: Sequence[StoredSchedule],
    horizon: timedelta,
    accept_known: bool,
    accept_refused: Sequence[str],
) -> Check:
    """The checks of ``diff`` on ``rows`` (the import's result, predicted or written), and of
    the import's ``report``: every reason not to hand over. ``refused``: the names the importer
    refuses among everything imported (default: among ``entries``), whose ``FAILED`` line the
    diff's ``refused`` one stands for."""
    from goatbeat.diff import compute_diff

    now = datetime.now(UTC)
    names = {e.name for e in entries}
    compared = [s for s in rows if s.name in names or s.source in sources]
    diff = compute_diff(
        entries,
        compared,
        start=now.replace(microsecond=0),
        horizon=horizon,
        max_instants=3,
        accept_known=accept_known,
        accept_refused=accept_refused,
        now=now,
    )
    check = Check(report=report, diff=diff)
    if refused is None:
        refused = {e.name for e in entries if e.problem is not None}
    for name, reason in report.failed:
        if name in refused:
            continue  # the diff's refused line says it, and --accept-refused accepts it
        check.refusals.append((name, f"FAILED: {reason}"))
    for name, reason in report.conflicts:
        check.refusals.append((name, f"conflict: {reason}"))
    conflicted = {n for n, _ in report.conflicts}
    for d in diff.schedules:
        if d.name in conflicted or not d.differs(accept_known=accept_known):
            continue
        check.refusals.append((d.name, _why(d, accept_known=accept_known)))
    return check


def changed_entries(
    before: Sequence[SourceEntry], after: Sequence[SourceEntry]
) -> list[SourceEntry]:
    """The entries of ``after`` that differ from ``before`` (a run, a flag, a definition)."""

    def key(e: SourceEntry) -> tuple[Any, ...]:
        return (e.schedule, e.problem, e.enabled, e.last_run_at, e.ran, e.task, e.routing)

    then = {e.name: key(e) for e in before}
    return [e for e in after if then.get(e.name) != key(e)]


def check_planned(
    store: ScheduleStore,
    entries: list[SourceEntry],
    sources: frozenset[Source],
    *,
    overwrite: bool,
    check_task: Callable[[str], None] | None,
    horizon: timedelta,
    accept_known: bool,
    accept_refused: Sequence[str],
) -> Check:
    from goatbeat.importers.entries import import_entries

    try:
        report = import_entries(
            store, entries, dry_run=True, overwrite=overwrite, check_task=check_task
        )
        rows = predicted_rows(store, entries, report, overwrite=overwrite, check_task=check_task)
        return check_entries(
            entries,
            sources,
            report=report,
            rows=rows,
            horizon=horizon,
            accept_known=accept_known,
            accept_refused=accept_refused,
        )
    except StoreError as exc:
        raise OperationalError(f"cannot read the goatbeat database: {exc}") from None
    except GoatbeatError as exc:
        raise UserError(one_line(exc)) from None


def print_check(as_json: bool, check: Check, what: str, horizon: timedelta) -> None:
    if as_json:
        return
    for name, reason in check.refusals:
        click.echo(f"refuse  {name}: {reason}")
    for name in check.diff.accepted_refused:
        click.echo(f"accepted refused  {name}: stays on celery beat (--accept-refused)")
    verdict = "OK" if check.ok else f"REFUSED ({len(check.refusals)})"
    compared = len(check.diff.schedules)
    click.echo(
        f"{what}: {verdict}: {compared} schedule(s) compared with celery over "
        f"{format_duration(horizon)}; import: {check.report.summary()}"
    )
