"""The ``goatbeat`` command (click). ``main()`` is the console-script entry point.

::

    goatbeat [--app module:attr] [--database URL] [--log-format text|json] [--log-level LEVEL]
        migrate
        scheduler [--once] [--scheduler-id ID] [--lease-ttl 30s] [--lease-renew-interval 10s]
                  [--max-sleep 60s] [--claim-ahead 250ms] [--batch-size 500]
        schedule list [--json]      publish code schedules, then list every schedule
        schedule show NAME [--count N] [--json]
        schedule run NAME           ask the leader for an extra run now
        schedule prune              disable code schedules no longer declared
        demo [--duration SECONDS]   run the example app, printing fires live

Which app: ``--app``, else the ``GOATBEAT_APP`` environment variable, else — when
``DJANGO_SETTINGS_MODULE`` is set — the Django project (``goatbeat.django.cli_app()``), else a
bare app on ``--database`` (enough for ``migrate``, ``schedule list``...). The app is any
object with the :class:`BeatLike` surface; :class:`goatbeat.beat.Beat` is the plain-Python one.

User mistakes (an app that cannot be imported, an unknown schedule, a bad URL, an invalid
declaration) print ONE line, ``goatbeat: error: ...``, and exit with status 2; a failing store
exits with 1. SIGTERM and SIGINT stop the scheduler gracefully (lease released), exit 0.

Extending. The group is :data:`cli`. Commands listed in :data:`EXTRA_COMMANDS` (name ->
``"module:attribute"``) are imported only when invoked or listed, and silently left out when
their module is absent, so optional toolkits plug in without ``goatbeat.cli`` importing them.
An extra command finds the app with ``ctx.find_object(CliContext).app()`` (or ``.store()``),
and raises :class:`UserError` (or any ``GoatbeatError``) to report a mistake in one line.
Django's management command may reuse the group: ``cli.main(args, obj=CliContext(app=...))``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any, NoReturn, Protocol, runtime_checkable

import click

from goatbeat.core.errors import (
    ConfigError,
    GoatbeatError,
    InvalidValue,
    NotFound,
    StoreError,
)
from goatbeat.core.model import DamagedSchedule, Execution, Schedule
from goatbeat.core.observability import JsonFormatter, log_event, logger
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import PublishResult, ScheduleStore

__all__ = [
    "cli",
    "main",
    "CliContext",
    "BeatLike",
    "UserError",
    "OperationalError",
    "EXTRA_COMMANDS",
]

EXTRA_COMMANDS: dict[str, str] = {
    "import_celery_beat": "goatbeat.importers.cli:import_celery_beat",
    "diff": "goatbeat.diff:diff_command",
}
"""Commands other packages contribute, loaded lazily: name -> ``"module:attribute"``."""

DEMO_APP = "examples.demo:beat"


@runtime_checkable
class BeatLike(Protocol):
    """What the CLI needs from an app (``goatbeat.beat.Beat``; Django's ``cli_app()``)."""

    @property
    def store(self) -> ScheduleStore: ...

    @property
    def schedules(self) -> list[Schedule]: ...

    def migrate(self) -> None: ...

    def publish(self) -> PublishResult: ...

    def prune(self) -> list[str]: ...

    def scheduler(self, **overrides: Any) -> Scheduler: ...

    def close(self) -> None: ...


class UserError(click.ClickException):
    """A mistake the user can fix: printed as one line, exit status 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"goatbeat: error: {self.format_message()}", file=file, err=True)


class OperationalError(UserError):
    """Not the user's mistake (the store is unreachable...): one line too, exit status 1."""

    exit_code = 1


_USER_MISTAKES: tuple[type[BaseException], ...] = (InvalidValue, ConfigError, NotFound)


def _translate(exc: BaseException) -> UserError | None:
    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, _USER_MISTAKES):
        return UserError(str(exc))
    if isinstance(exc, GoatbeatError):
        return OperationalError(f"{type(exc).__name__}: {exc}")
    return None


