"""``goatbeat diff``: do the old and the new side fire at the same instants? The sources read as
the importers read them, compared by :mod:`goatbeat.diff`; exit 0 equal, 1 different, 2
error."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.cli.sources import (
    collect_entries,
    open_target_store,
    require_a_source,
    source_options,
)
from goatbeat.core.durations import format_duration, parse_duration
from goatbeat.core.errors import GoatbeatError, StoreError
from goatbeat.core.model import Source
from goatbeat.core.timeutil import iso_z, parse_instant

# The importers, the diff and the Django project's sources (goatbeat.django.beat_sources, which
# reads celery's beat_schedule) are imported by the commands that use them: every other command
# (the scheduler first) starts without them.
if TYPE_CHECKING:
    from goatbeat.diff import DiffReport


@click.command("diff")
@source_options("The goatbeat database (the new side).")
@click.option("--horizon", default="30d", show_default=True, help="How far ahead to compare.")
@click.option(
    "--start", "start_text", default=None, help="Compare from this instant (default now)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--max-instants", default=5, show_default=True, help="Differing instants shown.")
@click.option(
    "--accept-known-bugs",
    is_flag=True,
    help="Count differences explained by a known celery bug (DST, day_of_week=7) as equal.",
)
@click.option(
    "--accept-refused",
    "accept_refused",
    metavar="NAME",
    multiple=True,
    help="An entry the importer refuses (FAILED) that you accept: it stays on celery beat, "
    "or a goatbeat schedule of yours replaces it. Listed, and no difference. Repeatable.",
)
@click.option(
    "--all-sources",
    is_flag=True,
    help="Compare every goatbeat schedule, not only those imported from the given sources.",
)
@click.pass_context
def diff(
    ctx: click.Context,
    from_app: str | None,
    from_dcb: str | None,
    database: str | None,
    horizon: str,
    start_text: str | None,
    as_json: bool,
    max_instants: int,
    accept_known_bugs: bool,
    accept_refused: tuple[str, ...],
    all_sources: bool,
    last_runs_file: str | None,
    from_redbeat: str | None,
    redbeat_prefix: str | None,
    redbeat_timezone: str | None,
) -> None:
    """Compare celery's schedules with goatbeat's: exit 0 equal, 1 different, 2 error."""
    from goatbeat.diff import compute_diff

    try:
        require_a_source(
            from_app,
            from_dcb,
            from_redbeat,
            "nothing to compare: pass --from-app, --from-django-celery-beat and/or --from-redbeat",
        )
        span = parse_duration(horizon, field="horizon")
        now = datetime.now(UTC)
        start = parse_instant(start_text, "start") if start_text else now.replace(microsecond=0)
        old, _ = collect_entries(
            from_app=from_app,
            from_dcb=from_dcb,
            check_tasks=False,
            last_runs_file=last_runs_file,
            from_redbeat=from_redbeat,
            redbeat_prefix=redbeat_prefix,
            timezone=redbeat_timezone,
        )
        sources = {e.source for e in old}
        if from_app or from_redbeat is not None:
            sources.add(Source.CELERY)
        if from_dcb is not None:
            sources.add(Source.DJANGO_CELERY_BEAT)
        with open_target_store(ctx, database) as target:
            label = target.label
            try:
                new = [
                    s for s in target.store.list_schedules() if all_sources or s.source in sources
                ]
            except StoreError as exc:
                raise OperationalError(
                    f"cannot read the goatbeat database {target.label}: {exc}"
                ) from None
        report = compute_diff(
            old,
            new,
            start=start,
            horizon=span,
            max_instants=max_instants,
            accept_known=accept_known_bugs,
            accept_refused=accept_refused,
            now=now,
        )
    except click.ClickException as exc:
        if exc.exit_code != 2:
            raise UserError(exc.format_message()) from None
        raise
    except (GoatbeatError, ImportError, OSError) as exc:
        raise UserError(f"diff failed: {exc}") from None
    if as_json:
        data = report.to_dict()
        data["target"] = label
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo(f"target: {label}")
        _print_report(report, click.echo)
    ctx.exit(0 if report.equal else 1)


def _print_report(report: DiffReport, echo: Callable[[str], None]) -> None:
    width = max([len(s.name) for s in report.schedules] + [8])
    echo(
        f"{'SCHEDULE':<{width}}  STATUS     "
        f"(fire times from {iso_z(report.start)} over {format_duration(report.horizon)})"
    )
    for s in report.schedules:
        status = s.status if s.differs(accept_known=report.accept_known) else "equal"
        if s.status == "different" and status == "equal":
            status = "equal*"  # only known celery bugs differ, and they were accepted
        if s.refused is not None:
            status = "refused (accepted)" if s.accepted else "refused"
        echo(f"{s.name:<{width}}  {status}")
        for name, (o, n) in s.fields.items():
            echo(f"{'':<{width}}    {name}: celery {o!r} -> goatbeat {n!r}")
        if s.fire_difference_count:
            echo(f"{'':<{width}}    {s.fire_difference_count} fire time(s) differ; first:")
        for f in s.fire_times:
            side = "celery only  " if f.old else "goatbeat only"
            echo(f"{'':<{width}}      {iso_z(f.at)}  {side}  {f.reason or ''}")
        for note in s.notes:
            echo(f"{'':<{width}}    note: {note}")
    verdict = "EQUAL" if report.equal else "DIFFERENT"
    counts: dict[str, int] = {}
    for s in report.schedules:
        key = s.status if s.differs(accept_known=report.accept_known) else "equal"
        if s.refused is not None:
            key = "refused (accepted)" if s.accepted else "refused"
        counts[key] = counts.get(key, 0) + 1
    if report.accepted_refused:
        echo(f"accepted refused: {', '.join(report.accepted_refused)}")
    echo(f"{verdict}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
