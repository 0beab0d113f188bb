"""``goatbeat cutover``: the cutover of docs/migration in one bounded step (also as
``manage.py goatbeat cutover``).

::

    goatbeat [--database URL] cutover [the sources of import_celery_beat: --from-app,
        --from-django-celery-beat [URL], --last-runs JSON_FILE, --naive-timezone ZONE]
        (--stop-old-beat CMD | --old-beat-stopped | --check-only)
        [--start-goatbeat CMD] [--live-timeout 60s] [--horizon 1d] [--recheck-horizon 1h]
        [--accept-known-bugs] [--accept-refused NAME]... [--overwrite] [--json]

1. Refuses when a goatbeat scheduler already holds a lease on the target (nothing to cut over:
   goatbeat runs, and the old beat must not run beside it).
2. Reads the sources, plans the import without writing (:func:`~goatbeat.importers.entries.
   plan_import`, as ``import_celery_beat --dry-run``) and compares celery's side with the rows
   that import would leave (:func:`~goatbeat.diff.compute_diff`, as ``diff`` does). Refuses,
   having changed nothing, on a ``FAILED`` entry (or one the importer refuses, unless
   ``--accept-refused NAME``), a ``conflict``, an ``enabled`` difference or any other
   difference ``diff`` would exit 1 for. ``--check-only`` stops here: exit 0 or 1.
3. Stops the old beat: runs ``--stop-old-beat CMD`` (which must return once it is gone), or
   takes the operator's word (``--old-beat-stopped``).
4. Reads the sources again and imports for real: the last runs celery made since step 2 move
   each schedule's phase forward. Only the entries that changed since step 2 are compared
   again, over ``--recheck-horizon``: the gap is open.
5. Starts goatbeat (``--start-goatbeat CMD``, or prints the command to run) and waits up to
   ``--live-timeout`` for a scheduler to hold the lease; prints the gap, old beat stopped ->
   goatbeat leading, split into its parts.

Exit status: 0 handed over (``--check-only``: it would be); 1 refused, the old beat's stop
failed, or no scheduler took the lease in time (each says what state it leaves); 2 usage.
Which source is read is :class:`CutoverSource`; the checks are :func:`check_entries`
(both in :mod:`goatbeat.cli.cutover_checks`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from goatbeat.cli.context import CliContext
from goatbeat.cli.cutover_checks import (
    Check,
    CutoverSource,
    ImporterSource,
    changed_entries,
    check_entries,
    check_planned,
    held_leases,
    print_check,
)
from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.cli.sources import (
    Target,
    allow_list_check,
    checked_store,
    one_line,
    open_target_store,
    require_a_source,
    source_options,
    target_url,
)
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import iso_z

if TYPE_CHECKING:
    from goatbeat.importers.entries import SourceEntry

__all__ = ["CutoverSource", "ImporterSource", "Check", "check_entries", "cutover", "held_leases"]

_POLL = 0.05
"""Seconds between two looks at the lease while waiting for goatbeat to lead."""

_LEFT_RUNNING: list[subprocess.Popen[bytes]] = []
"""The ``--start-goatbeat`` processes still running when the cutover is over: the scheduler
goes on after this command (never waited for, never collected while this process lives)."""


@dataclass(slots=True)
class _Clock:
    """The gap's parts, each a (name, seconds, what) as it ends."""

    parts: list[tuple[str, float, str]] = field(default_factory=list)
    mark: float = field(default_factory=time.monotonic)

    def lap(self, name: str, what: str) -> None:
        now = time.monotonic()
        self.parts.append((name, now - self.mark, what))
        self.mark = now

    @property
    def total(self) -> float:
        return sum(p[1] for p in self.parts)


def _echo(as_json: bool, text: str) -> None:
    if not as_json:
        click.echo(text)


def _scheduler_command(ctx: click.Context, database: str | None) -> str:
    obj = ctx.find_object(CliContext)
    if obj is not None and obj.django:
        return "python manage.py goatbeat scheduler   (two or more replicas)"
    url = target_url(ctx, database)
    app = (obj.app_spec if obj is not None else None) or os.environ.get("GOATBEAT_APP")
    parts = ["goatbeat"]
    if isinstance(app, str) and app:
        parts += ["--app", app]
    if url:
        parts += ["--database", url]
    return shlex.join([*parts, "scheduler"]) + "   (two or more replicas)"


