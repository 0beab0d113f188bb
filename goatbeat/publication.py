"""The log events of a publication: what :meth:`Beat.publish <goatbeat.beat.Beat.publish>`,
the scheduler's start and the CLI write when code's schedules reach the store, and at which
level (:data:`PUBLISHING_ORIGINS`)."""

from __future__ import annotations

import logging

from goatbeat.core.observability import log_event
from goatbeat.core.store import PublishResult

__all__ = ["PUBLISHING_ORIGINS", "log_publication"]


PUBLISHING_ORIGINS = frozenset({"publish", "scheduler"})
"""The commands whose job is to publish: a definition they change is logged at INFO. Any other
command (``schedule list``, ``schedule prune`` ...) that changes one logs a WARNING."""


def log_publication(result: PublishResult, *, origin: str) -> None:
    """The log events of one publication (see :meth:`Beat.publish`)."""
    if result.superseded:
        log_event(
            "schedule.publication_superseded",
            level=logging.WARNING,
            origin=origin,
            schedules=result.kept,
            generation=result.generation,
            release=result.release,
            reason=result.reason,
            hint="this code is older than the published schedules: nothing was written and "
            "the stored definitions are the ones dispatched"
            + (f" ({', '.join(result.kept)} kept as published)" if result.kept else "")
            + "; publish from the newer release, or `publish --rollback` to go back on purpose",
        )
        return
    for new, old in result.renamed.items():
        log_event("schedule.renamed", schedule=new, renamed_from=old, origin=origin)
    for old in result.retired:
        log_event(
            "schedule.retired",
            level=logging.WARNING,
            schedule=old,
            origin=origin,
            hint="renamed in code, and the new name already had a row: the old one is disabled",
        )
    log_event(
        "schedule.published",
        origin=origin,
        created=result.created,
        updated=result.updated,
        unchanged=len(result.unchanged),
        orphaned=result.orphaned,
    )
    level = logging.INFO if origin in PUBLISHING_ORIGINS else logging.WARNING
    for name in result.updated:
        changes = result.changes.get(name, [])
        log_event(
            "schedule.changed",
            level=level,
            schedule=name,
            origin=origin,
            fields=[c.field for c in changes],
            old={c.field: c.old for c in changes},
            new={c.field: c.new for c in changes},
        )
    for name, reason in result.refused.items():
        log_event(
            "schedule.refused",
            level=logging.ERROR,
            schedule=name,
            origin=origin,
            reason=reason,
        )
    for name in result.orphaned:
        log_event(
            "schedule.orphaned",
            level=logging.WARNING,
            schedule=name,
            origin=origin,
            hint="no longer declared in code but still enabled: "
            "`goatbeat schedule prune` disables it",
        )
