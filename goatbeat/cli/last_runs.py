"""``goatbeat export_last_runs``: goatbeat's last runs back to celery beat before a rollback
(django-celery-beat's rows, a JSON file for stock beat's ``celerybeat-schedule``, or
celery-redbeat's meta), so celery runs nothing goatbeat already ran."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.cli.sources import one_line, open_target_store
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import Source
from goatbeat.core.timeutil import iso_z
from goatbeat.stores import redact_url


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
