"""``goatbeat schedule ...``: inspect and operate schedules.

``list`` publishes the app's code schedules first (as the Django integration specifies; with a
report on stderr, see :mod:`goatbeat.cli.publish`), unless ``--no-publish``; no other
subcommand publishes. ``list`` and ``show`` print a table (or ``--json``, see
:mod:`goatbeat.cli.output`); ``run`` asks the leading scheduler for an extra run; ``prune``
disables code schedules no longer declared, and never deletes; ``delete`` deletes one
(asking first), and refuses a code schedule the code still declares, which the next
publication would recreate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

import click

from goatbeat.cli.context import BeatLike, cli_context, open_app
from goatbeat.cli.errors import UserError
from goatbeat.cli.output import (
    command,
    execution_to_json,
    health_to_json,
    iso,
    runtime_text,
    schedule_to_json,
    state_cell,
    stored_to_json,
    table,
)
from goatbeat.cli.publish import publish_and_report, require_app
from goatbeat.core.durations import format_duration
from goatbeat.core.errors import GoatbeatError, ScheduleNotFound
from goatbeat.core.health import ScheduleHealth
from goatbeat.core.model import DamagedSchedule, Execution, Schedule, Source, StoredSchedule
from goatbeat.core.observability import log_event
from goatbeat.core.store import PublishResult

__all__ = ["schedule"]


@click.group()
def schedule() -> None:
    """Inspect and operate schedules."""


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array with every field.")
@click.option(
    "--no-publish", is_flag=True, help="List what is stored, without publishing code schedules."
)
@click.pass_context
def schedule_list(ctx: click.Context, as_json: bool, no_publish: bool) -> None:
    """Publish code schedules, then list every schedule (damaged rows included, marked)."""
    with open_app(ctx) as app:
        bare = cli_context(ctx).bare  # no app: nothing to publish, declarations unknown
        if not bare:
            if no_publish:
                _note_unpublished(app.publish(dry_run=True))
            else:
                publish_and_report(ctx, app, origin="schedule list")
        declared = None if bare else {s.name for s in app.schedules}
        rows = app.store.list_schedules()
        now = app.store.now()
        health = _health(app)
        if as_json:
            data = []
            for s in rows:
                item = stored_to_json(s, now=now)
                item.update(health_to_json(health.get(s.name)))
                item["declared_in_code"] = _declared(s, declared)
                item["orphaned"] = item["declared_in_code"] is False and bool(s.enabled)
                data.append(item)
            click.echo(json.dumps(data, indent=2))
            return
        if not rows:
            click.echo("no schedules")
            return
        cells = [
            [
                s.name,
                _source_cell(s, declared),
                s.trigger.describe() if isinstance(s, Schedule) else f"DAMAGED ({s.column})",
                state_cell(s, now),
                iso(s.next_run_at) if s.next_run_at else "-",
                _status_cell(s.last_status, health.get(s.name)),
                str(s.missed_count),
            ]
            for s in rows
        ]
        header = ["NAME", "SOURCE", "TRIGGER", "STATE", "NEXT RUN", "LAST STATUS", "MISSED"]
        click.echo(table(header, cells))
        paused = [s for s in rows if s.paused]
        if paused:
            click.echo(f"{len(paused)} paused schedule(s):")
            click.echo("\n".join(f"  {_pause_line(s)}" for s in paused))
        damaged = [s for s in rows if isinstance(s, DamagedSchedule)]
        if damaged:
            click.echo(f"{len(damaged)} damaged schedule(s), not scheduled until repaired:")
            click.echo("\n".join(f"  {d.name}: {d.describe()}" for d in damaged))
        orphaned = [s.name for s in rows if _declared(s, declared) is False and s.enabled]
        if orphaned:
            click.echo(
                f"{len(orphaned)} orphaned code schedule(s), still enabled but no longer "
                f"declared (`{command('schedule prune')}` disables them): " + ", ".join(orphaned)
            )


def _pause_line(s: StoredSchedule) -> str:
    """``nightly: paused 2026-11-01 09:00:00Z by alice: incident 42``."""
    note = f": {s.pause_note}" if s.pause_note else ""
    return f"{s.name}: paused {iso(s.paused_at)} by {s.paused_by or '-'}{note}"


def _health(app: BeatLike, name: str | None = None) -> dict[str, ScheduleHealth]:
    """Each schedule's record of success (those with something to report), by name."""
    settings = getattr(app, "settings", None)
    overdue_after = getattr(settings, "overdue_after", None) or timedelta(minutes=10)
    found = app.store.schedule_health(overdue_after=overdue_after)
    return {h.name: h for h in found if name is None or h.name == name}


def _status_cell(last_status: str | None, health: ScheduleHealth | None) -> str:
    """``failed (3 in a row)``, ``succeeded, OVERDUE``: the last status and what it means."""
    text = last_status or "-"
    if health is not None and health.consecutive_failures > 1:
        text += f" ({health.consecutive_failures} in a row)"
    if health is not None and health.overdue:
        text += ", OVERDUE"
    return text


