"""``goatbeat schedule add/edit/enable/disable/pause/resume/backfill``: schedules stored in
the database, controlled from the command line.

``add`` and ``edit`` take the options ``Beat.schedule()`` takes, validated the same way (the
task must be a known one: see the allow-list); a code schedule refuses ``edit``, since its
definition lives in code, but may be enabled, disabled, paused, resumed and backfilled.
``pause`` records a note and who paused; ``resume`` runs from now (the pause's occurrences
counted as skipped) or, with ``--catch-up``, by the misfire policy. ``backfill`` asks the
leading scheduler to submit every instant of a past range once (``--dry-run`` lists them).
Each prints one line, or ``--json``. None of them publishes.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import Any

import click

from goatbeat.beat import Beat
from goatbeat.cli.context import BeatLike, open_app
from goatbeat.cli.errors import UserError
from goatbeat.cli.output import iso, iso_or_none, stored_to_json
from goatbeat.core.errors import InvalidValue
from goatbeat.core.model import MisfirePolicy, OverlapPolicy, StoredSchedule
from goatbeat.core.timeutil import parse_instant

__all__ = ["add", "edit", "enable", "disable", "pause", "resume", "backfill", "COMMANDS"]

_CLEAR = "none"
"""What ``edit`` takes to clear an optional value (``--end-at none``)."""


def _beat(app: BeatLike) -> Beat:
    if not isinstance(app, Beat):
        raise UserError("this app cannot change stored schedules (it is not a goatbeat Beat)")
    return app


def _json_value(option: str, want: type, what: str) -> Callable[[str | None], Any]:
    def parse(text: str | None) -> Any:
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{option}: {text!r} is not JSON ({exc})") from None
        if not isinstance(value, want):
            raise UserError(f"{option}: {text!r} is not {what}")
        return value

    return parse


_PARSERS: dict[str, Callable[[str | None], Any]] = {
    "args": _json_value("--args", list, "a JSON array"),
    "kwargs": _json_value("--kwargs", dict, "a JSON object"),
    "headers": _json_value("--headers", dict, "a JSON object"),
    "options": _json_value("--options", dict, "a JSON object"),
}

_DEFINITION_OPTIONS: list[Callable[[Any], Any]] = [
    click.option("--cron", help="A cron expression (5 fields, or 6 with seconds first)."),
    click.option("--every", help="An interval: 30s, 5m, 1h30m ..."),
    click.option("--at", "at", help="A one-off instant (ISO 8601 with an offset)."),
    click.option("--solar", help="A solar event: sunrise, sunset, dawn_civil ..."),
    click.option("--latitude", type=float, help="With --solar."),
    click.option("--longitude", type=float, help="With --solar."),
    click.option("--timezone", help="The zone a cron expression reads wall-clock time in."),
    click.option("--anchor", help="An interval fires at anchor + k x every (ISO 8601)."),
    click.option("--args", help="Positional arguments, a JSON array: '[42, \"x\"]'."),
    click.option("--kwargs", help="Keyword arguments, a JSON object: '{\"user_id\": 42}'."),
    click.option("--queue", help="Routing: the queue."),
    click.option("--exchange", help="Routing (Celery): the exchange."),
    click.option("--routing-key", help="Routing (Celery): the routing key."),
    click.option("--priority", help="Routing: the priority (an integer)."),
    click.option("--expires", help="Drop the task unrun after this long (10m, 3600 ...)."),
    click.option("--headers", help="Message headers / options, a JSON object."),
    click.option("--options", help="The backend's own per-schedule options, a JSON object."),
    click.option(
        "--misfire",
        type=click.Choice([p.value for p in MisfirePolicy]),
        help="What to do with late occurrences.",
    ),
    click.option("--misfire-grace", help="How late an occurrence may start (60s ...)."),
    click.option("--catch-up-limit", help="The most occurrences one catch-up claims."),
    click.option("--start-at", help="No occurrence before this instant (ISO 8601)."),
    click.option("--end-at", help="No occurrence after this instant (ISO 8601)."),
    click.option("--jitter", help="Send each occurrence up to this long after its instant."),
    click.option(
        "--overlap",
        type=click.Choice([p.value for p in OverlapPolicy]),
        help="An occurrence due while the previous run still runs: allow, skip, buffer_one.",
    ),
    click.option("--max-runtime", help="A run older than this no longer counts as running."),
    click.option("--pause-on-failure", help="Pause after this many consecutive failed runs."),
    click.option("--description", help="What the schedule is for."),
]


def _definition_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_DEFINITION_OPTIONS):
        func = option(func)
    return func


_INTEGERS = {"priority": "--priority", "catch_up_limit": "--catch-up-limit"}
_INTEGERS["pause_on_failure"] = "--pause-on-failure"
_CLEARABLE = frozenset(
    {
        "start_at",
        "end_at",
        "max_runtime",
        "pause_on_failure",
        "queue",
        "exchange",
        "routing_key",
        "priority",
        "expires",
        "anchor",
    }
)


def _options(given: dict[str, Any], *, edit: bool) -> dict[str, Any]:
    """The click options that were given, as ``Beat.schedule()`` options."""
    out: dict[str, Any] = {}
    latitude = given.pop("latitude", None)
    longitude = given.pop("longitude", None)
    solar = given.pop("solar", None)
    for key, value in given.items():
        if value is None:
            continue
        if edit and key in _CLEARABLE and value.strip().lower() == _CLEAR:
            out[key] = None
            continue
        if key in _PARSERS:
            value = _PARSERS[key](value)
        elif key in _INTEGERS:
            try:
                value = int(value)
            except ValueError:
                raise UserError(f"{_INTEGERS[key]}: {value!r} is not an integer") from None
        out[key] = value
    if solar is not None:
        out["solar"] = {"event": solar, "latitude": latitude, "longitude": longitude}
    elif latitude is not None or longitude is not None:
        raise UserError("--latitude and --longitude go with --solar")
    return out


def _print(app: BeatLike, stored: StoredSchedule, as_json: bool, line: str, **extra: Any) -> None:
    if as_json:
        data = stored_to_json(stored, now=app.store.now())
        data.update(extra)
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(line)


@click.command("add")
@click.argument("name")
@click.option("--task", required=True, help="The task's name (its dotted path).")
@_definition_options
@click.option("--disabled", is_flag=True, help="Store it disabled.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored schedule as JSON.")
@click.pass_context
def add(
    ctx: click.Context, /, name: str, task: str, disabled: bool, as_json: bool, **given: Any
) -> None:
    """Store a new schedule NAME (source admin) running TASK: exactly one of --cron, --every,
    --at, --solar. The task must be a known one (see allowed_tasks)."""
    options = _options(given, edit=False)
    with open_app(ctx) as app:
        beat = _beat(app)
        stored = beat.create(name=name, task=task, enabled=not disabled, **options)
        _print(
            app,
            stored,
            as_json,
            f"added: {name} ({stored.trigger.describe()}; next run {iso(stored.next_run_at)})",
        )


@click.command("edit")
@click.argument("name")
@click.option("--task", help="The task's name (its dotted path).")
@_definition_options
@click.option("--json", "as_json", is_flag=True, help="Print the stored schedule as JSON.")
@click.pass_context
def edit(ctx: click.Context, /, name: str, task: str | None, as_json: bool, **given: Any) -> None:
    """Change a stored schedule that is not declared in code: each option given replaces the
    stored value (``none`` clears --start-at, --end-at, --max-runtime, --pause-on-failure and
    the routing options); the rest, the trigger included, stays exactly as stored."""
    changes = _options(given, edit=True)
    if task is not None:
        changes["task"] = task
    if not changes:
        raise UserError("nothing to change: give at least one option (see --help)")
    with open_app(ctx) as app:
        stored, changed = _beat(app).edit(name, **changes)
        line = (
            f"changed {name}: " + "; ".join(c.describe() for c in changed)
            if changed
            else f"{name}: nothing changed"
        )
        _print(app, stored, as_json, line, changes=[c.to_dict() for c in changed])


def _toggle(ctx: click.Context, name: str, enabled: bool, as_json: bool) -> None:
    with open_app(ctx) as app:
        stored = _beat(app).set_enabled(name, enabled)
        word = "enabled" if enabled else "disabled"
        _print(app, stored, as_json, f"{word}: {name} (next run {iso(stored.next_run_at)})")


@click.command("enable")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def enable(ctx: click.Context, name: str, as_json: bool) -> None:
    """Enable schedule NAME (any source): it is scheduled again from now."""
    _toggle(ctx, name, True, as_json)


@click.command("disable")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def disable(ctx: click.Context, name: str, as_json: bool) -> None:
    """Disable schedule NAME (any source, code included)."""
    _toggle(ctx, name, False, as_json)


def _who() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        return None


@click.command("pause")
@click.argument("name")
@click.option("--note", default="", help='Why, shown in list, show and the admin: "incident 42".')
@click.option("--by", "by", help="Who pauses it (default: the current OS user).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def pause(ctx: click.Context, name: str, note: str, by: str | None, as_json: bool) -> None:
    """Pause schedule NAME: nothing of it is claimed until `schedule resume`. Its
    occurrences during the pause are skipped (not missed) unless resumed with --catch-up."""
    with open_app(ctx) as app:
        stored = _beat(app).pause(name, note=note, by=by if by is not None else _who())
        why = f": {stored.pause_note}" if stored.pause_note else ""
        _print(
            app,
            stored,
            as_json,
            f"paused: {name} at {iso(stored.paused_at)} by {stored.paused_by or '-'}{why}",
        )


@click.command("resume")
@click.argument("name")
@click.option(
    "--catch-up",
    "catch_up",
    flag_value=True,
    help="Run the pause's occurrences by the misfire policy and catch_up_limit.",
)
@click.option(
    "--from-now",
    "catch_up",
    flag_value=False,
    default=False,
    help="Skip the pause's occurrences, counted (the default).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def resume(ctx: click.Context, name: str, catch_up: bool, as_json: bool) -> None:
    """Resume schedule NAME, from now (default) or with --catch-up."""
    with open_app(ctx) as app:
        result = _beat(app).resume(name, catch_up=catch_up)
        stored = result.schedule
        extra = {
            "was_paused": result.was_paused,
            "catch_up": result.catch_up,
            "skipped": result.skipped,
            "skipped_is_lower_bound": result.skipped_is_lower_bound,
        }
        if not result.was_paused:
            line = f"{name} is not paused: nothing to do"
        elif catch_up:
            line = (
                f"resumed: {name}, catching up from {iso(stored.next_run_at)} by its misfire policy"
            )
        else:
            more = "at least " if result.skipped_is_lower_bound else ""
            line = (
                f"resumed: {name} from now; {more}{result.skipped} occurrence(s) of the pause "
                f"skipped; next run {iso(stored.next_run_at)}"
            )
        _print(app, stored, as_json, line, **extra)


_BACKFILL_FIELDS = {"start": "--from", "end": "--to", "limit": "--limit"}


@click.command("backfill")
@click.argument("name")
@click.option("--from", "start", required=True, help="The first instant (ISO 8601, included).")
@click.option("--to", "end", required=True, help="The end of the range (excluded), not after now.")
@click.option("--limit", default=100, show_default=True, type=int, help="The most instants.")
@click.option("--dry-run", is_flag=True, help="List the instants; submit nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def backfill(
    ctx: click.Context, name: str, start: str, end: str, limit: int, dry_run: bool, as_json: bool
) -> None:
    """Submit every instant of NAME's trigger in [--from, --to) once, through the leading
    scheduler, under the scheduled idempotency keys: an instant that already ran is listed as
    existing and never submitted again."""
    begin = parse_instant(start, "--from")
    until = parse_instant(end, "--to")
    with open_app(ctx) as app:
        try:
            result = _beat(app).backfill(name, start=begin, end=until, limit=limit, dry_run=dry_run)
        except InvalidValue as exc:
            option = _BACKFILL_FIELDS.get(exc.field)
            if option is None:
                raise
            raise UserError(f"{option}: {exc.reason}") from None
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "name": name,
                        "dry_run": dry_run,
                        "instants": [iso_or_none(t) for t in result.instants],
                        "created": [iso_or_none(t) for t in result.created],
                        "existing": {iso_or_none(t): s for t, s in result.existing.items()},
                    },
                    indent=2,
                )
            )
            return
        verb = "would submit" if dry_run else "submitting"
        lines = [
            f"{name}: {len(result.instants)} instant(s) in {iso(begin)} .. {iso(until)}; "
            f"{verb} {len(result.created)}, {len(result.existing)} already ran or exist"
        ]
        for t in result.instants:
            status = result.existing.get(t)
            lines.append(f"  {iso(t)}  {'exists (' + status + ')' if status else verb}")
        if not dry_run and result.created:
            lines.append("the leading scheduler submits them on its next iteration")
        click.echo("\n".join(lines))


COMMANDS = (add, edit, enable, disable, pause, resume, backfill)
"""Registered in the ``schedule`` group by :mod:`goatbeat.cli.schedules`."""
