"""``goatbeat demo``: run the scheduler on the example app, printing every fire as it happens.

Without ``--app`` it uses :data:`DEMO_APP` on a throwaway database; the events a person
watching cares about (fires, leadership, failures) become one readable line each.

It never runs on a Django project: the demo becomes leader and fires every due schedule, which
on a project's database means its real tasks. ``manage.py goatbeat demo`` is refused, and the
standalone command ignores ``DJANGO_SETTINGS_MODULE`` (it takes ``--app`` or the example).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import click

from goatbeat.cli.context import cli_context, open_app
from goatbeat.cli.errors import UserError
from goatbeat.cli.logs import quiet_cli_handlers
from goatbeat.cli.output import iso, store_info, table
from goatbeat.core.model import Schedule
from goatbeat.core.observability import logger

__all__ = ["DEMO_APP", "demo"]

DEMO_APP = "examples.demo:beat"


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
                f"at {iso(fields.get('scheduled_at'))}  {late_text}"
            )
        elif event == "lease.acquired":
            self.out(f"{clock}  this process leads (fencing token {fields.get('fencing_token')})")
        elif event in ("occurrence.submit_failed", "occurrence.submit_retry", "scheduler.error"):
            self.out(f"{clock}  {event}  {fields.get('schedule', '')}  {fields.get('error')}")
        elif event == "occurrence.finished" and not fields.get("succeeded"):
            self.out(f"{clock}  task of {fields.get('schedule')} failed: {fields.get('error')}")
        elif event == "occurrence.missed":
            self.out(f"{clock}  {fields.get('missed')} late occurrence(s) skipped by policy")


@click.command()
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
    obj = cli_context(ctx)
    if obj.django:
        raise UserError(
            "demo is not available in a Django project: it would lead this project's "
            "scheduler and fire its real tasks on its database. Run `goatbeat demo` outside "
            "the project, or `manage.py goatbeat scheduler --once` for one real iteration"
        )
    # The printer below covers what a watcher wants; stderr keeps only real errors.
    quiet_cli_handlers(logging.ERROR)
    with open_app(ctx, fallback=DEMO_APP, allow_django=False) as app:
        app.migrate()
        app.publish()
        rows = [s for s in app.store.list_schedules() if isinstance(s, Schedule)]
        out = click.echo
        out(f"goatbeat demo: {obj.app_label} on {store_info(app.store)}")
        out(
            table(
                ["SCHEDULE", "TRIGGER", "NEXT RUN"],
                [
                    [s.name, s.trigger.describe(), iso(s.next_run_at) if s.next_run_at else "-"]
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
