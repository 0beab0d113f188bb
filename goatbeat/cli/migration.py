"""The migration commands: ``goatbeat import_celery_beat`` and ``goatbeat import redbeat`` here,
``goatbeat diff`` in :mod:`goatbeat.cli.diff`, ``goatbeat export_last_runs`` in
:mod:`goatbeat.cli.last_runs`, their sources and target in :mod:`goatbeat.cli.sources` (also as
``manage.py goatbeat ...``).

::

    goatbeat [--database URL] import_celery_beat
        [--from-app module:app]                 a Celery app's beat_schedule
        [--from-django-celery-beat [URL]]       django-celery-beat's tables (URL, or Django's
                                                default database when run under Django)
        [--from-redbeat URL [--redbeat-key-prefix P] [--redbeat-timezone ZONE]]
                                                celery-redbeat's keys in Redis
        [--last-runs JSON_FILE] [--dry-run] [--json] [--no-check-tasks] [--naive-timezone ZONE]
    goatbeat [--database URL] diff [the same sources] [--horizon 30d] [--start INSTANT]
        [--json] [--max-instants N] [--accept-known-bugs] [--accept-refused NAME]...
        [--all-sources]

    goatbeat [--database URL] import redbeat --redis URL [--key-prefix P] [--app MODULE:APP]
        [--timezone ZONE] [--dry-run] [--json] [--no-check-tasks] [--overwrite]
                                                celery-redbeat's keys (import_celery_beat
                                                --from-redbeat URL does the same)

    goatbeat [--database URL] export_last_runs (--to-django-celery-beat [URL] | --to-json FILE
        | --to-redbeat URL [--redbeat-key-prefix P] [--redbeat-timezone ZONE])
        [--dry-run]                             goatbeat's last runs back to celery beat, before
                                                a rollback

The goatbeat database is the explicit ``--database`` (the command's or the group's), else
``GOATBEAT_DATABASE``, else the app's (``--app``, the Django project's ``GOATBEAT['database']``);
whatever a loaded Celery app configures never overrides an explicit one. Each command prints it
first (``target: ...``, password redacted).

Both read their sources alike (:mod:`goatbeat.cli.sources`). Under Django
with no source option, they read ``CELERY_BEAT_SCHEDULE`` (through the project's Celery app when
one is loaded) and django-celery-beat's tables in the default database
(:mod:`goatbeat.django.beat_sources`). The work itself is below: :mod:`goatbeat.importers`
reads and imports, :mod:`goatbeat.diff` compares.

Exit status of ``import_celery_beat``: 0 when everything imported, 1 when some entries failed
or conflict with an operator's edit (the rest imported) or the target is unreachable, 2 on a
usage error or when a source cannot be read. Of ``diff``: 0 equal, 1 different, 2 error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from goatbeat.cli.errors import UserError
from goatbeat.cli.sources import (
    Target,
    allow_list_check,
    checked_store,
    collect_entries,
    one_line,
    open_target_store,
    require_a_source,
    source_options,
    target_url,
)
from goatbeat.core.errors import GoatbeatError
from goatbeat.core.store import ScheduleStore

# The importers, the diff and the Django project's sources (goatbeat.django.beat_sources, which
# reads celery's beat_schedule) are imported by the commands that use them: every other command
# (the scheduler first) starts without them.
if TYPE_CHECKING:
    from goatbeat.importers.entries import ImportReport, SourceEntry

__all__ = [
    "Target",
    "allow_list_check",
    "checked_store",
    "collect_entries",
    "import_celery_beat",
    "import_group",
    "one_line",
    "open_target_store",
    "source_options",
    "target_url",
]

_PROGRESS_THRESHOLD = 200


@click.command("import_celery_beat")
@source_options("The goatbeat database to import into.")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--check-tasks/--no-check-tasks",
    default=True,
    help="Report entries whose task the Celery app does not register (default: on).",
)
@click.option(
    "--naive-timezone",
    default=None,
    help="Zone of naive datetimes in the tables (default UTC; Django: UTC when USE_TZ).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace schedules edited in goatbeat since their import with the source's "
    "definition (without it, each is reported as a conflict and kept).",
)
@click.pass_context
def import_celery_beat(
    ctx: click.Context,
    from_app: str | None,
    from_dcb: str | None,
    database: str | None,
    dry_run: bool,
    as_json: bool,
    check_tasks: bool,
    naive_timezone: str | None,
    last_runs_file: str | None,
    overwrite: bool,
    from_redbeat: str | None,
    redbeat_prefix: str | None,
    redbeat_timezone: str | None,
) -> None:
    """Import celery beat schedules into goatbeat (idempotent; --dry-run to preview)."""

    try:
        require_a_source(
            from_app,
            from_dcb,
            from_redbeat,
            "nothing to import: pass --from-app MODULE:APP, --from-django-celery-beat URL "
            "and/or --from-redbeat URL",
        )
        entries, lines = collect_entries(
            from_app=from_app,
            from_dcb=from_dcb,
            check_tasks=check_tasks,
            naive_timezone=naive_timezone,
            last_runs_file=last_runs_file,
            from_redbeat=from_redbeat,
            redbeat_prefix=redbeat_prefix,
            timezone=redbeat_timezone,
        )
    except click.ClickException:
        raise
    except (GoatbeatError, ImportError) as exc:
        raise UserError(f"cannot read the source: {one_line(exc)}") from None
    _import_and_report(ctx, entries, lines, database, dry_run, as_json, overwrite)


def _import_and_report(
    ctx: click.Context,
    entries: list[SourceEntry],
    lines: list[str],
    database: str | None,
    dry_run: bool,
    as_json: bool,
    overwrite: bool,
) -> None:
    check_task = allow_list_check(ctx)
    if check_task is None:
        lines.append(
            "tasks not checked against an allow-list (no --app): the scheduler refuses those "
            "outside its own (allowed_tasks) when it runs them"
        )
    with open_target_store(ctx, database) as target:
        if not as_json:
            click.echo(f"target: {target.label}{' (dry run)' if dry_run else ''}")
        store = checked_store(target, dry_run=dry_run)
        if dry_run and store is not target.store:
            lines.append("the goatbeat database has no tables yet: everything would be created")
        report = _run(
            store,
            entries,
            dry_run=dry_run,
            quiet=as_json,
            overwrite=overwrite,
            check_task=check_task,
        )
    if as_json:
        data = report.to_dict()
        data["target"] = target.label
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        _print(report, lines)
    if not report.ok:
        ctx.exit(1)


def _run(
    store: ScheduleStore,
    entries: list[SourceEntry],
    *,
    dry_run: bool,
    quiet: bool,
    overwrite: bool,
    check_task: Callable[[str], None] | None = None,
) -> ImportReport:
    from goatbeat.importers.entries import import_entries

    if len(entries) < _PROGRESS_THRESHOLD or quiet:
        return import_entries(
            store, entries, dry_run=dry_run, overwrite=overwrite, check_task=check_task
        )
    total = len(entries)
    stream = sys.stderr
    bar: Any = click.progressbar(length=total, label="importing", file=stream)
    with bar:
        return import_entries(
            store,
            entries,
            dry_run=dry_run,
            overwrite=overwrite,
            progress=bar.update,
            check_task=check_task,
        )


def _print(report: ImportReport, lines: list[str]) -> None:
    for line in lines:
        click.echo(f"read: {line}")
    prefix = "would " if report.dry_run else ""
    for name in report.created:
        click.echo(f"{prefix}create  {name}")
    toggled = dict(report.toggled)
    for name in report.updated:
        if name in toggled:
            flag = "enabled" if toggled[name] else "disabled"
            click.echo(
                f"{prefix}update  {name}  (the source {flag} it since the last import: "
                f"{flag} in goatbeat too)"
            )
        else:
            click.echo(f"{prefix}update  {name}")
    unrun = set(report.changed_unrun)
    for name in report.refreshed:
        if name in unrun:
            click.echo(
                f"{prefix}refresh {name}  (it never ran, and the source changed the row since: "
                "its next run counts from that change, as celery counts it)"
            )
        else:
            click.echo(
                f"{prefix}refresh {name}  (celery ran it since: its next run follows that run)"
            )
    for name in report.unchanged:
        click.echo(f"unchanged {name}")
    for name, reason in report.conflicts:
        click.echo(f"conflict  {name}: {reason}")
    for name, note in report.notes:
        click.echo(f"note    {name}: {note}")
    for name, reason in report.failed:
        click.echo(f"FAILED  {name}: {reason}")
    click.echo(f"summary: {report.summary()}")


# -- import redbeat ----------------------------------------------------------------------------


@click.group("import")
def import_group() -> None:
    """Import schedules from another scheduler into goatbeat (idempotent; --dry-run to
    preview)."""


@import_group.command("redbeat")
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    default=None,
    help="redbeat's Redis (redis:// URL; default the app's redbeat_redis_url).",
)
@click.option(
    "--key-prefix",
    "key_prefix",
    metavar="PREFIX",
    default=None,
    help="redbeat_key_prefix (default the app's, else 'redbeat:').",
)
@click.option(
    "--app",
    "celery_app",
    metavar="MODULE:APP",
    default=None,
    help="The Celery app redbeat runs (celery -A): its timezone, redbeat settings, tasks "
    "and beat_schedule.",
)
@click.option(
    "--timezone",
    "timezone",
    metavar="ZONE",
    default=None,
    help="The zone redbeat's crontabs run in (default the app's, else UTC).",
)
@click.option("--database", default=None, help="The goatbeat database to import into.")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--check-tasks/--no-check-tasks",
    default=True,
    help="Report entries whose task the Celery app does not register (default: on).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace schedules edited in goatbeat since their import with redbeat's definition.",
)
@click.pass_context
def import_redbeat(
    ctx: click.Context,
    redis_url: str | None,
    key_prefix: str | None,
    celery_app: str | None,
    timezone: str | None,
    database: str | None,
    dry_run: bool,
    as_json: bool,
    check_tasks: bool,
    overwrite: bool,
) -> None:
    """celery-redbeat's Redis keys (<prefix><name>: definition and meta's last_run_at) into
    goatbeat; the same as import_celery_beat --from-redbeat URL [--from-app APP]."""
    try:
        if redis_url is None and celery_app is None:
            raise UserError("nothing to import: pass --redis URL (and --app MODULE:APP)")
        entries, lines = collect_entries(
            from_app=celery_app,
            from_dcb=None,
            check_tasks=check_tasks,
            from_redbeat=redis_url or "app",
            redbeat_prefix=key_prefix,
            timezone=timezone,
        )
    except click.ClickException:
        raise
    except (GoatbeatError, ImportError) as exc:
        raise UserError(f"cannot read the source: {one_line(exc)}") from None
    _import_and_report(ctx, entries, lines, database, dry_run, as_json, overwrite)
