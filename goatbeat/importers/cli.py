"""``goatbeat import_celery_beat`` (and ``manage.py goatbeat import_celery_beat``).

::

    goatbeat [--database URL] import_celery_beat
        [--from-app module:app]                 a Celery app's beat_schedule
        [--from-django-celery-beat [URL]]       django-celery-beat's tables (URL, or Django's
                                                default database when run under Django)
        [--dry-run] [--json] [--no-check-tasks] [--naive-timezone ZONE]

Under Django with no source option, it reads ``CELERY_BEAT_SCHEDULE`` (through the project's
Celery app when one is loaded) and django-celery-beat's tables in the default database.
Exit status: 0 when everything imported, 1 when some entries failed (the rest imported),
2 on a usage error or when a source cannot be read.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import Source
from goatbeat.core.store import ScheduleStore
from goatbeat.importers.entries import ImportReport, SourceEntry, import_entries
from goatbeat.stores import redact_url

__all__ = ["import_celery_beat", "collect_entries", "open_target_store", "source_options"]

_PROGRESS_THRESHOLD = 200


def _fail(message: str) -> click.ClickException:
    """A usage error or an unreadable source: one line, exit status 2."""
    try:
        from goatbeat.cli import UserError

        return UserError(message)
    except ImportError:  # pragma: no cover - the CLI module ships with goatbeat
        return click.ClickException(message)


@contextmanager
def open_target_store(ctx: click.Context, database: str | None) -> Iterator[ScheduleStore]:
    """The goatbeat store: ``database`` if given, else the group's app (``--database``,
    ``--app``, the Django project), else ``GOATBEAT_DATABASE``."""
    obj = _cli_context(ctx)
    if database is None and obj is not None:
        try:
            store = obj.store()
        except click.ClickException:
            if not os.environ.get("GOATBEAT_DATABASE"):
                raise
        else:
            yield store
            return
    url = database or os.environ.get("GOATBEAT_DATABASE")
    if not url:
        raise _fail("no goatbeat database: pass --database URL or set GOATBEAT_DATABASE")
    from goatbeat.stores import open_store

    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def _cli_context(ctx: click.Context) -> Any:
    try:
        from goatbeat.cli import CliContext
    except ImportError:  # pragma: no cover
        return None
    return ctx.find_object(CliContext)


def _under_django() -> bool:
    """True inside a Django project (DJANGO_SETTINGS_MODULE set and its settings load)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return False
    try:
        from django.conf import settings

        return bool(settings.configured)
    except ImportError:
        return False


def _django_celery_app() -> Any:
    """The project's Celery app when the Django project loaded one, else None."""
    try:
        from celery import current_app
    except ImportError:
        return None
    app = current_app._get_current_object()
    # Without a project app, current_app is celery's fallback ("default"), whose empty
    # beat_schedule would hide settings.CELERY_BEAT_SCHEDULE.
    return app if app.conf.beat_schedule else None


def collect_entries(
    *,
    from_app: str | None,
    from_dcb: str | None,
    check_tasks: bool = True,
    naive_timezone: str | None = None,
    last_runs_file: str | None = None,
) -> tuple[list[SourceEntry], list[str]]:
    """Read the requested sources; returns (entries, human lines about what was read).

    ``from_dcb`` is a URL, or ``"default"`` for Django's default database. With neither
    source under Django, both the project's beat schedule and its tables are read.
    ``last_runs_file``: the beat schedule's last runs as JSON (:func:`read_last_runs`)."""
    from goatbeat.importers import celery_beat, django_celery_beat

    entries: list[SourceEntry] = []
    lines: list[str] = []
    last_runs = None
    if last_runs_file:
        last_runs = celery_beat.read_last_runs(last_runs_file)
        lines.append(f"last runs of {len(last_runs)} entries from {last_runs_file}")
    django = _under_django()
    app: Any = None
    if from_app:
        app = celery_beat.load_app(from_app)
    elif django and (from_dcb is None or from_dcb == "default"):
        app = _django_celery_app()
    tasks = celery_beat.known_tasks(app) if (app is not None and check_tasks) else None
    if from_app or (django and from_dcb is None):
        if app is not None:
            read = celery_beat.read_beat_schedule(
                app.conf.beat_schedule or {},
                timezone=celery_beat.app_timezone(app),
                known_tasks=tasks,
                last_runs=last_runs,
            )
            lines.append(f"{len(read)} entries in the Celery app's beat_schedule")
            entries += read
        elif django:
            read = _settings_beat_schedule(last_runs)
            lines.append(f"{len(read)} entries in settings.CELERY_BEAT_SCHEDULE")
            entries += read
    if from_dcb is not None or (django and not from_app):
        zone = celery_beat.app_timezone(app) if app is not None else "UTC"
        naive = naive_timezone or _django_naive_zone()
        if from_dcb in (None, "default"):
            if not django:
                raise _fail("--from-django-celery-beat needs a database URL outside Django")
            from django.db import connection

            source: Any = connection
            label = "Django's default database"
        else:
            source, label = from_dcb, redact_url(from_dcb)
        try:
            read = django_celery_beat.read_django_celery_beat(
                source, known_tasks=tasks, default_timezone=zone, naive_timezone=naive
            )
        except GoatbeatError as exc:
            if from_dcb is None:  # implicit under Django: the tables may simply not exist
                lines.append(f"no django-celery-beat tables read ({exc})")
                read = []
            else:
                raise
        else:
            lines.append(f"{len(read)} rows in django-celery-beat's tables ({label})")
        entries += read
    if tasks is None and (from_app or from_dcb is not None or django):
        lines.append("task names not checked (no Celery app; pass --from-app to check them)")
    return entries, lines