class _Group(click.Group):
    """A group that turns goatbeat's errors into one line and loads EXTRA_COMMANDS lazily."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            translated = _translate(exc)
            if translated is None:
                raise
            raise translated from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(super().list_commands(ctx))
        if self is cli:
            names += [n for n in EXTRA_COMMANDS if n not in names and _extra(n) is not None]
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and self is cli and cmd_name in EXTRA_COMMANDS:
            command = _extra(cmd_name)
        return command


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


# -- the app -------------------------------------------------------------------------------------


class CliContext:
    """Options of the group, and the app loaded on first use."""

    def __init__(
        self,
        *,
        app: str | BeatLike | None = None,
        database: str | None = None,
        log_format: str = "text",
        log_level: str = "INFO",
    ) -> None:
        self.app_spec = app
        self.database = database
        self.log_format = log_format
        self.log_level = log_level
        self._app: BeatLike | None = app if isinstance(app, BeatLike) else None
        self.app_label = app if isinstance(app, str) else None

    def app(self, *, fallback: str | None = None) -> BeatLike:
        if self._app is None:
            self._app = self._load(fallback)
            if self.database:
                use = getattr(self._app, "use_database", None)
                if not callable(use):
                    raise UserError("--database cannot be used with this app")
                use(self.database)
        return self._app

    def store(self) -> ScheduleStore:
        return self.app().store

    def close(self) -> None:
        if self._app is not None:
            self._app.close()

    def _load(self, fallback: str | None) -> BeatLike:
        spec = self.app_spec if isinstance(self.app_spec, str) else None
        spec = spec or os.environ.get("GOATBEAT_APP") or None
        if spec:
            self.app_label = spec
            return load_app(spec)
        if os.environ.get("DJANGO_SETTINGS_MODULE"):
            self.app_label = f"Django project {os.environ['DJANGO_SETTINGS_MODULE']}"
            return _django_app()
        if fallback:
            self.app_label = fallback
            return load_app(fallback)
        if self.database:
            from goatbeat.beat import Beat

            self.app_label = self.database
            return Beat(self.database)
        raise UserError(
            "no app: pass --app module:attribute (or set GOATBEAT_APP), "
            "or --database URL to work on a database directly"
        )


def load_app(spec: str) -> BeatLike:
    """Import ``"package.module:attribute"`` (attribute defaults to ``beat``)."""
    module_name, _, attr = spec.partition(":")
    attr = attr or "beat"
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise UserError(f"--app {spec!r} is not 'package.module:attribute'")
    # As `celery -A` does: the project is where the command runs, even when the console
    # script's own directory (not the current one) heads sys.path.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            raise UserError(f"--app {spec!r}: no module named {exc.name!r}") from None
        raise UserError(f"--app {spec!r}: importing {module_name!r} failed: {exc}") from None
    except GoatbeatError as exc:
        raise UserError(f"--app {spec!r}: {exc}") from None
    except Exception as exc:
        raise UserError(
            f"--app {spec!r}: importing {module_name!r} failed: {_where(exc)}"
        ) from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UserError(
            f"--app {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not isinstance(obj, BeatLike) and callable(obj) and not isinstance(obj, type):
        try:
            obj = obj()  # a factory returning the app
        except Exception as exc:
            raise UserError(f"--app {spec!r}: calling {attr!r} failed: {_where(exc)}") from None
    if not isinstance(obj, BeatLike):
        raise UserError(f"--app {spec!r}: {repr(obj)[:80]} is not a goatbeat Beat")
    return obj


def _django_app() -> BeatLike:
    try:
        from goatbeat.django import cli_app
    except ImportError as exc:
        raise UserError(
            f"DJANGO_SETTINGS_MODULE is set but the Django app cannot be loaded ({exc}); "
            "install goatbeat[django] or pass --app"
        ) from None
    try:
        app: BeatLike = cli_app()
    except Exception as exc:  # ImproperlyConfigured, a schedules.py that fails...
        raise UserError(f"the Django project cannot be loaded: {_where(exc)}") from None
    return app


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    place = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{place}"


def _obj(ctx: click.Context) -> CliContext:
    obj = ctx.find_object(CliContext)
    assert obj is not None
    return obj


@contextmanager
def _app(ctx: click.Context, *, fallback: str | None = None) -> Iterator[BeatLike]:
    obj = _obj(ctx)
    try:
        yield obj.app(fallback=fallback)
    finally:
        obj.close()


# -- logging -------------------------------------------------------------------------------------


class TextFormatter(logging.Formatter):
    """``2026-12-01 08:00:00Z INFO occurrence.submitted schedule=x idempotency_key=...``"""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%d %H:%M:%S")
        parts = [f"{stamp}Z", f"{record.levelname:<7}", record.getMessage()]
        fields = getattr(record, "goatbeat", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                if value is not None:
                    parts.append(f"{key}={_text_value(value)}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    if isinstance(value, datetime):
        return _iso(value).replace(" ", "T")
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_text_value(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    text = (
        str(value.value) if hasattr(value, "value") and not isinstance(value, str) else str(value)
    )
    return json.dumps(text) if (" " in text or not text) else text


def _configure_logging(fmt: str, level: str) -> int:
    """Attach the CLI's handler; returns the logger's previous level."""
    previous = logger.level
    for handler in list(logger.handlers):
        if getattr(handler, "_goatbeat_cli", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler._goatbeat_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    return previous


def _remove_cli_handlers(previous_level: int) -> None:
    # Called when the command ends, so an embedding process (tests, Django) keeps no handler
    # bound to a stream that may be gone.
    for handler in list(logger.handlers):
        if getattr(handler, "_goatbeat_cli", False):
            logger.removeHandler(handler)
    logger.setLevel(previous_level)


# -- the group -----------------------------------------------------------------------------------

_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_CHATTY = frozenset({"scheduler", "demo"})


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--app", "app_spec", metavar="MODULE:ATTR", help="The Beat to use (env GOATBEAT_APP)."
)
@click.option("--database", metavar="URL", help="sqlite:///x.db, memory://, postgresql://...")
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default=None,
    help="Default: INFO for scheduler and demo, WARNING for the other commands.",
)
@click.version_option(package_name="goatbeat", prog_name="goatbeat")
@click.pass_context
def cli(
    ctx: click.Context,
    app_spec: str | None,
    database: str | None,
    log_format: str,
    log_level: str | None,
) -> None:
    """goatbeat: periodic tasks, claimed at most once, dispatched at least once."""
    if log_level is None:
        # Operator commands stay quiet on stderr unless something is wrong.
        log_level = "INFO" if ctx.invoked_subcommand in _CHATTY else "WARNING"
    existing = ctx.find_object(CliContext)
    if existing is None:
        ctx.obj = CliContext(
            app=app_spec, database=database, log_format=log_format, log_level=log_level.upper()
        )
    else:  # a caller (Django's management command) provided the app
        existing.database = database or existing.database
    previous_level = _configure_logging(log_format, log_level.upper())
    ctx.call_on_close(lambda: _remove_cli_handlers(previous_level))


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade goatbeat's tables (idempotent)."""
    with _app(ctx) as app:
        app.migrate()
        info = _info(app.store)
        click.echo(f"goatbeat: schema up to date ({info})")


