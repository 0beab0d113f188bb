"""Where the migration commands read and write: the goatbeat database they work on
(:func:`target_url`, :func:`open_target_store`, printed first as ``target: ...``), the celery
sources they read (:func:`source_options`, :func:`collect_entries`), and the app's allow-list
check for what they import. Used by ``import_celery_beat``, ``diff``, ``export_last_runs``,
``cutover`` and ``export``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from goatbeat.cli.context import CliContext
from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.conversion import describe_exception
from goatbeat.core.errors import GoatbeatError, InvalidValue, StoreError
from goatbeat.core.store import ScheduleStore
from goatbeat.stores import open_store, redact_url

# The importers, the diff and the Django project's sources (goatbeat.django.beat_sources, which
# reads celery's beat_schedule) are imported by the commands that use them: every other command
# (the scheduler first) starts without them.
if TYPE_CHECKING:
    from goatbeat.importers.entries import SourceEntry


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


def require_a_source(
    from_app: str | None, from_dcb: str | None, from_redbeat: str | None, nothing: str
) -> None:
    """UserError ``nothing`` when no source is named and this is no Django project (whose
    own schedules are the default source)."""
    from goatbeat.django import beat_sources

    if (
        not from_app
        and from_dcb is None
        and from_redbeat is None
        and not beat_sources.in_django_project()
    ):
        raise UserError(nothing)


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
