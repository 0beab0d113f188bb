"""``goatbeat status``: is a scheduler leading, who is alive, is anything waiting, did anything
miss or fail lately.

One read of the database (:meth:`~goatbeat.core.store.ScheduleStore.status`, indexed: its
cost follows what is due, not the number of schedules), judged by the database clock, and,
except with ``--check``, the overdue and failing schedules
(:meth:`~goatbeat.core.store.ScheduleStore.schedule_health`), and the refused schedules
(:meth:`~goatbeat.core.store.ScheduleStore.refusals`: one pass over the schedule table, in
every mode). A table by default, ``--json`` for scripts (the field names are a contract, as in
:mod:`goatbeat.cli.output`). ``--check`` is for probes: ONE line, exit 0 when a scheduler holds
the lease, nothing due waited longer than ``--max-lag`` and no schedule is refused, 1 otherwise
(:func:`goatbeat.core.health.check`); with ``--scheduler-id ID``, exit 0 while that replica's
heartbeat row is live, 1 when it expired or is gone (:func:`goatbeat.core.health.check_scheduler`). Whatever the mode, exit 2 when the question cannot be
answered: a bad option, an app that cannot load, a database that cannot be read.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click

from goatbeat.cli.context import BeatLike, cli_context, open_app
from goatbeat.cli.errors import UserError
from goatbeat.cli.output import iso, store_info, table
from goatbeat.cli.scheduler import require_schema
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import GoatbeatError, InvalidValue
from goatbeat.core.health import (
    STATUS_WINDOW,
    Refusals,
    ScheduleHealth,
    StatusSnapshot,
    check,
    check_scheduler,
)

__all__ = ["status"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object.")
@click.option(
    "--check",
    "probe",
    is_flag=True,
    help="One line; exit 0 when healthy, 1 when not (a liveness/readiness probe).",
)
@click.option(
    "--max-lag",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="Unhealthy when something due has waited longer than this.",
)
@click.option(
    "--scheduler-id",
    "scheduler_id",
    default=None,
    metavar="ID",
    help="With --check: judge this one replica instead, by its heartbeat row (alive while "
    "its loop beats; a per-replica liveness probe).",
)
@click.option("--lease", "lease_name", default="scheduler", show_default=True, hidden=True)
@click.pass_context
def status(
    ctx: click.Context,
    as_json: bool,
    probe: bool,
    max_lag: str,
    scheduler_id: str | None,
    lease_name: str,
) -> None:
    """The lease, the scheduler processes, the backlog and the last hour's misses and
    failures (never publishes)."""
    try:
        limit = parse_duration(max_lag, field="--max-lag")
    except InvalidValue as exc:
        raise UserError(str(exc)) from None
    if scheduler_id is not None and not probe:
        raise UserError("--scheduler-id goes with --check (status --check --scheduler-id ID)")
    if scheduler_id is not None and not scheduler_id.strip():
        raise UserError("--scheduler-id: '' is not a scheduler id")
    with open_app(ctx) as app:
        try:
            snapshot = app.store.status(lease_name=lease_name, window=STATUS_WINDOW)
        except InvalidValue:
            raise
        except GoatbeatError as exc:
            # Not an answer either way: a probe must tell "unhealthy" from "cannot tell".
            # Missing (or older) tables say which migrate command to run.
            require_schema(app, cli_context(ctx))
            raise UserError(f"cannot read the status: {exc}") from None
        refusals = None if scheduler_id is not None else _refusals(app)
        if scheduler_id is not None:
            verdict = check_scheduler(snapshot, scheduler_id)
        else:
            verdict = check(snapshot, max_lag=limit, refusals=refusals)
        if probe:
            click.echo(f"goatbeat: {'ok' if verdict.ok else 'unhealthy'}: {verdict.reason}")
            ctx.exit(0 if verdict.ok else 1)
        troubled = _troubled(app)
        if as_json:
            data = snapshot.to_dict()
            data.update(
                healthy=verdict.ok,
                reason=verdict.reason,
                max_lag_seconds=limit.total_seconds(),
                store=store_info(app.store),
                schedules=[h.to_dict() for h in troubled],
                refused=_refused_dict(refusals, snapshot),
            )
            click.echo(json.dumps(data, indent=2))
            return
        click.echo(
            _text(
                snapshot,
                verdict.ok,
                verdict.reason,
                store_info(app.store),
                troubled,
                refusals or Refusals(),
            )
        )


TROUBLED_LIMIT = 20
"""Schedules ``status`` names as overdue or failing, at most (the worst first)."""

REFUSED_LIMIT = 20
"""Refused schedules ``status`` names, at most (by name; the total is always given)."""


def _refusals(app: BeatLike) -> Refusals:
    try:
        return app.store.refusals(limit=REFUSED_LIMIT)
    except GoatbeatError as exc:
        raise UserError(f"cannot read the refused schedules: {exc}") from None


def _refused_dict(refusals: Refusals | None, s: StatusSnapshot) -> dict[str, object]:
    refusals = refusals or Refusals()
    return {
        "total": refusals.total,
        "schedules": [r.to_dict(s.now) for r in refusals.schedules],
    }


def _troubled(app: BeatLike) -> list[ScheduleHealth]:
    """The overdue and failing schedules (not for ``--check``: this read passes over the
    schedule table)."""
    settings = getattr(app, "settings", None)
    overdue_after = getattr(settings, "overdue_after", None) or timedelta(minutes=10)
    try:
        found = app.store.schedule_health(overdue_after=overdue_after, limit=TROUBLED_LIMIT)
    except GoatbeatError as exc:
        raise UserError(f"cannot read the schedules' health: {exc}") from None
    return [h for h in found if h.overdue or h.consecutive_failures]


def _ago(now: datetime, then: datetime) -> str:
    seconds = (now - then).total_seconds()
    if seconds < 0:
        return f"in {_span(-seconds)}"
    return f"{_span(seconds)} ago"


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _text(
    s: StatusSnapshot,
    ok: bool,
    reason: str,
    store: str,
    troubled: list[ScheduleHealth],
    refusals: Refusals,
) -> str:
    now = s.now
    lines = []
    if s.shards and (s.lease is None or not s.lease.valid):
        pass  # sharded (below): the single lease is history
    elif s.lease is None:
        lines.append("lease:      never held")
    else:
        lease = s.lease
        state = "held by" if lease.valid else "EXPIRED, last held by"
        lines.append(
            f"lease:      {lease.name} {state} {lease.holder} (fencing token {lease.token}), "
            f"expires {iso(lease.expires_at)} ({_ago(now, lease.expires_at)}, database clock)"
        )
    for shard in s.shards:
        if not shard.holder:
            lines.append(f"shard:      {shard.name} NEVER HELD")
            continue
        state = "held by" if shard.valid else "EXPIRED, last held by"
        lines.append(
            f"shard:      {shard.name} {state} {shard.holder} (fencing token {shard.token}), "
            f"expires {_ago(now, shard.expires_at)}"
        )
    live = [p for p in s.schedulers if not p.stale]
    leaders = sum(1 for p in live if p.role.value == "leader")
    lines.append(
        f"schedulers: {len(live)} live ({leaders} leader, {len(live) - leaders} standby)"
        + (f", {len(s.schedulers) - len(live)} stale" if len(s.schedulers) != len(live) else "")
    )
    if s.schedulers:
        rows = [
            [
                p.scheduler_id,
                p.role.value + (" (stale)" if p.stale else ""),
                p.hostname or "-",
                "-" if p.pid is None else str(p.pid),
                p.version or "-",
                "-" if p.fencing_token is None else str(p.fencing_token),
                _ago(now, p.heartbeat_at),
                iso(p.started_at),
            ]
            for p in s.schedulers
        ]
        header = ["SCHEDULER", "ROLE", "HOST", "PID", "VERSION", "TOKEN", "HEARTBEAT", "STARTED"]
        lines.append(table(header, rows, indent="  "))
    for name, procs in s.shared_ids.items():
        lines.append(
            f"WARNING:    scheduler id {name!r} is shared by {len(procs)} live processes "
            f"({', '.join(p.scheduler_id for p in procs)}): one leads at a time, but logs and "
            "executions cannot tell them apart; give each replica its own"
        )
    oldest = "nothing waits"
    if s.oldest_due_at is not None:
        oldest = (
            f"oldest {s.oldest_due_name!r} due {iso(s.oldest_due_at)} "
            f"({_ago(now, s.oldest_due_at)})"
        )
    lines.append(
        f"backlog:    {s.due} schedule(s) due, {s.pending} claimed execution(s) not "
        f"submitted; {oldest}"
    )
    hours = s.window.total_seconds() / 3600
    lines.append(f"last {hours:g}h:    {s.missed} missed, {s.failed} failed")
    overdue = [h.name for h in troubled if h.overdue]
    failing = [f"{h.name} ({h.consecutive_failures} in a row)" for h in troubled
               if h.consecutive_failures]  # fmt: skip
    lines.append(
        "schedules:  "
        + (f"overdue: {', '.join(overdue)}" if overdue else "none overdue")
        + ("; failing: " + ", ".join(failing) if failing else "; none failing")
    )
    if not refusals.total:
        lines.append("refused:    none")
    else:
        lines.append(
            f"refused:    {refusals.total} schedule(s) do not run: a scheduler refused their "
            "task; one that knows it runs them again once it leads"
        )
        for refusal in refusals.schedules:
            lines.append(f"  {refusal.describe(now)}")
        if refusals.total > len(refusals.schedules):
            lines.append(f"  ... and {refusals.total - len(refusals.schedules)} more")
    lines.append(f"health:     {'ok' if ok else 'UNHEALTHY'}: {reason}")
    lines.append(f"database:   {store}, now {iso(now)}")
    return "\n".join(lines)
