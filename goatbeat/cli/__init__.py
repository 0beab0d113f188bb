"""The ``goatbeat`` command (click). ``main()`` is the console-script entry point.

::

    goatbeat [--app module:attr] [--database URL] [--log-format text|json] [--log-level LEVEL]
        migrate                                       cli/scheduler.py
        scheduler [--once] [--scheduler-id ID] [--lease-ttl 30s] [--lease-renew-interval 10s]
                  [--max-sleep 60s] [--claim-ahead 250ms] [--batch-size 500] [--no-publish]
                  [--metrics-port 9464] [--metrics-address ADDR] [--metrics-schedules 500]
                  [--health-port PORT] [--liveness-timeout 90s]
        status [--json] [--check] [--max-lag 60s]   lease, schedulers, backlog  cli/status.py
        publish [--dry-run]         publish code schedules, saying what changed  cli/publish.py
        schedule list [--json] [--no-publish]  publish code schedules, then list every one
        schedule show NAME [--count N] [--json]                          cli/schedules.py
        schedule run NAME           ask the leader for an extra run now
        schedule prune [--dry-run]  disable code schedules no longer declared
        schedule delete NAME [--yes]  delete one (not a code schedule still declared)
        schedule add NAME --task T (--cron|--every|--at|--solar) [options] [--json]
        schedule edit NAME [options] [--json]  not a code schedule     cli/control.py
        schedule enable|disable NAME [--json]
        schedule pause NAME [--note TEXT] [--by WHO] [--json]
        schedule resume NAME [--catch-up|--from-now] [--json]
        schedule backfill NAME --from I --to I [--limit N] [--dry-run] [--json]
        import_celery_beat ...      celery beat's schedules into goatbeat    cli/migration.py
        import redbeat ...          celery-redbeat's Redis keys into goatbeat
        diff ...                    do old and new fire at the same instants?    cli/diff.py
        export_last_runs ...        goatbeat's last runs back to celery beat (rollback)
                                                                          cli/last_runs.py
        cutover ...                 check, stop the old beat, import, start goatbeat  cli/cutover.py
        export --to beat-schedule|django-celery-beat ...  the schedules themselves back to
                                    celery beat, edits included (rollback)   cli/export.py
        demo [--duration SECONDS]   run the example app, printing fires live  cli/demo.py

This module holds the group, its options and the registration of each command module. Which app
a command works on is :mod:`goatbeat.cli.context`; one-line errors, :mod:`goatbeat.cli.errors`;
JSON and tables, :mod:`goatbeat.cli.output`; the log handler, :mod:`goatbeat.cli.logs`.

User mistakes (an app that cannot be imported, an unknown schedule, a bad URL, an invalid
declaration) print ONE line, ``goatbeat: error: ...``, and exit with status 2; a failing store
exits with 1. SIGTERM and SIGINT stop the scheduler gracefully (lease released), exit 0.

Adding a command. A command of goatbeat's own goes in the module of its group (or a new module),
and is registered below. Commands listed in :data:`EXTRA_COMMANDS` (name -> ``"module:attribute"``)
are imported only when invoked or listed, and silently left out when their module is absent, so
optional toolkits plug in without ``goatbeat.cli`` importing them. A command finds the app with
``ctx.find_object(CliContext).app()`` (or ``.store()``), and raises :class:`UserError` (or any
``GoatbeatError``) to report a mistake in one line. Django's management command reuses the
group: ``cli.main(args, obj=CliContext(django=True, verbosity=...))``; the group then hides and
refuses ``--app`` and ``demo`` (``--database`` is the target, as everywhere), and lists Django's options in its help.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from goatbeat.cli import (
    control,
    cutover,
    demo,
    diff,
    export,
    last_runs,
    migration,
    publish,
    scheduler,
    schedules,
    status,
)
from goatbeat.cli.context import BeatLike, CliContext
from goatbeat.cli.errors import OperationalError, UserError, translate
from goatbeat.cli.logs import configure_logging, remove_cli_handlers

__all__ = [
    "DJANGO_OPTIONS_HELP",
    "cli",
    "main",
    "CliContext",
    "BeatLike",
    "UserError",
    "OperationalError",
    "EXTRA_COMMANDS",
]

EXTRA_COMMANDS: dict[str, str] = {}
"""Commands other packages contribute, loaded lazily: name -> ``"module:attribute"``."""

_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_CHATTY = frozenset({"scheduler", "demo"})
_VERBOSITY_LEVELS = {0: "ERROR", 2: "INFO", 3: "DEBUG"}
"""Django's ``-v``: 1 keeps the command's default level."""
_NOT_UNDER_DJANGO = frozenset({"app_spec", "listen_database", "pooled"})
"""Group options ``manage.py goatbeat`` hides and refuses: the app and its database are the
Django project's."""
DJANGO_OPTIONS_HELP = [
    ("--settings MODULE", "The Django settings module (else DJANGO_SETTINGS_MODULE)."),
    ("--pythonpath DIR", "A directory to add to the Python path."),
    (
        "-v, --verbosity {0,1,2,3}",
        "goatbeat's log level: 0 errors only, 1 the command's default, 2 INFO, 3 DEBUG "
        "(--log-level wins).",
    ),
    ("--no-color, --force-color", "Plain or coloured output."),
    ("--traceback", "Show the traceback of an error instead of one line."),
    ("--skip-checks", "Do not run Django's system checks first."),
]
"""Django's standard options, as ``manage.py goatbeat`` takes them (anywhere on the line)."""


