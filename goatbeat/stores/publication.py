"""What a publication, an edit and an enable or disable write, decided from the rows they
read: inserts, compare-and-set replaces, recorded fingerprints, and the result reported."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from goatbeat.core.errors import InvalidSchedule
from goatbeat.core.model import SCHEDULE_INVALID, Schedule, Source
from goatbeat.core.store import FieldChange, PublishResult, definition_changes
from goatbeat.stores.definitions import (
    definition_of,
    fingerprint,
    first_run,
    published_enabled,
    row_definition,
    schedule_to_row,
    utc,
)
from goatbeat.stores.dialect import Replace
from goatbeat.stores.rows import schedule_from_row


@dataclass(slots=True)
class PublishActions:
    inserts: list[dict[str, Any]] = field(default_factory=list)
    replaces: list[Replace] = field(default_factory=list)
    fingerprints: list[tuple[int, str]] = field(default_factory=list)
    """(id, fingerprint) of unchanged rows that had none (published before schema 3)."""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    changes: dict[str, list[FieldChange]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.inserts or self.replaces)

    def result(self, *, orphaned: Sequence[str] = (), dry_run: bool = False) -> PublishResult:
        return PublishResult(
            created=self.created,
            updated=self.updated,
            unchanged=self.unchanged,
            changes=self.changes,
            orphaned=list(orphaned),
            dry_run=dry_run,
            refreshed=self.refreshed,
        )


def plan_publish(
    schedules: Sequence[Schedule],
    existing: Mapping[str, Mapping[str, Any]],
    *,
    source: Source,
    now: datetime,
    definitions: Sequence[dict[str, Any] | None] | None = None,
    follow_last_run: bool = False,
    unchanged: Collection[str] = (),
    keep_phase: Collection[str] = (),
) -> PublishActions:
    """Decide what publishing ``schedules`` writes, given the stored rows with those names
    (rows carry ``published_fingerprint``).

    ``unchanged``: names the store has already found stored with exactly the declared
    definition, of this source, with a fingerprint recorded and not quarantined (PostgreSQL
    compares them in the database); they need no row in ``existing`` and write nothing (and
    their ``definitions`` entry may be None; any other None is computed here).

    Raises InvalidSchedule (field ``name``) when a name belongs to another source, before
    anything is written. The stored ``enabled`` flag wins over the declared one, except with
    ``follow_last_run`` when the source changed its flag since the last publish and the row
    still has the flag that publish declared (see :func:`source_toggle`).
    ``follow_last_run``: see :meth:`goatbeat.core.store.ScheduleStore.publish`.
    ``keep_phase``: names of rows a rename just took over: a changed definition whose trigger
    and zone are the same keeps the row's ``next_run_at`` (the phase goes on)."""
    source = Source(source)
    actions = PublishActions()
    if definitions is None:
        definitions = [definition_of(s) for s in schedules]
    for schedule, wanted in zip(schedules, definitions, strict=True):
        if schedule.name in unchanged:
            actions.unchanged.append(schedule.name)
            continue
        if wanted is None:
            wanted = definition_of(schedule)
        row = existing.get(schedule.name)
        if row is None:
            anchor = schedule.last_run_at or now
            actions.inserts.append(
                schedule_to_row(
                    schedule,
                    source=source,
                    enabled=schedule.enabled,
                    next_run_at=first_run(schedule, anchor),
                    definition=wanted,
                    published=True,
                    declared_enabled=schedule.enabled if follow_last_run else None,
                )
            )
            actions.created.append(schedule.name)
            continue
        if row["source"] != source.value:
            raise InvalidSchedule(
                "name",
                schedule.name,
                f"{schedule.name!r} already exists with source {row['source']!r}, "
                f"not {source.value!r}",
            )
        quarantined = row["last_status"] == SCHEDULE_INVALID
        stored = row_definition(row)
        enabled = bool(row["enabled"])
        stored_last: datetime | None = utc(row["last_run_at"])
        later: datetime | None = None
        if follow_last_run and schedule.last_run_at is not None:
            theirs = utc(schedule.last_run_at)
            assert theirs is not None
            later = theirs if stored_last is None or theirs > stored_last else stored_last
        printed = fingerprint(wanted, schedule.enabled if follow_last_run else None)
        toggle = source_toggle(row, schedule) if follow_last_run else None
        toggled = [] if toggle is None else [FieldChange(field="enabled", old=enabled, new=toggle)]
        if wanted == stored and not quarantined and toggle is not None:
            # The source enabled or disabled it since the last publish; nobody toggled it in
            # goatbeat: follow the source.
            nxt = schedule.first_run_after(later or now) if toggle else None
            actions.replaces.append(replacing(row, wanted, toggle, nxt, later, printed))
            actions.changes[schedule.name] = toggled
            actions.updated.append(schedule.name)
            continue
        if wanted == stored and not quarantined:
            recorded = row.get("published_fingerprint")
            if later is None or later == stored_last:
                actions.unchanged.append(schedule.name)
                if recorded is None:
                    actions.fingerprints.append((int(row["id"]), printed))
                elif follow_last_run and recorded != printed:
                    # Recorded without the source's flag (before 0.7.1), or with the other
                    # one while an operator's toggle already matched it: record what the
                    # source says now, so the next import can tell who changed it.
                    nxt = utc(row["next_run_at"])
                    actions.replaces.append(replacing(row, wanted, enabled, nxt, None, printed))
                continue
            # Another scheduler (celery) ran it since: move the phase forward, never back.
            nxt = schedule.first_run_after(later) if enabled else None
            planned = utc(row["next_run_at"])
            if nxt is not None and planned is not None and planned > nxt:
                nxt = planned
            actions.replaces.append(replacing(row, wanted, enabled, nxt, later, printed))
            actions.refreshed.append(schedule.name)
            continue
        changes = definition_changes(stored, wanted)
        if quarantined:
            changes.append(FieldChange(field="last_status", old=SCHEDULE_INVALID, new=None))
        if toggle is not None:
            enabled = toggle
            changes.extend(toggled)
        actions.changes[schedule.name] = changes
        # A changed definition, or a quarantined row (repaired by this publish).
        anchor = now if later is None else later
        nxt = schedule.first_run_after(anchor) if enabled else None
        if (
            schedule.name in keep_phase
            and not quarantined
            and wanted["trigger"] == stored["trigger"]
            and wanted["timezone"] == stored["timezone"]
        ):
            nxt = utc(row["next_run_at"])
        actions.replaces.append(replacing(row, wanted, enabled, nxt, later, printed))
        actions.updated.append(schedule.name)
    return actions