def _duration_option(name: str, help_text: str) -> Callable[[Callable[..., Any]], Any]:
    return click.option(name, default=None, metavar="DURATION", help=help_text)


@cli.command()
@click.option("--once", is_flag=True, help="Run a single iteration, then release the lease.")
@click.option("--scheduler-id", default=None, help="Name in the lease and the executions.")
@_duration_option("--lease-ttl", "Lease time-to-live (default 30s).")
@_duration_option("--lease-renew-interval", "Renew the lease this often (default 10s).")
@_duration_option("--max-sleep", "Longest sleep between iterations (default 60s).")
@_duration_option(
    "--claim-ahead",
    "Claim this long before an occurrence's instant, submit at the instant (default 250ms; "
    "0 to claim only what is due).",
)
@click.option("--batch-size", type=int, default=None, help="Claims per transaction (500).")
@click.pass_context
def scheduler(
    ctx: click.Context,
    once: bool,
    scheduler_id: str | None,
    lease_ttl: str | None,
    lease_renew_interval: str | None,
    max_sleep: str | None,
    claim_ahead: str | None,
    batch_size: int | None,
) -> None:
    """Publish code schedules, then run the scheduler until SIGTERM/SIGINT."""
    overrides = {
        key: value
        for key, value in (
            ("scheduler_id", scheduler_id),
            ("lease_ttl", lease_ttl),
            ("lease_renew_interval", lease_renew_interval),
            ("max_sleep", max_sleep),
            ("claim_ahead", claim_ahead),
            ("batch_size", batch_size),
        )
        if value is not None
    }
    with _app(ctx) as app:
        loop = app.scheduler(**overrides)  # validates the options before anything is written
        if once:
            app.publish()
        else:
            _publish_when_reachable(app)
        if once:
            try:
                result = loop.run_once()
            finally:
                loop.release()
            summary = {
                k: v for k, v in dataclasses.asdict(result).items() if v not in (None, 0, False)
            }
            click.echo(json.dumps({"leader": result.leader, **summary}, default=str))
            if result.error:
                raise OperationalError(f"store error: {result.error}")
            return
        loop.run()


