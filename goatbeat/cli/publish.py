"""``goatbeat publish [--dry-run]``: the explicit step that writes the code's schedules.

Publishing upserts the schedules the app declares (source ``code``) and reports, on stderr,
what it did: each schedule created, each one changed with its fields old -> new, the orphaned
ones (enabled code schedules the code no longer declares: ``schedule prune`` disables them)
and how many were unchanged. ``--dry-run`` reports the same and writes nothing.

Only ``publish`` and ``scheduler`` (at start) publish on purpose. ``schedule list`` publishes
too, as the Django integration specifies; when that changes a stored definition it prints a
warning naming the schedule and the fields, since a stale checkout would revert what the
deployed code declares. ``schedule show``, ``schedule run``, ``schedule prune``, ``schedule
delete`` and ``diff`` never publish.

The report is for people: in text log format the CLI prints it and keeps the same log events
(``schedule.published``, ``schedule.changed``, ``schedule.orphaned``) off stderr; with
``--log-format json`` it prints no report and the events go out as JSON lines instead.
"""

from __future__ import annotations

from typing import Any

import click

from goatbeat.beat import PUBLISHING_ORIGINS
from goatbeat.cli.context import BeatLike, cli_context, open_app
from goatbeat.cli.errors import UserError
from goatbeat.cli.logs import hide_events
from goatbeat.cli.output import command, store_info
from goatbeat.core.store import PublishResult

__all__ = ["publish", "publish_and_report", "require_app", "report", "PUBLICATION_EVENTS"]

PUBLICATION_EVENTS = frozenset(
    {
        "schedule.published",
        "schedule.changed",
        "schedule.orphaned",
        "schedule.renamed",
        "schedule.retired",
        "schedule.publication_superseded",
    }
)
"""The log events the printed report repeats."""

_UNCHANGED_SHOWN = 10


def release_option(func: Any) -> Any:
    """``--release N`` (env ``GOATBEAT_RELEASE``): this deploy's release number, which orders
    its publication against the others (the ``release`` setting)."""
    return click.option(
        "--release",
        "release",
        metavar="N",
        envvar="GOATBEAT_RELEASE",
        default=None,
        help="This deploy's release number (a whole number that grows with each deploy; "
        "env GOATBEAT_RELEASE; the `release` setting): code of a lower release never "
        "overwrites what a higher one published.",
    )(func)


def use_release(app: BeatLike, release: str | None) -> None:
    """Apply ``--release`` to the app's settings (validated like the setting)."""
    if release is not None:
        configure = getattr(app, "configure", None)
        if callable(configure):
            configure(release=release)


@click.command()
@click.option("--dry-run", is_flag=True, help="Say what publishing would do; write nothing.")
@click.option(
    "--rollback",
    is_flag=True,
    help="Publish this code even if it is older than the published schedules (going back "
    "to an earlier release on purpose); it becomes the newest publication.",
)
@release_option
@click.pass_context
def publish(ctx: click.Context, dry_run: bool, rollback: bool, release: str | None) -> None:
    """Publish the app's code schedules: create, update; report orphans. Prints what it did.

    Code older than the published schedules (a lower --release, or the schedules of an
    earlier publication) writes nothing and says so, naming the schedules kept."""
    with open_app(ctx) as app:
        require_app(ctx, "publish")
        use_release(app, release)
        publish_and_report(ctx, app, origin="publish", dry_run=dry_run, rollback=rollback)


def require_app(ctx: click.Context, command: str) -> None:
    """Refuse a command that needs the app's declarations when there is no app (a bare
    ``--database``): it would treat every code schedule as no longer declared."""
    if cli_context(ctx).bare:
        raise UserError(
            f"{command} needs the app that declares the schedules: pass --app module:attribute "
            "(or set GOATBEAT_APP, or DJANGO_SETTINGS_MODULE for a Django project)"
        )


def publish_and_report(
    ctx: click.Context,
    app: BeatLike,
    *,
    origin: str,
    dry_run: bool = False,
    rollback: bool = False,
) -> PublishResult:
    """Publish (``dry_run``: pretend) and print the report on stderr (text log format)."""
    obj = cli_context(ctx)
    text = obj.log_format == "text"
    if text:
        hide_events(PUBLICATION_EVENTS)
    if rollback:
        result = app.publish(dry_run=dry_run, origin=origin, rollback=True)
    else:
        result = app.publish(dry_run=dry_run, origin=origin)
    if text:
        report(result, origin=origin, where=store_info(app.store))
    return result


def report(result: PublishResult, *, origin: str, where: str) -> None:
    """The human report of one publication, on stderr."""
    out = _err
    if result.superseded:
        kept = ", ".join(result.kept) or "none differ"
        out(
            f"goatbeat: warning: {'publish --dry-run: ' if result.dry_run else ''}this code is "
            f"older than the schedules published on {where} ({result.reason}): nothing "
            f"written, the stored definitions stay the ones dispatched (kept: {kept}); publish "
            f"from the newer release, or `{command('publish --rollback')}` to go back to this "
            "code on purpose"
        )
        return
    declared = len(result.created) + len(result.updated) + len(result.unchanged)
    counts = ", ".join(
        f"{n} {label}"
        for n, label in (
            (len(result.created), "created"),
            (len(result.updated), "changed"),
            (len(result.unchanged), "unchanged"),
            (len(result.orphaned), "orphaned"),
        )
        if n
    )
    if result.dry_run:
        out(
            f"goatbeat: publish --dry-run: {declared} code schedule(s) on {where}: "
            f"{counts or 'nothing declared'}; nothing written"
        )
    else:
        out(f"goatbeat: published {declared} code schedule(s) to {where}: {counts or 'none'}")
    verb = "would " if result.dry_run else ""
    for name in result.created:
        out(f"  {verb}create  {name}")
    for name in result.updated:
        changes = result.changes.get(name, [])
        out(f"  {verb}change  {name}")
        for change in changes:
            out(f"      {change.describe()}")
    for new, old in result.renamed.items():
        out(f"  {verb}rename  {old} -> {new} (history, last run and phase kept)")
    for old in result.retired:
        out(f"  {verb}disable {old}: renamed in code, and its new name already had a row")
    for name, reason in result.refused.items():
        out(f"  refused   {name}: {reason}")
    for name in result.orphaned:
        out(
            f"  orphaned  {name}: enabled, no longer declared in this code "
            f"(`{command('schedule prune')}` disables it)"
        )
    if result.unchanged:
        shown = ", ".join(result.unchanged[:_UNCHANGED_SHOWN])
        more = len(result.unchanged) - _UNCHANGED_SHOWN
        out(f"  unchanged {shown}" + (f" and {more} more" if more > 0 else ""))
    if result.updated and origin not in PUBLISHING_ORIGINS and not result.dry_run:
        for name in result.updated:
            fields = ", ".join(c.field for c in result.changes.get(name, [])) or "definition"
            out(
                f"goatbeat: warning: `{origin}` changed the stored definition of {name!r} "
                f"({fields}) to this checkout's; if the deployed code is newer, run "
                f"`{command('publish')}` from it (`schedule list --no-publish` lists without "
                "publishing)"
            )


def _err(line: str) -> None:
    click.echo(line, err=True)