def source_toggle(row: Mapping[str, Any], schedule: Schedule) -> bool | None:
    """The ``enabled`` flag an import publication writes over the stored one, or None to keep
    the stored one: the source's new flag when the source changed it since the last
    publication (:func:`~goatbeat.stores.definitions.published_enabled`) and the row still
    has the flag that publication declared (nobody toggled it in goatbeat since). An
    operator's toggle is kept while the source did not change; when both changed, they agree
    (a flag has two values), so there is nothing to decide. Unknown (no flag recorded): kept."""
    said = published_enabled(row)
    if said is None or schedule.enabled == said or bool(row["enabled"]) != said:
        return None
    return bool(schedule.enabled)


def update_replace(
    schedule: Schedule,
    row: Mapping[str, Any],
    *,
    now: datetime,
    definition: dict[str, Any] | None = None,
) -> Replace:
    """What :meth:`ScheduleStore.update` writes: the definition, ``enabled``, and a
    ``next_run_at`` recomputed when the definition changed or the schedule was re-enabled."""
    wanted = definition if definition is not None else definition_of(schedule)
    quarantined = row["last_status"] == SCHEDULE_INVALID
    nxt = row["next_run_at"]
    if not schedule.enabled:
        nxt = None
    elif wanted != row_definition(row) or not row["enabled"] or quarantined:
        nxt = schedule.first_run_after(now)
    # An edit keeps the last run and the published fingerprint (that it differs now is how
    # an edit is told from a publish).
    return replacing(row, wanted, bool(schedule.enabled), nxt, None, None)


