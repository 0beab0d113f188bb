"""``goatbeat export``: goatbeat's schedules back to celery beat, for a rollback after edits.

::

    goatbeat [--database URL] export --to beat-schedule [--output FILE] [--last-runs FILE]
        [--timezone ZONE | --from-app MODULE:APP] [--source S]... [--skip-unexportable]
    goatbeat [--database URL] export --to django-celery-beat [--target URL] [--apply]
        [--naive-timezone ZONE] [--source S]... [--skip-unexportable]

``beat-schedule`` writes a Python module holding ``beat_schedule = {...}`` (stdout, or
``--output``; the report then goes to stderr), and with ``--last-runs`` each entry's last run
as JSON for stock beat's ``celerybeat-schedule`` (intervals keep goatbeat's phase through it).
``django-celery-beat`` writes the rows (dry run unless ``--apply``) and moves
``django_celery_beat_periodictasks.last_update`` so a DatabaseScheduler reloads them.

A schedule that cannot come back as itself is a ``FAILED  NAME: FIELD: why`` line and nothing
is written (exit 1), unless ``--skip-unexportable``: then it is listed as ``skipped`` and the
rest are written. The planning is :mod:`goatbeat.importers.export`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import Schedule, Source
from goatbeat.core.timeutil import get_zone, iso_z
from goatbeat.core.triggers import CeleryCrontabTrigger
from goatbeat.stores import redact_url

__all__ = ["dst_notes", "export"]

_SOURCES = [s.value for s in Source]


@click.command("export")
@click.option(
    "--to",
    "to",
    type=click.Choice(["beat-schedule", "django-celery-beat"]),
    required=True,
    help="beat_schedule Python code, or django-celery-beat's rows.",
)
@click.option("--database", default=None, help="The goatbeat database to read.")
@click.option(
    "--output",
    metavar="FILE",
    default=None,
    help="beat-schedule: write the code here (default: stdout).",
)
@click.option(
    "--last-runs",
    "last_runs_file",
    metavar="FILE",
    default=None,
    help="beat-schedule: also write {name: ISO instant} for celerybeat-schedule (the "
    "interval phase; see docs/migration).",
)
@click.option(
    "--timezone",
    "zone",
    default=None,
    help="beat-schedule: the Celery app's timezone (default: --from-app's, the Django "
    "project's Celery app's, else UTC).",
)
@click.option("--from-app", "from_app", metavar="MODULE:APP", help="The Celery app (its zone).")
@click.option(
    "--target",
    metavar="URL",
    default=None,
    help="django-celery-beat: a postgresql:// or sqlite:/// URL (default: Django's default "
    "database).",
)
@click.option("--apply", is_flag=True, help="django-celery-beat: write (default: dry run).")
@click.option(
    "--naive-timezone",
    default=None,
    help="Zone of naive datetimes in the tables (default UTC; Django: UTC when USE_TZ).",
)
@click.option(
    "--source",
    "sources",
    type=click.Choice(_SOURCES),
    multiple=True,
    help="Export the schedules of this source (repeatable; default: admin, and celery or "
    "django_celery_beat after --to).",
)
@click.option(
    "--skip-unexportable",
    is_flag=True,
    help="Write the others when some cannot be exported (each listed as skipped).",
)
@click.pass_context
def export(
    ctx: click.Context,
    to: str,
    database: str | None,
    output: str | None,
    last_runs_file: str | None,
    zone: str | None,
    from_app: str | None,
    target: str | None,
    apply: bool,
    naive_timezone: str | None,
    sources: tuple[str, ...],
    skip_unexportable: bool,
) -> None:
    """Export goatbeat's schedules back to celery beat (a rollback after edits)."""
    from goatbeat.cli.sources import open_target_store
    from goatbeat.importers import export as plan

    if to == "beat-schedule" and (target or apply):
        raise UserError("--target and --apply are for --to django-celery-beat")
    if to == "django-celery-beat" and (output or last_runs_file or zone or from_app):
        raise UserError(
            "--output, --last-runs, --timezone and --from-app are for --to beat-schedule"
        )
    wanted = (
        {Source(s) for s in sources}
        if sources
        else (plan.BEAT_SOURCES if to == "beat-schedule" else plan.DCB_SOURCES)
    )
    now = datetime.now(UTC)
    with open_target_store(ctx, database) as store_target:
        origin = store_target.label
        try:
            schedules = [s for s in store_target.store.list_schedules() if s.source in wanted]
        except StoreError as exc:
            raise OperationalError(f"cannot read the goatbeat database {origin}: {exc}") from None
    if to == "beat-schedule":
        _beat_schedule(schedules, origin, output, last_runs_file, zone, from_app, now, ctx,
                       skip_unexportable)  # fmt: skip
    else:
        _django_celery_beat(schedules, origin, target, apply, naive_timezone, now, ctx,
                            skip_unexportable)  # fmt: skip