def _publish_when_reachable(app: Any) -> None:
    """Publish code schedules, waiting out a database that is down at start-up (a replica
    restarted during an outage must back off like a running one, not exit)."""
    delay = 0.5
    while True:
        try:
            app.publish()
            return
        except StoreError as exc:
            log_event(
                "scheduler.error",
                level=logging.WARNING,
                stage="publish",
                error=str(exc),
                retry_in=delay,
            )
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


# -- schedule ------------------------------------------------------------------------------------


@cli.group(cls=_Group)
def schedule() -> None:
    """Inspect and operate schedules."""


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array with every field.")
@click.pass_context
def schedule_list(ctx: click.Context, as_json: bool) -> None:
    """Publish code schedules, then list every schedule (damaged rows included, marked)."""
    with _app(ctx) as app:
        app.publish()
        rows = app.store.list_schedules()
        if as_json:
            click.echo(json.dumps([stored_to_json(s) for s in rows], indent=2))
            return
        if not rows:
            click.echo("no schedules")
            return
        table = [
            [
                s.name,
                str(s.source),
                s.trigger.describe() if isinstance(s, Schedule) else f"DAMAGED ({s.column})",
                "yes" if s.enabled else "no",
                _iso(s.next_run_at) if s.next_run_at else "-",
                s.last_status or "-",
                str(s.missed_count),
            ]
            for s in rows
        ]
        header = ["NAME", "SOURCE", "TRIGGER", "ENABLED", "NEXT RUN", "LAST STATUS", "MISSED"]
        click.echo(_table(header, table))
        damaged = [s for s in rows if isinstance(s, DamagedSchedule)]
        if damaged:
            click.echo(f"{len(damaged)} damaged schedule(s), not scheduled until repaired:")
            click.echo("\n".join(f"  {d.name}: {d.describe()}" for d in damaged))