def _declared(s: StoredSchedule, declared: set[str] | None) -> bool | None:
    """Whether the app's code declares a code schedule (None: not a code schedule, or no app)."""
    if declared is None or str(s.source) != Source.CODE.value:
        return None
    return s.name in declared


def _source_cell(s: StoredSchedule, declared: set[str] | None) -> str:
    if _declared(s, declared) is False:
        return "code (orphaned)" if s.enabled else "code (undeclared)"
    return str(s.source)


def _note_unpublished(result: PublishResult) -> None:
    if result.created or result.updated:
        click.echo(
            f"goatbeat: note: this code declares {len(result.created)} schedule(s) not stored "
            f"yet and {len(result.updated)} stored differently; "
            f"`{command('publish --dry-run')}` shows them",
            err=True,
        )


def _raise_if_unpublished(app: BeatLike, name: str) -> None:
    """For a schedule the store does not hold: say so when the code declares it."""
    if any(s.name == name for s in app.schedules):
        raise UserError(
            f"schedule {name!r} is declared in the code but not published yet: "
            f"run `{command('publish')}` first"
        ) from None


@schedule.command("show")
@click.argument("name")
@click.option("--count", default=5, show_default=True, type=click.IntRange(0, 1000))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedule_show(ctx: click.Context, name: str, count: int, as_json: bool) -> None:
    """A schedule's definition, its next fire times and recent executions (never publishes)."""
    with open_app(ctx) as app:
        store = app.store
        try:
            sched = store.get(name)
        except ScheduleNotFound:
            _raise_if_unpublished(app, name)
            raise
        recent = store.executions(name=name, limit=10)
        if isinstance(sched, DamagedSchedule):
            _show_damaged(sched, recent, as_json=as_json)
            return
        now = store.now()
        upcoming = [] if sched.paused else sched.next_fire_times(count, now)
        health = _health(app, name).get(name)
        if as_json:
            data = schedule_to_json(sched, now=now)
            data.update(health_to_json(health))
            data["upcoming"] = [iso(t) for t in upcoming]
            data["executions"] = [execution_to_json(e) for e in recent]
            click.echo(json.dumps(data, indent=2))
            return
        lines = _definition_lines(sched, now)
        lines += _outcome_lines(health, sched.last_status)
        if sched.paused:
            lines.append(f"next fire times: none while paused (`{command('schedule resume')}`)")
        else:
            lines.append(f"next {count} fire times:" if upcoming else "next fire times: none")
        lines += [f"  {iso(t)}" for t in upcoming]
        lines += _execution_lines(recent)
        click.echo("\n".join(lines))


def _definition_lines(sched: Schedule, now: datetime) -> list[str]:
    lines = [
        f"{sched.name}  ({sched.source.value}, {sched.state(now)})",
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
        + (f", catch-up limit {sched.catch_up_limit}" if sched.misfire.value == "run_all" else "")
    )
    if sched.start_at or sched.end_at:
        lines.append(f"  window:     {iso(sched.start_at)} .. {iso(sched.end_at)}")
    if sched.description:
        lines.append(f"  about:      {sched.description}")
    control = []
    if sched.jitter:
        control.append(f"jitter {format_duration(sched.jitter)}")
    if sched.overlap.value != "allow":
        assert sched.max_runtime is not None
        control.append(
            f"overlap {sched.overlap.value} (max runtime {format_duration(sched.max_runtime)})"
        )
    if sched.pause_on_failure:
        control.append(f"pause after {sched.pause_on_failure} failed run(s) in a row")
    if control:
        lines.append(f"  control:    {', '.join(control)}")
    if sched.paused:
        lines.append(f"  paused:     {_pause_line(sched).split(': paused ', 1)[1]}")
    lines.append(
        f"  runs:       {sched.total_run_count} claimed, {sched.missed_count} missed, "
        f"{sched.skipped_count} skipped, "
        f"last {iso(sched.last_run_at) if sched.last_run_at else '-'} "
        f"({sched.last_status or 'never'})"
    )
    return lines


def _outcome_lines(health: ScheduleHealth | None, last_status: str | None = None) -> list[str]:
    """What the workers reported (nothing when they do not report completions)."""
    if health is None or (health.last_success_at is None and health.last_failure_at is None):
        if last_status in ("running", "retried"):
            # A worker reported a start: reports work, no run has ended yet.
            return [f"  outcomes:   {last_status} reported, no run ended yet"]
        return ["  outcomes:   none reported (see docs/operations.md, completion reports)"]
    text = (
        f"  outcomes:   last success {iso(health.last_success_at)}, "
        f"last failure {iso(health.last_failure_at)}"
    )
    if health.consecutive_failures:
        text += f", {health.consecutive_failures} failure(s) in a row"
    if health.overdue:
        text += "; OVERDUE"
    return [text]