def _django(ctx: click.Context) -> bool:
    obj = ctx.find_object(CliContext)
    return obj is not None and obj.django


class _Group(click.Group):
    """A group that turns goatbeat's errors into one line and loads EXTRA_COMMANDS lazily."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            translated = translate(exc)
            if translated is None:
                raise
            obj = ctx.find_object(CliContext)
            if obj is not None and obj.traceback:
                raise  # Django's --traceback: the error as raised
            raise translated from None

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = list(super().get_params(ctx))
        if not _django(ctx):
            return params
        # Still parsed, so that giving one is refused with the reason rather than "no such
        # option"; left out of the help.
        hidden = []
        for param in params:
            if param.name in _NOT_UNDER_DJANGO and isinstance(param, click.Option):
                param = copy.copy(param)
                param.hidden = True
            hidden.append(param)
        return hidden

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        if _django(ctx):
            with formatter.section("Django options (anywhere on the line)"):
                formatter.write_dl(DJANGO_OPTIONS_HELP)

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(super().list_commands(ctx))
        names += [n for n in EXTRA_COMMANDS if n not in names and _extra(n) is not None]
        if _django(ctx):
            names = [n for n in names if n != "demo"]  # refused there (cli/demo.py says why)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in EXTRA_COMMANDS:
            command = _extra(cmd_name)
        return command


def _print_version(ctx: click.Context, value: bool) -> None:
    """``goatbeat 0.7.0 (schema 7)``: the release, and the schema version its tables must be
    at (``goatbeat migrate`` / ``manage.py migrate``); CHANGELOG.md says what each needs."""
    if not value or ctx.resilient_parsing:
        return
    from goatbeat import __version__
    from goatbeat.stores import schema

    click.echo(f"goatbeat {__version__} (schema {schema.latest_version('postgres')})")
    ctx.exit()


def _extra(name: str) -> click.Command | None:
    module_name, _, attr = EXTRA_COMMANDS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return None  # the contributing package is not there (yet)
        raise
    command = getattr(module, attr, None)
    return command if isinstance(command, click.Command) else None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--app", "app_spec", metavar="MODULE:ATTR", help="The Beat to use (env GOATBEAT_APP)."
)
@click.option("--database", metavar="URL", help="sqlite:///x.db, memory://, postgresql://...")
@click.option(
    "--listen-database",
    metavar="URL",
    envvar="GOATBEAT_LISTEN_DATABASE",
    help="PostgreSQL reached directly, for LISTEN, when --database goes through PgBouncer "
    "in transaction mode (implies --pooled; env GOATBEAT_LISTEN_DATABASE).",
)
@click.option(
    "--pooled",
    is_flag=True,
    default=False,
    envvar="GOATBEAT_POOLED",
    help="--database goes through a transaction-pooling proxy (PgBouncer): no LISTEN on it; "
    "without --listen-database the scheduler polls (env GOATBEAT_POOLED).",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default=None,
    help="Default: INFO for the commands that keep running (scheduler), WARNING for the others.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, value: _print_version(ctx, value),
    help="Show goatbeat's version and the schema version it needs, and exit.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    app_spec: str | None,
    database: str | None,
    listen_database: str | None,
    pooled: bool,
    log_format: str,
    log_level: str | None,
) -> None:
    """goatbeat: periodic tasks, claimed at most once, dispatched at least once."""
    existing = ctx.find_object(CliContext)
    explicit = log_level is not None
    if log_level is None and existing is not None and existing.verbosity in _VERBOSITY_LEVELS:
        log_level, explicit = _VERBOSITY_LEVELS[existing.verbosity], True
    if log_level is None:
        # Operator commands stay quiet on stderr unless something is wrong.
        log_level = "INFO" if ctx.invoked_subcommand in _CHATTY else "WARNING"
    level = log_level.upper()
    if existing is None:
        ctx.obj = existing = CliContext(
            app=app_spec,
            database=database,
            listen_database=listen_database,
            pooled=pooled,
            log_format=log_format,
            log_level=level,
        )
    else:  # a caller (Django's management command) provided the context
        if existing.django and app_spec:
            raise UserError(
                "--app cannot be used with manage.py goatbeat: the app is this Django project "
                "(its schedules.py files); run the standalone goatbeat command for another app"
            )
        if existing.django and (listen_database or pooled):
            raise UserError(
                "--listen-database and --pooled cannot be used with manage.py goatbeat: set "
                "GOATBEAT['listen_database'] / GOATBEAT['pooled'] in the settings instead"
            )
        existing.database = database or existing.database
        existing.listen_database = listen_database or existing.listen_database
        existing.pooled = pooled or existing.pooled
        existing.log_format, existing.log_level = log_format, level
    existing.log_level_explicit = explicit
    previous_level = configure_logging(
        log_format, level, defer_to_project=existing.django, explicit=explicit
    )
    ctx.call_on_close(lambda: remove_cli_handlers(previous_level))


for _command in (
    scheduler.migrate,
    scheduler.scheduler,
    publish.publish,
    schedules.schedule,
    status.status,
    migration.import_celery_beat,
    migration.import_group,
    diff.diff,
    last_runs.export_last_runs,
    cutover.cutover,
    export.export,
    demo.demo,
):
    cli.add_command(_command)
for _command in control.COMMANDS:
    schedules.schedule.add_command(_command)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="goatbeat")
    raise SystemExit(0)  # click's standalone mode exits itself; this satisfies NoReturn