@schedule.command("show")
@click.argument("name")
@click.option("--count", default=5, show_default=True, type=click.IntRange(0, 1000))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedule_show(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """A schedule's definition, its next fire times and recent executions."""
    with _app(ctx) as app:
        app.publish()
        store = app.store
        sched = store.get(name)
        recent = store.executions(name=name, limit=10)
        if isinstance(sched, DamagedSchedule):
            _show_damaged(sched, recent, as_json=as_json)
            return
        upcoming = next_fire_times(sched, count, store.now())
        if as_json:
            data = schedule_to_json(sched)
            data["upcoming"] = [_iso(t) for t in upcoming]
            data["executions"] = [execution_to_json(e) for e in recent]
            click.echo(json.dumps(data, indent=2))
            return
        lines = [
            f"{sched.name}  ({sched.source.value}, {'enabled' if sched.enabled else 'disabled'})",
            f"  task:       {sched.task}",
            f"  trigger:    {sched.trigger.describe()}",
        ]
        if sched.args:
            lines.append(f"  args:       {json.dumps(list(sched.args))}")
        if sched.kwargs:
            lines.append(f"  kwargs:     {json.dumps(dict(sched.kwargs))}")
        routing = {k: v for k, v in sched.routing.to_dict().items() if v not in (None, {})}
        if routing:
            lines.append(f"  routing:    {json.dumps(routing)}")
        lines.append(
            f"  misfire:    {sched.misfire.value}, grace {sched.misfire_grace.total_seconds():g}s"
            + (
                f", catch-up limit {sched.catch_up_limit}"
                if sched.misfire.value == "run_all"
                else ""
            )
        )
        if sched.start_at or sched.end_at:
            lines.append(f"  window:     {_iso(sched.start_at)} .. {_iso(sched.end_at)}")
        if sched.description:
            lines.append(f"  about:      {sched.description}")
        lines.append(
            f"  runs:       {sched.total_run_count} claimed, {sched.missed_count} missed, "
            f"last {_iso(sched.last_run_at) if sched.last_run_at else '-'} "
            f"({sched.last_status or 'never'})"
        )
        lines.append(f"next {count} fire times:" if upcoming else "next fire times: none")
        lines += [f"  {_iso(t)}" for t in upcoming]
        if recent:
            lines.append("recent executions:")
            table = [
                [
                    _iso(e.scheduled_at),
                    e.kind.value,
                    e.status.value,
                    str(e.attempts),
                    e.scheduler_id or "-",
                    (e.error or "")[:60],
                ]
                for e in recent
            ]
            header = ["SCHEDULED AT", "KIND", "STATUS", "ATTEMPTS", "SCHEDULER", "ERROR"]
            lines.append(_table(header, table, indent="  "))
        else:
            lines.append("recent executions: none")
        click.echo("\n".join(lines))


@schedule.command("run")
@click.argument("name")
@click.pass_context
def schedule_run(ctx: click.Context, name: str) -> None:
    """Ask the leader for an extra run of NAME now."""
    with _app(ctx) as app:
        app.publish()
        run_now = getattr(app, "run_now", None)
        execution = run_now(name) if callable(run_now) else app.store.request_run(name)
        click.echo(
            f"goatbeat: run of {name!r} requested ({execution.idempotency_key}); "
            "the leading scheduler submits it on its next iteration"
        )


@schedule.command("prune")
@click.pass_context
def schedule_prune(ctx: click.Context) -> None:
    """Disable code schedules that are no longer declared (never deletes)."""
    with _app(ctx) as app:
        app.publish()
        names = app.prune()
        if names:
            click.echo("disabled: " + ", ".join(names))
        else:
            click.echo("nothing to prune")


# -- demo ----------------------------------------------------------------------------------------


class _DemoPrinter(logging.Handler):
    """Prints the events a person watching the demo cares about, one readable line each."""

    def __init__(self, out: Callable[[str], None]) -> None:
        super().__init__(logging.DEBUG)
        self.out = out
        self.fired = 0

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "goatbeat", None)
        if not isinstance(fields, dict):
            return
        event = record.getMessage()
        clock = datetime.now(UTC).strftime("%H:%M:%S")
        if event == "occurrence.submitted" and "count" in fields:  # a burst, summarised
            self.fired += int(fields["count"])
            self.out(
                f"{clock}  fired  {fields['count']} occurrences of {fields['schedules']} schedules"
            )
        elif event == "occurrence.submitted":
            self.fired += 1
            late = fields.get("lateness")
            late_text = f"{late * 1000:.0f} ms late" if isinstance(late, float) else ""
            kind = " (manual run)" if str(fields.get("kind")) == "manual" else ""
            self.out(
                f"{clock}  fired  {fields.get('schedule')}{kind}  "
                f"at {_iso(fields.get('scheduled_at'))}  {late_text}"
            )
        elif event == "lease.acquired":
            self.out(f"{clock}  this process leads (fencing token {fields.get('fencing_token')})")
        elif event in ("occurrence.submit_failed", "occurrence.submit_retry", "scheduler.error"):
            self.out(f"{clock}  {event}  {fields.get('schedule', '')}  {fields.get('error')}")
        elif event == "occurrence.finished" and not fields.get("succeeded"):
            self.out(f"{clock}  task of {fields.get('schedule')} failed: {fields.get('error')}")
        elif event == "occurrence.missed":
            self.out(f"{clock}  {fields.get('missed')} late occurrence(s) skipped by policy")