def replacing(
    row: Mapping[str, Any],
    definition: Mapping[str, Any],
    enabled: bool,
    next_run_at: datetime | None,
    last_run_at: datetime | None,
    printed: str | None,
) -> Replace:
    """``definition`` and the state given written over ``row``, a quarantine cleared (None
    ``last_run_at`` or fingerprint ``printed``: the stored one kept)."""
    last_status = None if row["last_status"] == SCHEDULE_INVALID else row["last_status"]
    state = {"enabled": enabled, "next_run_at": next_run_at, "last_run_at": last_run_at}
    values = {**definition, **state, "last_status": last_status, "published_fingerprint": printed}
    return Replace.of(row, values)


def enabled_values(
    row: Mapping[str, Any], enabled: bool, *, now: datetime
) -> dict[str, Any] | None:
    """Columns :meth:`ScheduleStore.set_enabled` writes (``enabled``, ``next_run_at``,
    ``last_status``), or None when there is nothing to change.

    Disabling never needs to decode the row, so a damaged one can always be disabled. Enabling
    does: a row that still cannot be decoded raises DamagedRow; one the scheduler quarantined
    and somebody repaired by hand is scheduled again from ``now``."""
    quarantined = row["last_status"] == SCHEDULE_INVALID
    if not enabled:
        if not row["enabled"]:
            return None
        return {"enabled": False, "next_run_at": None, "last_status": row["last_status"]}
    schedule = schedule_from_row(row)
    if row["enabled"] and not quarantined and row["next_run_at"] is not None:
        # Already running. (An enabled row without next_run_at is recomputed: a quarantine
        # whose mark a late submission outcome overwrote, or a trigger that has ended.)
        return None
    return {
        "enabled": True,
        "next_run_at": schedule.first_run_after(now),
        "last_status": None if quarantined else row["last_status"],
    }


@dataclass(frozen=True, slots=True)
class Order:
    """Where a code publication stands against the latest recorded one."""

    verdict: str
    """``"first"``, ``"same"``, ``"newer"`` or ``"older"``."""
    reason: str = ""
    record: bool = False
    """Whether a publication that goes ahead records a new generation."""


def publication_order(
    current: Mapping[str, Any] | None,
    printed: str,
    release: int | None,
    *,
    earlier: int | None,
    rollback: bool = False,
) -> Order:
    """The rule of :meth:`goatbeat.core.store.ScheduleStore.publish`: ``current`` is the
    latest ``goatbeat_publication`` row (None: none yet), ``printed`` this code's set
    fingerprint, ``earlier`` the latest generation that published it (None: never)."""
    if current is None:
        return Order("first", record=True)
    theirs = current["release"]
    generation = int(current["generation"])
    if rollback:
        return Order("newer", record=True)
    if printed == current["fingerprint"]:
        # The very schedules published last: nothing to revert, whatever the number says.
        bump = release is not None and (theirs is None or release > theirs)
        return Order("same", record=bump)
    if release is not None and theirs is not None and release != theirs:
        if release > theirs:
            return Order("newer", record=True)
        return Order(
            "older",
            f"release {release} is older than release {theirs}, which published "
            f"generation {generation}",
        )
    if earlier is not None and earlier < generation:
        return Order(
            "older",
            f"this code's schedules are those of generation {earlier}, "
            f"replaced by generation {generation}"
            + ("" if theirs is None else f" (release {theirs})"),
        )
    if release is None and theirs is not None:
        return Order(
            "older",
            f"generation {generation} was published by release {theirs} and this code "
            "gives no release number, so it cannot be told newer",
        )
    return Order("newer", record=True)