def _execution_lines(recent: list[Execution]) -> list[str]:
    if not recent:
        return ["recent executions: none"]
    cells = [
        [
            iso(e.scheduled_at),
            e.kind.value,
            e.status.value + (f" (retried {e.retries}x)" if e.retries else ""),
            str(e.attempts),
            e.scheduler_id or "-",
            runtime_text(e.runtime),
            (e.error or "")[:60],
        ]
        for e in recent
    ]
    header = ["SCHEDULED AT", "KIND", "STATUS", "ATTEMPTS", "SCHEDULER", "RUNTIME", "ERROR"]
    return ["recent executions:", table(header, cells, indent="  ")]


@schedule.command("run")
@click.argument("name")
@click.pass_context
def schedule_run(ctx: click.Context, name: str) -> None:
    """Ask the leader for an extra run of NAME now (never publishes)."""
    with open_app(ctx) as app:
        run_now = getattr(app, "run_now", None)
        try:
            execution = run_now(name) if callable(run_now) else app.store.request_run(name)
        except ScheduleNotFound:
            _raise_if_unpublished(app, name)
            raise
        click.echo(
            f"goatbeat: run of {name!r} requested ({execution.idempotency_key}); "
            + _who_submits(app)
        )


def _who_submits(app: BeatLike) -> str:
    """Who will submit a requested run: the leader, if one holds the lease now (database
    clock), else nobody until a scheduler starts leading; never a leader that is not there."""
    try:
        snapshot = app.store.status()
    except GoatbeatError as exc:
        return f"a leading scheduler submits it (whether one runs now cannot be told: {exc})"
    held = [s for s in snapshot.shards if s.valid]
    if snapshot.lease is not None and snapshot.lease.valid:
        return f"the leading scheduler ({snapshot.lease.holder}) submits it on its next iteration"
    if held and len(held) == len(snapshot.shards):
        return "the scheduler holding its shard submits it on its next iteration"
    if held:
        return (
            f"{len(held)} of {len(snapshot.shards)} shards are held now: its shard's holder "
            "submits it, or, if nobody holds that shard, the next scheduler to take it"
        )
    return (
        "no scheduler leads now (no unexpired lease): it waits in the database and the next "
        f"scheduler to lead submits it; start one with `{command('scheduler')}`"
    )


@schedule.command("prune")
@click.option("--dry-run", is_flag=True, help="Say what would be disabled; change nothing.")
@click.pass_context
def schedule_prune(ctx: click.Context, dry_run: bool) -> None:
    """Disable code schedules that are no longer declared (never deletes, never publishes)."""
    with open_app(ctx) as app:
        require_app(ctx, "schedule prune")
        if dry_run:
            check = app.publish(dry_run=True)
            if check.superseded:
                raise UserError(
                    "not pruning: this code is older than the published schedules "
                    f"({check.reason}); prune from the newer release"
                )
            names = check.orphaned
            click.echo(("would disable: " + ", ".join(names)) if names else "nothing to prune")
            return
        names = app.prune()
        if names:
            click.echo("disabled: " + ", ".join(names))
        else:
            click.echo("nothing to prune")


@schedule.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Delete without asking.")
@click.pass_context
def schedule_delete(ctx: click.Context, name: str, yes: bool) -> None:
    """Delete schedule NAME (its executions stay as history). A code schedule the code still
    declares is refused: the next publication would recreate it."""
    with open_app(ctx) as app:
        obj = cli_context(ctx)
        store = app.store
        sched = store.get(name)
        source = str(sched.source)
        code = source == Source.CODE.value
        if code and not obj.bare and any(s.name == name for s in app.schedules):
            raise UserError(
                f"schedule {name!r} is declared in the code: the next publication would "
                "recreate it; remove its declaration first, or disable it"
            )
        state = "enabled" if sched.enabled else "disabled"
        if not yes:
            question = f"Delete schedule {name!r} ({source}, {state})? Its executions stay."
            if code and obj.bare:
                question += " (If some code still declares it, its next publication recreates it.)"
            try:
                confirmed = click.confirm(question, default=False, err=True)
            except click.exceptions.Abort:
                confirmed = False
            if not confirmed:
                click.echo("goatbeat: not deleted (pass --yes to delete without asking)", err=True)
                ctx.exit(1)
        store.delete(name)
        log_event("schedule.deleted", schedule=name, source=source, origin="schedule delete")
        click.echo(f"deleted: {name}")


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
        f"last {iso(d.last_run_at) if d.last_run_at else '-'} ({d.last_status or 'never'})"
    )
    lines.append(f"recent executions: {len(recent) or 'none'}")
    lines += [f"  {iso(e.scheduled_at)}  {e.status.value}  {(e.error or '')[:60]}" for e in recent]
    click.echo("\n".join(lines))