@cli.command()
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop after this long (default: until Ctrl-C).",
)
@click.pass_context
def demo(ctx: click.Context, duration: float | None) -> None:
    """Run the scheduler on the example app, printing every fire as it happens."""
    obj = _obj(ctx)
    for handler in list(logger.handlers):
        if getattr(handler, "_goatbeat_cli", False):
            # The printer below covers what a watcher wants; stderr keeps only real errors.
            handler.setLevel(logging.ERROR)
    with _app(ctx, fallback=DEMO_APP) as app:
        app.migrate()
        app.publish()
        rows = [s for s in app.store.list_schedules() if isinstance(s, Schedule)]
        out = click.echo
        out(f"goatbeat demo: {obj.app_label} on {_info(app.store)}")
        out(
            _table(
                ["SCHEDULE", "TRIGGER", "NEXT RUN"],
                [
                    [s.name, s.trigger.describe(), _iso(s.next_run_at) if s.next_run_at else "-"]
                    for s in rows
                    if s.enabled
                ],
                indent="  ",
            )
        )
        stop_hint = f"stopping after {duration:g}s" if duration else "Ctrl-C to stop"
        out(f"running; task output and fires appear below ({stop_hint})")
        printer = _DemoPrinter(lambda line: click.echo(line))
        logger.addHandler(printer)
        if logger.level > logging.INFO or logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        stop = threading.Event()
        timer = threading.Timer(duration, stop.set) if duration else None
        started = time.monotonic()
        try:
            if timer is not None:
                timer.daemon = True
                timer.start()
            app.scheduler(max_sleep="1s").run(stop=stop)
        finally:
            if timer is not None:
                timer.cancel()
            logger.removeHandler(printer)
        out(f"stopped after {time.monotonic() - started:.1f}s: {printer.fired} fire(s)")
        label = obj.app_label or DEMO_APP
        out(f"look around: goatbeat --app {label} schedule list   |   ... schedule show NAME")


# -- formatting helpers ----------------------------------------------------------------------------


def next_fire_times(sched: Schedule, count: int, now: datetime) -> list[datetime]:
    """The next ``count`` fire instants of ``sched`` from its ``next_run_at`` (or ``now``)."""
    result: list[datetime] = []
    t = sched.next_run_at
    if t is None:
        if not sched.enabled:
            return result
        t = sched.first_run_after(now)
    while t is not None and len(result) < count:
        result.append(t)
        t = sched.first_run_after(t)
    return result