def _settings_beat_schedule(last_runs: Mapping[str, datetime] | None) -> list[SourceEntry]:
    from django.conf import settings

    from goatbeat.importers.celery_beat import read_beat_schedule

    schedule = getattr(settings, "CELERY_BEAT_SCHEDULE", None) or {}
    zone = getattr(settings, "CELERY_TIMEZONE", None) or "UTC"
    return read_beat_schedule(schedule, timezone=zone, last_runs=last_runs)


def _django_naive_zone() -> str:
    if not _under_django():
        return "UTC"
    from django.conf import settings

    return "UTC" if settings.USE_TZ else str(settings.TIME_ZONE or "UTC")


def source_options(database_help: str) -> Callable[[Callable[..., Any]], Any]:
    """``--from-app``, ``--from-django-celery-beat``, ``--last-runs`` and ``--database``:
    the sources :func:`collect_entries` reads and the goatbeat store, spelled alike by every
    command."""

    def decorate(command: Callable[..., Any]) -> Any:
        # Applied innermost first, so --help lists them in reading order.
        command = click.option("--database", default=None, help=database_help)(command)
        command = click.option(
            "--last-runs",
            "last_runs_file",
            metavar="JSON_FILE",
            default=None,
            help="The beat schedule's last runs, {name: ISO instant} (dumped from stock beat's "
            "celerybeat-schedule, see docs/migration): intervals keep celery's phase.",
        )(command)
        command = click.option(
            "--from-django-celery-beat",
            "from_dcb",
            metavar="[URL]",
            is_flag=False,
            flag_value="default",
            default=None,
            help="django-celery-beat's tables: a postgresql:// or sqlite:/// URL "
            "(without one, Django's default database).",
        )(command)
        return click.option(
            "--from-app", "from_app", metavar="MODULE:APP", help="A Celery app's beat_schedule."
        )(command)

    return decorate


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
) -> None:
    """Import celery beat schedules into goatbeat (idempotent; --dry-run to preview)."""
    if not from_app and from_dcb is None and not _under_django():
        raise _fail(
            "nothing to import: pass --from-app MODULE:APP and/or --from-django-celery-beat URL"
        )
    try:
        entries, lines = collect_entries(
            from_app=from_app,
            from_dcb=from_dcb,
            check_tasks=check_tasks,
            naive_timezone=naive_timezone,
            last_runs_file=last_runs_file,
        )
    except click.ClickException:
        raise
    except (GoatbeatError, ImportError) as exc:
        raise _fail(f"cannot read the source: {exc}") from None
    with open_target_store(ctx, database) as store:
        if not dry_run:
            store.migrate()  # idempotent; a dry run must not even create tables
        elif not _has_tables(store):
            lines.append("the goatbeat database has no tables yet: everything would be created")
            from goatbeat.stores.memory import MemoryStore

            store = MemoryStore()
        report = _run(store, entries, dry_run=dry_run, quiet=as_json)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        _print(report, lines)
    if report.failed:
        ctx.exit(1)


def _has_tables(store: ScheduleStore) -> bool:
    try:
        store.list_schedules(source=Source.CELERY)
    except StoreError:
        return False
    return True


def _run(
    store: ScheduleStore, entries: list[SourceEntry], *, dry_run: bool, quiet: bool
) -> ImportReport:
    if len(entries) < _PROGRESS_THRESHOLD or quiet:
        return import_entries(store, entries, dry_run=dry_run)
    total = len(entries)
    stream = sys.stderr
    bar: Any = click.progressbar(length=total, label="importing", file=stream)
    with bar:
        return import_entries(store, entries, dry_run=dry_run, progress=bar.update)


def _print(report: ImportReport, lines: list[str]) -> None:
    for line in lines:
        click.echo(f"read: {line}")
    prefix = "would " if report.dry_run else ""
    for name in report.created:
        click.echo(f"{prefix}create  {name}")
    for name in report.updated:
        click.echo(f"{prefix}update  {name}")
    for name in report.refreshed:
        click.echo(f"{prefix}refresh {name}  (never run by goatbeat; celery ran it since)")
    for name, note in report.notes:
        click.echo(f"note    {name}: {note}")
    for name, reason in report.failed:
        click.echo(f"FAILED  {name}: {reason}")
    click.echo(f"summary: {report.summary()}")