_DST_SEARCH = timedelta(days=366)
_DST_WINDOW = timedelta(hours=3)


def _transitions(zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants (to the minute) ``zone_name`` changes its UTC offset in ``[start, end)``."""
    zone = get_zone(zone_name)
    out: list[datetime] = []
    step = timedelta(hours=6)
    t, before = start, start.astimezone(zone).utcoffset()
    while t < end:
        after = (t + step).astimezone(zone).utcoffset()
        if after != before:
            lo, hi = t, t + step
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == before:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            before = after
        t += step
    return out


def dst_notes(pairs: Iterable[tuple[Schedule, Any]], now: datetime) -> list[tuple[str, str]]:
    """For each exported crontab, where celery's own crontab (the exported one, as the
    importer reads it back) fires otherwise than goatbeat at a DST change in the coming year:
    celery's DST handling (CELERY_BUGS dst_gap, dst_repeat), which no crontab can change. Said,
    not refused: it is the known difference an import accepts the other way round."""
    from goatbeat.conversion import CELERY_BUGS
    from goatbeat.diff import celery_fire_times, goatbeat_fire_times

    notes: list[tuple[str, str]] = []
    for sched, entry in pairs:
        if not isinstance(sched.trigger, (CronTrigger, CeleryCrontabTrigger)) or entry is None:
            continue
        for change in _transitions(sched.timezone, now, now + _DST_SEARCH):
            lo, hi = change - _DST_WINDOW, change + _DST_WINDOW
            ours = set(goatbeat_fire_times(sched, lo, hi, at_once=False))
            theirs = set(celery_fire_times(entry, lo, hi, at_once=False))
            if ours == theirs:
                continue
            only_celery = ", ".join(iso_z(t) for t in sorted(theirs - ours)[:3]) or "none"
            only_ours = ", ".join(iso_z(t) for t in sorted(ours - theirs)[:3]) or "none"
            day = change.astimezone(get_zone(sched.timezone)).date().isoformat()
            bug = "dst_gap" if _gap(sched.timezone, change) else "dst_repeat"
            notes.append(
                (
                    sched.name,
                    f"at the DST change of {day} in {sched.timezone}, celery fires at "
                    f"{only_celery} where goatbeat fires at {only_ours}: celery's own DST "
                    f"handling ({CELERY_BUGS[bug]})",
                )
            )
    return notes


def _gap(zone_name: str, change: datetime) -> bool:
    zone = get_zone(zone_name)
    before = (change - timedelta(hours=1)).astimezone(zone).utcoffset()
    after = (change + timedelta(hours=1)).astimezone(zone).utcoffset()
    return before is not None and after is not None and after > before


def _report_refused(refused: list[Any], skip: bool, echo: Any) -> None:
    for r in refused:
        echo(f"{'skipped' if skip else 'FAILED'}  {r.line()}")


def _beat_schedule(
    schedules: list[Any],
    origin: str,
    output: str | None,
    last_runs_file: str | None,
    zone: str | None,
    from_app: str | None,
    now: datetime,
    ctx: click.Context,
    skip: bool,
) -> None:
    from goatbeat.importers import export as plan_mod

    def echo(line: str) -> None:
        click.echo(line, err=output is None)

    if zone is None:
        from goatbeat.django import beat_sources
        from goatbeat.importers import celery_beat

        try:
            if from_app:
                zone = celery_beat.app_timezone(celery_beat.load_app(from_app))
            elif beat_sources.in_django_project():
                app = beat_sources.project_celery_app()  # the project's (CELERY_TIMEZONE)
                zone = None if app is None else celery_beat.app_timezone(app)
        except GoatbeatError as exc:
            raise UserError(" ".join(str(exc).split())) from None
    try:
        plan = plan_mod.plan_beat_schedule(schedules, timezone=zone or "UTC", now=now)
    except GoatbeatError as exc:
        raise UserError(" ".join(str(exc).split())) from None
    echo(f"from: {origin}")
    echo(f"to: beat_schedule code ({output or 'stdout'}), the app's timezone {plan.timezone!r}")
    for entry in plan.entries:
        echo(f"{'comment' if entry.disabled else 'export '}  {entry.name}")
    by_name = {s.name: s for s in schedules if isinstance(s, Schedule)}
    dst = dst_notes(((by_name[e.name], e.read_back) for e in plan.entries if not e.disabled), now)
    for name, note in [*plan.notes, *dst]:
        echo(f"note     {name}: {note}")
    _report_refused(plan.refused, skip, echo)
    written = len([e for e in plan.entries if not e.disabled])
    if plan.refused and not skip:
        echo(
            f"summary: {len({r.name for r in plan.refused})} cannot be exported, nothing "
            "written (export the "
            "others with --skip-unexportable)"
        )
        ctx.exit(1)
    from goatbeat import __version__

    text = plan_mod.render_beat_schedule(
        plan, origin=origin, now=now, producer=f"goatbeat {__version__}"
    )
    try:
        if output is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        if last_runs_file is not None:
            with open(last_runs_file, "w", encoding="utf-8") as handle:
                json.dump(
                    {n: iso_z(t) for n, t in plan.last_runs.items()},
                    handle,
                    indent=2,
                    sort_keys=True,
                )
    except OSError as exc:
        raise UserError(f"cannot write: {exc}") from None
    disabled = len(plan.entries) - written
    extra = f", {disabled} as comments (disabled)" if disabled else ""
    skipped = f", {len({r.name for r in plan.refused})} skipped" if plan.refused else ""
    echo(f"summary: {written} entries written{extra}{skipped}")
    if last_runs_file is not None:
        echo(f"wrote the last runs of {len(plan.last_runs)} entries to {last_runs_file}")
    elif any(e.last_run_at for e in plan.entries):
        echo(
            "note: celery starts from goatbeat's last runs (and intervals keep goatbeat's "
            "phase) only with --last-runs FILE, loaded into celerybeat-schedule (docs/migration)"
        )


def _django_celery_beat(
    schedules: list[Any],
    origin: str,
    target: str | None,
    apply: bool,
    naive_timezone: str | None,
    now: datetime,
    ctx: click.Context,
    skip: bool,
) -> None:
    from goatbeat.django import beat_sources
    from goatbeat.importers.django_celery_beat import connect

    naive = naive_timezone or beat_sources.naive_timezone()
    click.echo(f"from: {origin}")
    if target is None:
        if not beat_sources.in_django_project():
            raise UserError("--to django-celery-beat needs --target URL outside Django")
        label = "Django's default database"
        _dcb_run(beat_sources.default_connection(), label, schedules, apply, naive, now, ctx, skip)
        return
    label = redact_url(target)
    try:
        with connect(target, write=apply) as conn:
            _dcb_run(conn, label, schedules, apply, naive, now, ctx, skip)
    except GoatbeatError as exc:
        if isinstance(exc, StoreError):
            raise OperationalError(" ".join(str(exc).split())) from None
        raise UserError(" ".join(str(exc).split())) from None


def _dcb_run(
    conn: Any,
    label: str,
    schedules: list[Any],
    apply: bool,
    naive: str,
    now: datetime,
    ctx: click.Context,
    skip: bool,
) -> None:
    from goatbeat.importers import export as plan_mod

    click.echo(f"to: django-celery-beat's tables ({label}){'' if apply else ' (dry run)'}")
    try:
        existing = plan_mod.read_rows(conn, naive_timezone=naive)
    except StoreError as exc:
        raise OperationalError(" ".join(str(exc).split())) from None
    finally:
        rollback = getattr(conn, "rollback", None)
        if rollback is not None and apply is False:
            rollback()
    plan = plan_mod.plan_django_celery_beat(schedules, existing, now=now)
    would = "" if apply else "would "
    for row in plan.create:
        click.echo(f"{would}create  {row.name}")
    for row, changes in plan.update:
        click.echo(f"{would}update  {row.name}: {'; '.join(changes)}")
    for name in plan.unchanged:
        click.echo(f"unchanged  {name}")
    for name in plan.left_alone:
        click.echo(
            f"left alone  {name}: goatbeat exports no schedule of that name (never imported, "
            "or deleted in goatbeat: then disable it in django-celery-beat, or celery runs it)"
        )
    by_name = {s.name: s for s in schedules if isinstance(s, Schedule)}
    exported = [*(r.name for r in plan.create), *(r.name for r, _ in plan.update), *plan.unchanged]
    dst = dst_notes(
        ((by_name[n], plan.read_back.get(n)) for n in exported if by_name[n].enabled), now
    )
    for name, note in [*plan.notes, *dst]:
        click.echo(f"note  {name}: {note}")
    _report_refused(plan.refused, skip, click.echo)
    if plan.refused and not skip:
        click.echo(
            f"summary: {len({r.name for r in plan.refused})} cannot be exported, nothing "
            "written (export the "
            "others with --skip-unexportable)"
        )
        ctx.exit(1)
    click.echo(
        "check: django-celery-beat's beat must be stopped while this writes (its "
        "DatabaseScheduler writes its own copy of the rows back at its next sync): look for "
        "'celery ... beat' in your process manager or `ps -ef | grep beat`"
    )
    if apply and plan.changes:
        plan_mod.write_django_celery_beat(conn, plan, now=now, naive_timezone=naive)
    skipped = f", {len({r.name for r in plan.refused})} skipped" if plan.refused else ""
    click.echo(
        f"summary: {len(plan.create)} {would}create, {len(plan.update)} {would}update, "
        f"{len(plan.unchanged)} unchanged, {len(plan.left_alone)} left alone{skipped}"
        + ("" if apply else " (dry run: nothing written; --apply to write)")
    )
    if apply and plan.changes:
        click.echo(
            "django_celery_beat_periodictasks.last_update moved to now: a DatabaseScheduler "
            "reads the rows again as written"
        )