def schedule_to_json(s: Schedule) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "source": s.source.value,
        "task": s.task,
        "trigger": s.trigger.to_spec(),
        "trigger_description": s.trigger.describe(),
        "timezone": s.timezone,
        "args": list(s.args),
        "kwargs": dict(s.kwargs),
        **s.routing.to_dict(),
        "misfire": s.misfire.value,
        "misfire_grace": s.misfire_grace.total_seconds(),
        "catch_up_limit": s.catch_up_limit,
        "start_at": _iso_or_none(s.start_at),
        "end_at": _iso_or_none(s.end_at),
        "one_off": s.one_off,
        "description": s.description,
        "enabled": s.enabled,
        "next_run_at": _iso_or_none(s.next_run_at),
        "last_run_at": _iso_or_none(s.last_run_at),
        "last_status": s.last_status,
        "total_run_count": s.total_run_count,
        "missed_count": s.missed_count,
        "version": s.version,
        "created_at": _iso_or_none(s.created_at),
        "updated_at": _iso_or_none(s.updated_at),
        "damaged": None,
    }


def stored_to_json(s: Schedule | DamagedSchedule) -> dict[str, Any]:
    """:func:`schedule_to_json`, or for a damaged row its state and ``damaged`` (column,
    value, detail) with every definition column as stored."""
    return schedule_to_json(s) if isinstance(s, Schedule) else s.to_dict()


def _show_damaged(d: DamagedSchedule, recent: Sequence[Execution], *, as_json: bool) -> None:
    if as_json:
        data = d.to_dict()
        data["upcoming"] = []
        data["executions"] = [execution_to_json(e) for e in recent]
        click.echo(json.dumps(data, indent=2))
        return
    state = "quarantined by the scheduler" if d.quarantined else "not scheduled"
    lines = [
        f"{d.name}  ({d.source}, {'enabled' if d.enabled else 'disabled'}) DAMAGED",
        f"  damaged:    {d.describe()}",
        f"  status:     {state} until repaired: save a valid definition (admin, import, "
        "redeploy of a code schedule) or delete it",
    ]
    lines += [f"  {k + ':':<11} {json.dumps(v, default=str)}" for k, v in d.columns.items()]
    lines.append(
        f"  runs:       {d.total_run_count} claimed, {d.missed_count} missed, "
        f"last {_iso(d.last_run_at) if d.last_run_at else '-'} ({d.last_status or 'never'})"
    )
    lines.append(f"recent executions: {len(recent) or 'none'}")
    lines += [f"  {_iso(e.scheduled_at)}  {e.status.value}  {(e.error or '')[:60]}" for e in recent]
    click.echo("\n".join(lines))


def execution_to_json(e: Execution) -> dict[str, Any]:
    return {
        "id": e.id,
        "schedule": e.schedule_name,
        "scheduled_at": _iso(e.scheduled_at),
        "idempotency_key": e.idempotency_key,
        "kind": e.kind.value,
        "status": e.status.value,
        "fencing_token": e.fencing_token,
        "scheduler_id": e.scheduler_id,
        "claimed_at": _iso_or_none(e.claimed_at),
        "submitted_at": _iso_or_none(e.submitted_at),
        "finished_at": _iso_or_none(e.finished_at),
        "attempts": e.attempts,
        "backend_task_id": e.backend_task_id,
        "error": e.error,
    }


def _iso(value: object) -> str:
    if not isinstance(value, datetime):
        return "-"
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ") + "Z"


def _iso_or_none(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> str:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [list(header), *rows]
    ]
    return "\n".join(lines)


def _info(store: ScheduleStore) -> str:
    try:
        info = store.info()
    except Exception:  # a description is not worth failing the command for
        return type(store).__name__
    text = str(info.get("kind") or type(store).__name__)
    if info.get("database"):
        text += f" {info['database']}"
    if info.get("schema_version"):
        text += f" (schema {info['schema_version']})"
    return text


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="goatbeat")
    raise SystemExit(0)  # click's standalone mode exits itself; this satisfies NoReturn