def _run_stop(command: str, timeout: float) -> tuple[int, str]:
    """Run the operator's stop command; (exit status, its output)."""
    try:
        done = subprocess.run(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return -1, f"still running after {timeout:g}s"
    return done.returncode, (done.stdout + done.stderr).strip()


@click.command("cutover")
@source_options("The goatbeat database to hand over to.")
@click.option(
    "--naive-timezone",
    default=None,
    help="Zone of naive datetimes in the tables (default UTC; Django: UTC when USE_TZ).",
)
@click.option(
    "--stop-old-beat",
    "stop_command",
    metavar="CMD",
    default=None,
    help="Shell command that stops the old beat with SIGTERM and returns once it is gone "
    "(for beat_schedule, then dumps its last runs to --last-runs FILE).",
)
@click.option(
    "--old-beat-stopped",
    is_flag=True,
    help="The old beat is stopped already (you stopped it): go on from the re-import.",
)
@click.option(
    "--check-only",
    is_flag=True,
    help="Only steps 1-2: the lease, the import and the diff checks; change nothing. "
    "Exit 0 when the cutover would go on, 1 when it would refuse.",
)
@click.option(
    "--start-goatbeat",
    "start_command",
    metavar="CMD",
    default=None,
    help="Shell command that starts goatbeat's scheduler (systemctl start ..., or the "
    "scheduler itself, left running); without it, the command to run is printed.",
)
@click.option(
    "--live-timeout",
    default="60s",
    show_default=True,
    help="How long to wait for a goatbeat scheduler to hold the lease.",
)
@click.option(
    "--stop-timeout",
    default="120s",
    show_default=True,
    help="How long --stop-old-beat may take.",
)
@click.option(
    "--horizon",
    default="1d",
    show_default=True,
    help="How far ahead the check compares (the rehearsal's diff covers more: 30d).",
)
@click.option(
    "--recheck-horizon",
    default="1h",
    show_default=True,
    help="How far ahead the entries changed since the check are compared again (in the gap).",
)
@click.option(
    "--accept-known-bugs",
    is_flag=True,
    help="Differences explained by a known celery bug (DST, day_of_week=7) do not refuse.",
)
@click.option(
    "--accept-refused",
    "accept_refused",
    metavar="NAME",
    multiple=True,
    help="An entry the importer refuses that you accept (it stays on celery beat). Repeatable.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace schedules edited in goatbeat since their import (else: a conflict refuses).",
)
@click.option(
    "--check-tasks/--no-check-tasks",
    default=True,
    help="Report entries whose task the Celery app does not register (default: on).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def cutover(
    ctx: click.Context,
    from_app: str | None,
    from_dcb: str | None,
    database: str | None,
    last_runs_file: str | None,
    naive_timezone: str | None,
    from_redbeat: str | None,
    redbeat_prefix: str | None,
    redbeat_timezone: str | None,
    stop_command: str | None,
    old_beat_stopped: bool,
    check_only: bool,
    start_command: str | None,
    live_timeout: str,
    stop_timeout: str,
    horizon: str,
    recheck_horizon: str,
    accept_known_bugs: bool,
    accept_refused: tuple[str, ...],
    overwrite: bool,
    check_tasks: bool,
    as_json: bool,
) -> None:
    """Hand over from celery beat to goatbeat in one step: check, stop the old beat, import
    its last runs, start goatbeat; print the gap."""
    from goatbeat.importers.entries import import_entries

    chosen = sum(bool(x) for x in (stop_command, old_beat_stopped, check_only))
    if chosen != 1:
        raise UserError(
            "say how the old beat stops: --stop-old-beat CMD, --old-beat-stopped, or "
            "--check-only (exactly one)"
        )
    if check_only and start_command:
        raise UserError("--start-goatbeat CMD: --check-only starts nothing")
    require_a_source(
        from_app,
        from_dcb,
        from_redbeat,
        "nothing to cut over: pass --from-app MODULE:APP and/or "
        "--from-django-celery-beat URL or --from-redbeat URL",
    )
    span = parse_duration(horizon, field="horizon")
    respan = parse_duration(recheck_horizon, field="recheck_horizon")
    live = parse_duration(live_timeout, field="live_timeout").total_seconds()
    stop_limit = parse_duration(stop_timeout, field="stop_timeout").total_seconds()
    source: CutoverSource = ImporterSource(
        from_app=from_app,
        from_dcb=from_dcb,
        last_runs_file=last_runs_file,
        naive_timezone=naive_timezone,
        check_tasks=check_tasks,
        from_redbeat=from_redbeat,
        redbeat_prefix=redbeat_prefix,
        redbeat_timezone=redbeat_timezone,
    )
    out: dict[str, Any] = {"check_only": check_only}
    check_task = allow_list_check(ctx)

    def read(stopped: bool) -> tuple[list[SourceEntry], list[str]]:
        try:
            return source.read(stopped=stopped)
        except click.ClickException:
            raise
        except (GoatbeatError, ImportError) as exc:
            raise UserError(f"cannot read the source: {one_line(exc)}") from None

    def finish(code: int) -> None:
        if as_json:
            click.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
        ctx.exit(code)

    with open_target_store(ctx, database) as target:
        out["target"] = target.label
        _echo(as_json, f"target: {target.label}{' (check only)' if check_only else ''}")
        store = checked_store(target, dry_run=True)

        # 1. Nobody leads in goatbeat yet.
        held = _leases(store, target)
        if held:
            name, holder, expires = held[0]
            raise OperationalError(
                f"a goatbeat scheduler already holds the lease {name!r} on {target.label} "
                f"(holder {holder}, expires {iso_z(expires)}): goatbeat runs there already, so "
                "the old beat must stay stopped and there is nothing to cut over; stop every "
                "goatbeat scheduler first to cut over again"
            )

        # 2. Plan the import, check it as diff does; nothing written.
        began = time.monotonic()
        entries, first_lines = read(False)
        for line in first_lines:
            _echo(as_json, f"read: {line}")
        check = check_planned(
            store,
            entries,
            source.sources,
            overwrite=overwrite,
            check_task=check_task,
            horizon=span,
            accept_known=accept_known_bugs,
            accept_refused=accept_refused,
        )
        out["check"] = check.to_dict()
        out["check"]["seconds"] = round(time.monotonic() - began, 3)
        print_check(as_json, check, "check", span)
        if not check.ok:
            _echo(as_json, "refused: nothing changed; the old beat still runs. Fix each "
                           "line above, then run cutover again")  # fmt: skip
            out["outcome"] = "refused"
            finish(1)
        if check_only:
            _echo(as_json, "check only: the cutover would go on; nothing changed")
            out["outcome"] = "checked"
            finish(0)

        # 3. Stop the old beat: the gap opens.
        clock = _Clock()
        if stop_command:
            _echo(as_json, f"stopping the old beat: {stop_command}")
            status, said = _run_stop(stop_command, stop_limit)
            if said:
                click.echo(said, err=True)
            if status != 0:
                out["outcome"] = "stop_failed"
                how = f"exit status {status}" if status >= 0 else said
                if as_json:
                    out["error"] = f"--stop-old-beat failed ({how})"
                    click.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
                raise OperationalError(
                    f"--stop-old-beat {stop_command!r} failed ({how}): "
                    "nothing imported, goatbeat not started; the old beat may still run: look "
                    "at it before anything else"
                )
            clock.lap("stop", "the --stop-old-beat command, until the old beat was gone")
        else:
            _echo(as_json, "the old beat is stopped (--old-beat-stopped): the gap before this "
                           "command is not counted")  # fmt: skip

        with _after_the_stop():
            # 4. Its last runs, imported for real; the changed entries checked again.
            again, lines = read(True)
            clock.lap("read", "the sources again, with the last runs celery made")
            for line in lines:
                if line not in first_lines:
                    _echo(as_json, f"read: {line}")
            real = checked_store(target, dry_run=False)
            report = import_entries(real, again, overwrite=overwrite, check_task=check_task)
            clock.lap("import", report.summary())
            changed = changed_entries(entries, again)
            names = {e.name for e in changed}
            # Only the changed entries are compared again; a failure or conflict anywhere in the
            # import refuses, changed or not.
            recheck = check_entries(
                changed,
                frozenset(),
                report=report,
                refused={e.name for e in again if e.problem is not None},
                rows=[s for s in real.list_schedules() if s.name in names],
                horizon=respan,
                accept_known=accept_known_bugs,
                accept_refused=[n for n in accept_refused if n in names],
            )
            clock.lap("recheck", f"{len(changed)} entr{'y' if len(changed) == 1 else 'ies'} "
                                 "changed since the check")  # fmt: skip
            out["recheck"] = recheck.to_dict()
            out["recheck"]["changed"] = sorted(names)
            for verb, names_ in (("create ", report.created), ("update ", report.updated),
                                 ("refresh", report.refreshed)):  # fmt: skip
                for name in names_:
                    _echo(as_json, f"{verb} {name}")
            print_check(as_json, recheck, "recheck", respan)
            if not recheck.ok:
                out["outcome"] = "refused_after_stop"
                _echo(as_json, "refused after the stop: the old beat is STOPPED and goatbeat is "
                               "NOT started. Fix each line above and start goatbeat, or start the "
                               "old beat again (nothing ran in goatbeat)")  # fmt: skip
                finish(1)

            # 5. goatbeat takes over.
            started: subprocess.Popen[bytes] | None = None
            if start_command:
                _echo(as_json, f"starting goatbeat: {start_command}")
                started = subprocess.Popen(
                    start_command, shell=True, stdin=subprocess.DEVNULL, start_new_session=True
                )
                out["started_pid"] = started.pid
            else:
                _echo(as_json, f"start goatbeat now: {_scheduler_command(ctx, database)}")
            clock.lap("start", "the --start-goatbeat command launched" if start_command
                      else "printing the command to run")  # fmt: skip
            leader = _wait_for_lease(real, target, live, started)
            if leader is None:
                out["outcome"] = "not_live"
                out["gap"] = _gap_dict(clock, done=False)
                why = ""
                if started is not None and started.poll() not in (None, 0):
                    why = f" (--start-goatbeat exited with status {started.returncode})"
                message = (
                    f"no goatbeat scheduler holds the lease on {target.label} after "
                    f"{live:g}s{why}: the old beat is STOPPED and goatbeat does not lead; look at "
                    "the scheduler's log and start it (or start the old beat again)"
                )
                if started is not None and started.poll() is None:
                    _LEFT_RUNNING.append(started)
                if as_json:
                    out["error"] = message
                    click.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
                raise OperationalError(message)
            clock.lap("lease", f"until {leader} held the lease")
            if started is not None and started.poll() is None:
                _LEFT_RUNNING.append(started)
    out["outcome"] = "handed_over"
    out["leader"] = leader
    out["gap"] = _gap_dict(clock, done=True)
    if not as_json:
        click.echo(
            f"gap: {clock.total:.2f} s from stopping the old beat to goatbeat leading "
            f"({'--stop-old-beat' if stop_command else '--old-beat-stopped: from this command'})"
        )
        for name, seconds, what in clock.parts:
            click.echo(f"  {name:<8} {seconds:7.3f} s  {what}")
        click.echo("handed over: goatbeat leads; an occurrence that fell due in the gap runs "
                   "once now")  # fmt: skip
    finish(0)


@contextmanager
def _after_the_stop() -> Iterator[None]:
    """An error once the old beat is stopped says so: nothing schedules until someone acts."""
    try:
        yield
    except click.ClickException as exc:
        message = exc.format_message()
        if "the old beat is STOPPED" in message:
            raise
        raise OperationalError(
            f"{message} (after the stop: the old beat is STOPPED and goatbeat is NOT started: "
            "fix it and start goatbeat, or start the old beat again)"
        ) from None


def _gap_dict(clock: _Clock, *, done: bool) -> dict[str, Any]:
    return {
        "seconds": round(clock.total, 3),
        "complete": done,
        "parts": [{"name": n, "seconds": round(s, 3), "what": w} for n, s, w in clock.parts],
    }


def _leases(store: ScheduleStore, target: Target) -> list[tuple[str, str, datetime]]:
    try:
        return held_leases(store)
    except StoreError as exc:
        raise OperationalError(f"cannot read the goatbeat database {target.label}: {exc}") from None


def _wait_for_lease(
    store: ScheduleStore,
    target: Target,
    timeout: float,
    started: subprocess.Popen[bytes] | None,
) -> str | None:
    """The holder of the first lease a scheduler holds within ``timeout`` seconds; None when
    none does (or the start command failed)."""
    deadline = time.monotonic() + timeout
    while True:
        held = _leases(store, target)
        if held:
            return held[0][1]
        if started is not None and started.poll() not in (None, 0):
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(_POLL)
