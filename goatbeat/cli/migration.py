"""The migration commands: ``goatbeat import_celery_beat``, ``goatbeat diff`` and
``goatbeat export_last_runs`` (also as ``manage.py goatbeat ...``).

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

Both read their sources alike (:func:`collect_entries`, :func:`source_options`). Under Django
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
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from goatbeat.cli.context import CliContext
from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.conversion import describe_exception
from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import GoatbeatError, InvalidValue, StoreError
from goatbeat.core.model import Source
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import iso_z, parse_instant
from goatbeat.stores import open_store, redact_url

# The importers, the diff and the Django project's sources (goatbeat.django.beat_sources, which
# reads celery's beat_schedule) are imported by the commands that use them: every other command
# (the scheduler first) starts without them.
if TYPE_CHECKING:
    from goatbeat.diff import DiffReport
    from goatbeat.importers.entries import ImportReport, SourceEntry

__all__ = [
    "Target",
    "allow_list_check",
    "checked_store",
    "collect_entries",
    "diff",
    "export_last_runs",
    "import_celery_beat",
    "import_group",
    "one_line",
    "open_target_store",
    "source_options",
    "target_url",
]

_PROGRESS_THRESHOLD = 200


@dataclass(frozen=True, slots=True)
class Target:
    """The goatbeat database a migration command works on, and how to name it to a human."""

    store: ScheduleStore
    label: str


def target_url(ctx: click.Context, database: str | None) -> str | None:
    """The explicit target, if any: the command's ``--database``, else the group's, else
    ``GOATBEAT_DATABASE``. Explicit means it wins over whatever the loaded app (a Celery app
    whose module sets ``DJANGO_SETTINGS_MODULE``, the Django project) configures."""
    obj = ctx.find_object(CliContext)
    group = obj.database if obj is not None else None
    return database or group or os.environ.get("GOATBEAT_DATABASE") or None


@contextmanager
def open_target_store(ctx: click.Context, database: str | None) -> Iterator[Target]:
    """The goatbeat store: :func:`target_url` when one is given, else the group's app
    (``--app``, the Django project's ``GOATBEAT['database']``)."""
    url = target_url(ctx, database)
    if url:
        store = open_store(url)
        try:
            yield Target(store, redact_url(url))
        finally:
            store.close()
        return
    obj = ctx.find_object(CliContext)
    if obj is None:
        raise UserError("no goatbeat database: pass --database URL or set GOATBEAT_DATABASE")
    try:
        app = obj.app()
    except click.ClickException as exc:
        raise UserError(
            f"no goatbeat database: pass --database URL or set GOATBEAT_DATABASE ({exc.message})"
        ) from None
    yield Target(app.store, _app_target(app))


def _app_target(app: Any) -> str:
    from goatbeat.django import beat_sources

    database = str(getattr(app, "database", "") or "")
    if "://" in database:
        return redact_url(database)
    return beat_sources.describe_alias(database or "default")


def checked_store(target: Target, *, dry_run: bool) -> ScheduleStore:
    """The store to plan against: unreachable is an error (never "no tables yet"); a dry run
    against a database without goatbeat's tables plans against an empty store."""
    try:
        version = int(target.store.info().get("schema_version") or 0)
    except StoreError as exc:
        raise OperationalError(
            f"the goatbeat database {target.label} is unreachable: {exc}"
        ) from None
    if dry_run:
        from goatbeat.stores.memory import MemoryStore

        return target.store if version else MemoryStore()
    try:
        target.store.migrate()  # idempotent; a dry run must not even create tables
    except StoreError as exc:
        raise OperationalError(
            f"cannot prepare the goatbeat database {target.label}: {exc}"
        ) from None
    return target.store


def collect_entries(
    *,
    from_app: str | None,
    from_dcb: str | None,
    check_tasks: bool = True,
    naive_timezone: str | None = None,
    last_runs_file: str | None = None,
    from_redbeat: str | None = None,
    redbeat_prefix: str | None = None,
    timezone: str | None = None,
) -> tuple[list[SourceEntry], list[str]]:
    """Read the requested sources; returns (entries, human lines about what was read).

    ``from_dcb`` is a URL, or ``"default"`` for Django's default database. With neither
    source under Django, both the project's beat schedule and its tables are read; a name in
    both is django-celery-beat's row (its scheduler copies the beat schedule into its table,
    with the last runs). ``last_runs_file``: the beat schedule's last runs as JSON
    (:func:`read_last_runs`). ``from_redbeat``: celery-redbeat's Redis URL (``"app"``: the
    app's ``redbeat_redis_url``), its keys under ``redbeat_prefix`` (default the app's, else
    ``redbeat:``); a name both in the beat schedule and in redbeat's keys is redbeat's (it
    copies the beat schedule there, with the last runs). ``timezone``: the zone of redbeat's
    crontabs (default the app's). Errors reading a source raise ``GoatbeatError`` (one line)."""
    from goatbeat.django import beat_sources
    from goatbeat.importers import celery_beat, django_celery_beat

    entries: list[SourceEntry] = []
    lines: list[str] = []
    if from_redbeat is not None and from_dcb is not None:
        raise UserError(
            "one scheduler's state at a time: --from-redbeat or --from-django-celery-beat"
        )
    last_runs = None
    if last_runs_file:
        last_runs = celery_beat.read_last_runs(last_runs_file)
        lines.append(f"last runs of {len(last_runs)} entries from {last_runs_file}")
    app: Any = None
    if from_app:
        app = celery_beat.load_app(from_app)
    django = beat_sources.in_django_project()
    if app is None and django and (from_dcb is None or from_dcb == "default"):
        app = beat_sources.project_celery_app()
    tasks: set[str] | None = None
    if app is not None and check_tasks:
        try:
            tasks = celery_beat.known_tasks(app)
        except Exception as exc:  # the project's task modules fail to import
            raise InvalidValue(
                "app", app, f"cannot list the Celery app's tasks: {describe_exception(exc)}"
            ) from None
    beat: list[SourceEntry] = []
    if from_app or (django and from_dcb is None):
        if app is not None:
            beat = celery_beat.read_beat_schedule(
                celery_beat.beat_schedule_of(app),
                timezone=celery_beat.app_timezone(app),
                known_tasks=tasks,
                last_runs=last_runs,
            )
            lines.append(f"{len(beat)} entries in the Celery app's beat_schedule")
        elif django:
            beat = beat_sources.settings_beat_schedule(last_runs)
            lines.append(f"{len(beat)} entries in settings.CELERY_BEAT_SCHEDULE")
    rows: list[SourceEntry] = []
    if from_redbeat is not None:
        rows, read = _read_redbeat(app, from_redbeat, redbeat_prefix, timezone, tasks)
        lines += read
    elif from_dcb is not None or (django and not from_app):
        zone = celery_beat.app_timezone(app) if app is not None else "UTC"
        naive = naive_timezone or beat_sources.naive_timezone()
        if from_dcb in (None, "default"):
            if not django:
                raise UserError("--from-django-celery-beat needs a database URL outside Django")
            source: Any = beat_sources.default_connection()
            label = "Django's default database"
        else:
            source, label = from_dcb, redact_url(from_dcb)
        try:
            rows = django_celery_beat.read_django_celery_beat(
                source, known_tasks=tasks, default_timezone=zone, naive_timezone=naive
            )
        except GoatbeatError as exc:
            if from_dcb is None:  # implicit under Django: the tables may simply not exist
                lines.append(f"no django-celery-beat tables read ({exc})")
            else:
                raise
        else:
            lines.append(f"{len(rows)} rows in django-celery-beat's tables ({label})")
    in_table = {e.name for e in rows}
    for entry in beat:
        if entry.name not in in_table:
            entries.append(entry)
        elif from_redbeat is not None:
            continue  # redbeat copies every beat_schedule entry into its keys: said once below
        elif entry.name != celery_beat.BACKEND_CLEANUP:
            lines.append(
                f"{entry.name}: in the beat schedule and in django-celery-beat's table (its "
                "scheduler copies the beat schedule there): the table's row is imported"
            )
    both = sorted({e.name for e in beat} & in_table)
    if from_redbeat is not None and both:
        lines.append(
            f"{len(both)} beat_schedule entries are also redbeat keys (redbeat copies them "
            "there, with their last runs): the keys are imported"
        )
    entries += rows
    if tasks is None and (from_app or from_dcb is not None or from_redbeat is not None or django):
        lines.append("task names not checked (no Celery app; pass --from-app to check them)")
    return entries, lines


def _read_redbeat(
    app: Any,
    url: str,
    prefix: str | None,
    timezone: str | None,
    tasks: set[str] | None,
) -> tuple[list[SourceEntry], list[str]]:
    """celery-redbeat's entries (:mod:`goatbeat.importers.redbeat`), configured by the app
    when there is one."""
    from goatbeat.conversion import timezone_name
    from goatbeat.importers import celery_beat, redbeat

    if app is not None:
        config = redbeat.config_of(app, prefix)
    else:
        config = redbeat.RedbeatConfig(
            key_prefix=prefix if prefix is not None else redbeat.DEFAULT_KEY_PREFIX,
            lock_key=redbeat.RedbeatConfig.default_lock(
                prefix if prefix is not None else redbeat.DEFAULT_KEY_PREFIX
            ),
        )
    if url == "app":
        if config.redis_url is None:
            raise UserError(
                "no redbeat Redis: pass --redis URL (the app sets no redbeat_redis_url)"
            )
        url = config.redis_url
    if timezone is not None:
        zone = timezone_name(timezone, "timezone")
    else:
        zone = celery_beat.app_timezone(app) if app is not None else "UTC"
    read = redbeat.read_redbeat(
        url,
        config=config,
        timezone=zone,
        timezone_given=timezone is not None or app is not None,
        known_tasks=tasks,
        beat_schedule=celery_beat.beat_schedule_of(app) if app is not None else None,
    )
    lines = list(read.lines)
    if app is None and timezone is None:
        lines.append(
            "crontabs read in UTC (no Celery app): pass --app MODULE:APP or --timezone ZONE "
            "if redbeat's app runs in another zone"
        )
    return read.entries, lines


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
            "--redbeat-key-prefix",
            "redbeat_prefix",
            metavar="PREFIX",
            default=None,
            help="redbeat_key_prefix of --from-redbeat (default the app's, else 'redbeat:').",
        )(command)
        command = click.option(
            "--redbeat-timezone",
            "redbeat_timezone",
            metavar="ZONE",
            default=None,
            help="The zone redbeat's crontabs run in (default the app's, else UTC).",
        )(command)
        command = click.option(
            "--from-redbeat",
            "from_redbeat",
            metavar="URL",
            default=None,
            help="celery-redbeat's Redis (redis:// URL): its <prefix><name> keys, with the "
            "last runs of their meta.",
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
    from goatbeat.django import beat_sources

    try:
        if (
            not from_app
            and from_dcb is None
            and from_redbeat is None
            and not beat_sources.in_django_project()
        ):
            raise UserError(
                "nothing to import: pass --from-app MODULE:APP, --from-django-celery-beat URL "
                "and/or --from-redbeat URL"
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


def one_line(exc: BaseException) -> str:
    if isinstance(exc, GoatbeatError):
        return " ".join(str(exc).split())
    return describe_exception(exc)


def allow_list_check(ctx: click.Context) -> Callable[[str], None] | None:
    """The app's allow-list check (``Beat.check_task``: the Django project's, or ``--app``'s),
    so an imported task outside it is a FAILED line; None without an app."""
    obj = ctx.find_object(CliContext)
    if obj is None or not (obj.app_spec or os.environ.get("GOATBEAT_APP") or _django()):
        return None
    try:
        app = obj.app()
    except click.ClickException:
        return None
    ctx.call_on_close(obj.close)
    check = getattr(app, "check_task", None)
    return check if callable(check) else None


def _django() -> bool:
    return bool(os.environ.get("DJANGO_SETTINGS_MODULE"))


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


# -- export_last_runs (rollback) ---------------------------------------------------------------


@click.command("export_last_runs")
@click.option(
    "--to-django-celery-beat",
    "to_dcb",
    metavar="[URL]",
    is_flag=False,
    flag_value="default",
    default=None,
    help="Write them into django-celery-beat's rows: a postgresql:// or sqlite:/// URL "
    "(without one, Django's default database).",
)
@click.option(
    "--to-json",
    "to_json",
    metavar="FILE",
    default=None,
    help="Write {name: ISO instant} of the beat_schedule entries goatbeat ran, for stock "
    "beat's celerybeat-schedule (see docs/migration).",
)
@click.option(
    "--to-redbeat",
    "to_redbeat",
    metavar="URL",
    default=None,
    help="Write them into celery-redbeat's meta (last_run_at) in this Redis (redis:// URL).",
)
@click.option(
    "--redbeat-key-prefix",
    "redbeat_prefix",
    metavar="PREFIX",
    default="redbeat:",
    show_default=True,
    help="redbeat_key_prefix of --to-redbeat.",
)
@click.option(
    "--redbeat-timezone",
    "redbeat_timezone",
    metavar="ZONE",
    default="UTC",
    show_default=True,
    help="The Celery app's zone, which redbeat stamps its last runs in.",
)
@click.option("--database", default=None, help="The goatbeat database to read.")
@click.option(
    "--naive-timezone",
    default=None,
    help="Zone of naive datetimes in the tables (default UTC; Django: UTC when USE_TZ).",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.pass_context
def export_last_runs(
    ctx: click.Context,
    to_dcb: str | None,
    to_json: str | None,
    to_redbeat: str | None,
    redbeat_prefix: str,
    redbeat_timezone: str,
    database: str | None,
    naive_timezone: str | None,
    dry_run: bool,
) -> None:
    """Hand goatbeat's last runs back to celery beat before a rollback, so it runs nothing
    goatbeat already ran."""
    from goatbeat.django import beat_sources
    from goatbeat.importers import django_celery_beat

    if [to_dcb, to_json, to_redbeat].count(None) != 2:
        raise UserError(
            "say where to: --to-django-celery-beat [URL], --to-json FILE or --to-redbeat URL"
        )
    with open_target_store(ctx, database) as target:
        click.echo(f"from: {target.label}")
        source = Source.DJANGO_CELERY_BEAT if to_dcb is not None else Source.CELERY
        try:
            ran = [
                s
                for s in target.store.list_schedules(source=source)
                if s.last_status is not None and s.last_run_at is not None
            ]
        except StoreError as exc:
            raise OperationalError(
                f"cannot read the goatbeat database {target.label}: {exc}"
            ) from None
    if to_json is not None:
        runs = {s.name: iso_z(s.last_run_at) for s in ran if s.last_run_at is not None}
        if not dry_run:
            try:
                with open(to_json, "w", encoding="utf-8") as handle:
                    json.dump(runs, handle, indent=2, sort_keys=True)
            except OSError as exc:
                raise UserError(f"cannot write {to_json!r}: {exc}") from None
        verb = "would write" if dry_run else "wrote"
        click.echo(f"{verb} the last runs of {len(runs)} entries to {to_json}")
        return
    if to_redbeat is not None:
        _hand_back_to_redbeat(ran, to_redbeat, redbeat_prefix, redbeat_timezone, dry_run)
        return
    assert to_dcb is not None
    if to_dcb == "default":
        if not beat_sources.in_django_project():
            raise UserError("--to-django-celery-beat needs a database URL outside Django")
        conn: Any = beat_sources.default_connection()
        label = "Django's default database"
    else:
        conn, label = to_dcb, redact_url(to_dcb)
    click.echo(f"to: django-celery-beat's tables ({label}){' (dry run)' if dry_run else ''}")
    click.echo(
        "check: django-celery-beat's beat must be stopped (its DatabaseScheduler would write "
        "its own last runs over these at its next sync): look for 'celery ... beat' in your "
        "process manager or `ps -ef | grep beat`; goatbeat cannot see it from the database"
    )
    naive = naive_timezone or beat_sources.naive_timezone()
    try:
        changed = django_celery_beat.hand_back(
            conn,
            {s.name: (s.last_run_at, s.total_run_count) for s in ran if s.last_run_at},
            naive_timezone=naive,
            dry_run=dry_run,
        )
    except GoatbeatError as exc:
        raise OperationalError(one_line(exc)) from None
    _echo_handed_back(changed, dry_run)
    click.echo(
        f"summary: {len(changed)} row(s) {'would be ' if dry_run else ''}moved forward, "
        f"{len(ran) - len(changed)} already at or past goatbeat's last run"
    )
    if changed and not dry_run:
        click.echo(
            "django_celery_beat_periodictasks.last_update moved to now: a DatabaseScheduler "
            "reads the rows again as written"
        )


def _echo_handed_back(changed: Sequence[Any], dry_run: bool) -> None:
    """One line per last run handed back (django-celery-beat rows, redbeat's meta)."""
    verb = "would set" if dry_run else "set"
    for row in changed:
        was = "never" if row.before is None else iso_z(row.before)
        click.echo(
            f"{verb}  {row.name}: last_run_at {iso_z(row.after)} (was {was}), "
            f"total_run_count {row.total_run_count}"
        )


def _hand_back_to_redbeat(ran: list[Any], url: str, prefix: str, zone: str, dry_run: bool) -> None:
    from goatbeat.importers import redbeat

    click.echo(
        f"to: redbeat's meta under {prefix!r} ({redact_url(url)}){' (dry run)' if dry_run else ''}"
    )
    click.echo(
        "check: every redbeat beat must be stopped (a running one writes its own meta over "
        "these): look for 'celery ... beat -S redbeat...' in your process manager"
    )
    config = redbeat.RedbeatConfig(
        key_prefix=prefix, lock_key=redbeat.RedbeatConfig.default_lock(prefix)
    )
    try:
        changed = redbeat.hand_back(
            url,
            {s.name: (s.last_run_at, s.total_run_count) for s in ran if s.last_run_at},
            config=config,
            timezone=zone,
            dry_run=dry_run,
        )
    except GoatbeatError as exc:
        raise OperationalError(one_line(exc)) from None
    _echo_handed_back(changed, dry_run)
    click.echo(
        f"summary: {len(changed)} entr{'y' if len(changed) == 1 else 'ies'} "
        f"{'would be ' if dry_run else ''}moved forward, {len(ran) - len(changed)} already at "
        "or past goatbeat's last run or not in redbeat"
    )


# -- diff ------------------------------------------------------------------------------------


@click.command("diff")
@source_options("The goatbeat database (the new side).")
@click.option("--horizon", default="30d", show_default=True, help="How far ahead to compare.")
@click.option(
    "--start", "start_text", default=None, help="Compare from this instant (default now)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--max-instants", default=5, show_default=True, help="Differing instants shown.")
@click.option(
    "--accept-known-bugs",
    is_flag=True,
    help="Count differences explained by a known celery bug (DST, day_of_week=7) as equal.",
)
@click.option(
    "--accept-refused",
    "accept_refused",
    metavar="NAME",
    multiple=True,
    help="An entry the importer refuses (FAILED) that you accept: it stays on celery beat, "
    "or a goatbeat schedule of yours replaces it. Listed, and no difference. Repeatable.",
)
@click.option(
    "--all-sources",
    is_flag=True,
    help="Compare every goatbeat schedule, not only those imported from the given sources.",
)
@click.pass_context
def diff(
    ctx: click.Context,
    from_app: str | None,
    from_dcb: str | None,
    database: str | None,
    horizon: str,
    start_text: str | None,
    as_json: bool,
    max_instants: int,
    accept_known_bugs: bool,
    accept_refused: tuple[str, ...],
    all_sources: bool,
    last_runs_file: str | None,
    from_redbeat: str | None,
    redbeat_prefix: str | None,
    redbeat_timezone: str | None,
) -> None:
    """Compare celery's schedules with goatbeat's: exit 0 equal, 1 different, 2 error."""
    from goatbeat.diff import compute_diff
    from goatbeat.django import beat_sources

    try:
        if (
            not from_app
            and from_dcb is None
            and from_redbeat is None
            and not beat_sources.in_django_project()
        ):
            raise UserError(
                "nothing to compare: pass --from-app, --from-django-celery-beat and/or "
                "--from-redbeat"
            )
        span = parse_duration(horizon, field="horizon")
        now = datetime.now(UTC)
        start = parse_instant(start_text, "start") if start_text else now.replace(microsecond=0)
        old, _ = collect_entries(
            from_app=from_app,
            from_dcb=from_dcb,
            check_tasks=False,
            last_runs_file=last_runs_file,
            from_redbeat=from_redbeat,
            redbeat_prefix=redbeat_prefix,
            timezone=redbeat_timezone,
        )
        sources = {e.source for e in old}
        if from_app or from_redbeat is not None:
            sources.add(Source.CELERY)
        if from_dcb is not None:
            sources.add(Source.DJANGO_CELERY_BEAT)
        with open_target_store(ctx, database) as target:
            label = target.label
            try:
                new = [
                    s for s in target.store.list_schedules() if all_sources or s.source in sources
                ]
            except StoreError as exc:
                raise OperationalError(
                    f"cannot read the goatbeat database {target.label}: {exc}"
                ) from None
        report = compute_diff(
            old,
            new,
            start=start,
            horizon=span,
            max_instants=max_instants,
            accept_known=accept_known_bugs,
            accept_refused=accept_refused,
            now=now,
        )
    except click.ClickException as exc:
        if exc.exit_code != 2:
            raise UserError(exc.format_message()) from None
        raise
    except (GoatbeatError, ImportError, OSError) as exc:
        raise UserError(f"diff failed: {exc}") from None
    if as_json:
        data = report.to_dict()
        data["target"] = label
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(f"target: {label}")
        _print_report(report, click.echo)
    ctx.exit(0 if report.equal else 1)


def _print_report(report: DiffReport, echo: Callable[[str], None]) -> None:
    width = max([len(s.name) for s in report.schedules] + [8])
    echo(
        f"{'SCHEDULE':<{width}}  STATUS     "
        f"(fire times from {iso_z(report.start)} over {format_duration(report.horizon)})"
    )
    for s in report.schedules:
        status = s.status if s.differs(accept_known=report.accept_known) else "equal"
        if s.status == "different" and status == "equal":
            status = "equal*"  # only known celery bugs differ, and they were accepted
        if s.refused is not None:
            status = "refused (accepted)" if s.accepted else "refused"
        echo(f"{s.name:<{width}}  {status}")
        for name, (o, n) in s.fields.items():
            echo(f"{'':<{width}}    {name}: celery {o!r} -> goatbeat {n!r}")
        if s.fire_difference_count:
            echo(f"{'':<{width}}    {s.fire_difference_count} fire time(s) differ; first:")
        for f in s.fire_times:
            side = "celery only  " if f.old else "goatbeat only"
            echo(f"{'':<{width}}      {iso_z(f.at)}  {side}  {f.reason or ''}")
        for note in s.notes:
            echo(f"{'':<{width}}    note: {note}")
    verdict = "EQUAL" if report.equal else "DIFFERENT"
    counts: dict[str, int] = {}
    for s in report.schedules:
        key = s.status if s.differs(accept_known=report.accept_known) else "equal"
        if s.refused is not None:
            key = "refused (accepted)" if s.accepted else "refused"
        counts[key] = counts.get(key, 0) + 1
    if report.accepted_refused:
        echo(f"accepted refused: {', '.join(report.accepted_refused)}")
    echo(f"{verdict}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
