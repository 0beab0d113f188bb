"""Code's schedules reaching the store: Beat's publication (:class:`PublicationMixin`:
``publish``, ``publish_at_start``, ``prune``, ``release_declarations``) and its log events,
what :meth:`Beat.publish <goatbeat.beat.Beat.publish>`, the scheduler's start and the CLI
write when code's schedules reach the store, and at which level (:data:`PUBLISHING_ORIGINS`)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.config import Settings
from goatbeat.core.cron import CronTrigger
from goatbeat.core.errors import InvalidSchedule, InvalidValue, ScheduleNotFound
from goatbeat.core.model import DamagedSchedule, Schedule, Source
from goatbeat.core.observability import log_event
from goatbeat.core.solar import SolarTrigger
from goatbeat.core.store import PublishResult, ScheduleStore
from goatbeat.core.submit import TaskSubmitter
from goatbeat.core.timeutil import iso_z
from goatbeat.core.triggers import CeleryCrontabTrigger, IntervalTrigger, OnceTrigger, Trigger

__all__ = ["PublicationMixin", "PUBLISHING_ORIGINS", "log_publication"]


_NOT_ONCE = frozenset({CronTrigger, IntervalTrigger, CeleryCrontabTrigger, SolarTrigger})
"""goatbeat's trigger classes that are not :class:`OnceTrigger` (none subclasses it)."""

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


class PublicationMixin:
    """The publishing part of :class:`~goatbeat.beat.Beat`, as a mixin it inherits: the
    declared schedules published to the store (:meth:`publish`, :meth:`publish_at_start`),
    the orphans pruned (:meth:`prune`), and the declarations let go of once published
    (:meth:`release_declarations`). Beat gives it the state below, set in its ``__init__``,
    and the store, the submitter and the declared schedules."""

    settings: Settings
    clock: Clock | None
    _declared: dict[str, Schedule]
    _triggers: dict[tuple[Any, ...], Trigger]
    _renames: dict[str, str]
    _released: tuple[str, frozenset[str]] | None

    if TYPE_CHECKING:

        @property
        def submitter(self) -> TaskSubmitter: ...

        @property
        def store(self) -> ScheduleStore: ...

        @property
        def schedules(self) -> list[Schedule]: ...

    def publish(
        self, *, dry_run: bool = False, origin: str = "publish", rollback: bool = False
    ) -> PublishResult:
        """Upsert the declared schedules (source ``code``) into the store, and say what it did.

        ``origin`` names what publishes (``"publish"``, ``"scheduler"``, ``"schedule list"``
        ...) for the log. Every publication logs ``schedule.published`` (created, updated,
        unchanged, orphaned), one ``schedule.changed`` per rewritten definition (its fields,
        old and new; a WARNING unless the origin is one of :data:`PUBLISHING_ORIGINS`, since
        a stale checkout would revert what the deployed code declares) and one
        ``schedule.orphaned`` WARNING per enabled code schedule no longer declared. With
        ``dry_run`` nothing is written and nothing logged: the result says what would happen.

        Publications are ordered (the ``release`` setting, else the publications' own
        order): code older than the release that published the stored definitions writes
        nothing and logs ``schedule.publication_superseded`` at WARNING naming the schedules
        kept; the result is ``superseded``. ``rollback=True`` publishes older code on purpose."""
        if self._released is not None:
            raise InvalidValue(
                "schedules", None, "the declarations were released after the start-up publication"
            )
        submitter = self.submitter
        for schedule in self._declared.values():
            submitter.validate(schedule)
        for new, old in self._renames.items():
            if old in self._declared:
                raise InvalidSchedule(
                    "renamed_from",
                    old,
                    f"schedule {new!r} says it was {old!r} before, but {old!r} is still "
                    "declared: remove one of the two",
                )
        schedules = self.schedules
        refused = self._refused_one_offs(schedules)
        if refused:
            schedules = [s for s in schedules if s.name not in refused]
        result = self.store.publish(
            schedules,
            source=Source.CODE,
            dry_run=dry_run,
            release=self.settings.release,
            rollback=rollback,
            renames=self._renames,
        )
        if refused:
            result = dataclasses.replace(
                result,
                refused=refused,
                orphaned=[name for name in result.orphaned if name not in refused],
            )
        if not dry_run:
            log_publication(result, origin=origin)
        return result

    def _refused_one_offs(self, schedules: Sequence[Schedule]) -> dict[str, str]:
        """The declared one-offs whose instant is past and that the store does not already
        hold with that instant, each with the reason. A stored one with the same instant is
        ended (it ran, was missed or skipped): publishing it is no error, whatever the time."""
        now = (self.clock or SystemClock()).now()
        refused: dict[str, str] = {}
        for schedule in schedules:
            trigger = schedule.trigger
            # The classes known to be no one-off are passed over without a call.
            if trigger.__class__ in _NOT_ONCE or not isinstance(trigger, OnceTrigger):
                continue
            if trigger.at > now:
                continue
            try:
                stored = self.store.get(schedule.name)
            except ScheduleNotFound:
                stored = None
            if (
                stored is not None
                and not isinstance(stored, DamagedSchedule)
                and stored.source is Source.CODE
                and stored.trigger == trigger
            ):
                continue
            refused[schedule.name] = (
                f"the one-off instant {iso_z(trigger.at)} is already past (now {iso_z(now)}) "
                "and was never stored with it: declare a future instant, or remove the "
                "declaration"
            )
        return refused

    def prune(self) -> list[str]:
        """Disable code schedules in the store that are no longer declared."""
        if self._released is None:
            keep = set(self._declared)
            check = self.store.publish(
                self.schedules,
                source=Source.CODE,
                dry_run=True,
                release=self.settings.release,
                renames=self._renames,
            )
            if check.superseded:
                raise InvalidValue(
                    "schedules",
                    None,
                    f"not pruning: this code is older than the published schedules "
                    f"({check.reason}); prune from the newer release",
                )
        else:
            keep = set(self._released[0].split("\n")) if self._released[0] else set()
        names = self.store.prune(keep, source=Source.CODE)
        if names:
            log_event("schedule.pruned", schedules=names)
        return names

    def publish_at_start(self) -> PublishResult:
        """What a scheduler does when it starts: publish, then (``prune_on_publish``) disable
        the orphaned code schedules."""
        result = self.publish(origin="scheduler")
        if self.settings.prune_on_publish and result.orphaned and not result.superseded:
            self.prune()
        return result

    def release_declarations(self) -> None:
        """Let go of the declared :class:`Schedule` values once they are published, keeping
        only what a running scheduler still asks (their names, for :meth:`prune`, and their
        tasks, for the allow-list): a long-running ``goatbeat scheduler`` of 100,000 code
        schedules does not hold them all for its lifetime. Afterwards :attr:`schedules` is
        empty, and :meth:`publish` refuses (it would disable everything as orphaned)."""
        if self._released is None:
            # The names as one string (a name holds no control character): 100,000 small
            # strings kept alive would pin the memory the declarations shared with them.
            self._released = (
                "\n".join(self._declared),
                frozenset(s.task for s in self._declared.values()),
            )
        self._declared = {}
        self._triggers = {}
