"""Watching the database itself: a promotion, a restore (docs/failover.md, "When PostgreSQL
itself fails over").

:class:`DatabaseWatch` compares the database's identity (system identifier, timeline: the
store's optional ``database_identity()``) with the last one seen, and keeps this process's
recent claims, so that when the identity changes it can say which of them the new database
does not have (they will be claimed and sent again).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from goatbeat.core.clock import Clock
from goatbeat.core.errors import StoreError
from goatbeat.core.model import Occurrence
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore

__all__ = ["DatabaseWatch", "RECENT_CLAIMS", "LOST_KEYS_LOGGED", "LOST_CHECK_SCHEDULES"]

RECENT_CLAIMS = 20_000
"""This process's latest claims kept in memory, to name those a promotion lost."""
LOST_KEYS_LOGGED = 1000
"""The lost claims' keys named in ``store.database_changed`` (all of them up to this many)."""
LOST_CHECK_SCHEDULES = 500
"""At most this many schedules are read back to find them (one query each, once)."""


class DatabaseWatch:
    """The database's identity as last seen, and this process's recent claims. Used from the
    scheduler's thread only."""

    def __init__(
        self, store: ScheduleStore, *, clock: Clock, scheduler_id: str, every: timedelta
    ) -> None:
        self.store = store
        self.clock = clock
        self.scheduler_id = scheduler_id
        self.every = every
        """Look at most once per this long (the lease renewal interval)."""
        self._identity: tuple[str, int] | None = None
        self._identity_seen_at: datetime | None = None
        self._identity_checked_at: float | None = None
        self._recent_claims: deque[tuple[str, str, datetime, int]] = deque(maxlen=RECENT_CLAIMS)

    def claimed(self, occurrences: Iterable[Occurrence], token: int) -> None:
        """Remember claims made under ``token``, to name them if a promotion loses them."""
        self._recent_claims.extend(
            (o.schedule_name, o.idempotency_key, o.scheduled_at, token) for o in occurrences
        )

    def look_again(self) -> None:
        """After a store error the connection may lead to another server (a promoted
        standby): look at the database's identity before anything is claimed there."""
        self._identity_checked_at = None

    def watch(self) -> None:
        """Compare the database's identity with the last one seen, once per renewal interval.
        A change means a standby was promoted (new timeline) or another database is behind the
        URL (a restore): what the old primary committed and had not shipped is gone, claims
        included, and those occurrences are claimed and sent again. Said loudly:
        :meth:`database_changed`."""
        identify = getattr(self.store, "database_identity", None)
        if not callable(identify):
            return
        now = self.clock.monotonic()
        every = self.every.total_seconds()
        if self._identity_checked_at is not None and now - self._identity_checked_at < every:
            return
        identity = identify()
        self._identity_checked_at = now
        if identity is None:
            return
        previous, self._identity = self._identity, identity
        if previous is not None and previous != identity:
            self.database_changed(previous, identity)
        self._identity_seen_at = self.clock.now()

    def database_changed(self, previous: tuple[str, int], identity: tuple[str, int]) -> None:
        """ERROR ``store.database_changed``: what changed, since when the old database was
        last seen, and the window of this process's own claims the new one does not have
        (they will be claimed and sent again)."""
        lost = self.lost_claims()
        fields: dict[str, Any] = {}
        if lost:
            fields = {
                "lost_claims": len(lost),
                "may_repeat_from": min(at for _, at in lost),
                "may_repeat_to": max(at for _, at in lost),
                "lost_keys": [key for key, _ in lost[:LOST_KEYS_LOGGED]],
            }
        same_cluster = previous[0] == identity[0]
        log_event(
            "store.database_changed",
            level=logging.ERROR,
            scheduler_id=self.scheduler_id,
            reason="promotion: the database is on a new timeline"
            if same_cluster
            else "another database: its system identifier changed (a restore, a new cluster)",
            previous_system_identifier=previous[0],
            system_identifier=identity[0],
            previous_timeline=previous[1],
            timeline=identity[1],
            old_database_last_seen=self._identity_seen_at,
            claimed_by_this_process_and_lost=len(lost),
            **fields,
            detail=(
                "what the old primary committed and had not replicated is gone: occurrences "
                "claimed there are claimed and sent again (their keys repeat). This process's "
                "lost claims are listed; other schedulers' claims since old_database_last_seen "
                "may repeat too. A synchronous standby prevents it (docs/failover.md)"
            ),
        )

    def lost_claims(self) -> list[tuple[str, datetime]]:
        """(key, scheduled_at) of this process's recent claims the database no longer has as
        this process claimed them: gone, or claimed again since (another fencing token)."""
        by_name: dict[str, list[tuple[str, datetime, int]]] = {}
        for name, key, at, token in self._recent_claims:
            by_name.setdefault(name, []).append((key, at, token))
        lost: list[tuple[str, datetime]] = []
        for name, claims in list(by_name.items())[:LOST_CHECK_SCHEDULES]:
            try:
                found = self.store.executions(name=name, limit=len(claims) + 500)
            except StoreError:
                continue
            kept = {(e.idempotency_key, e.fencing_token, e.scheduler_id) for e in found}
            lost.extend(
                (key, at)
                for key, at, token in claims
                if (key, token, self.scheduler_id) not in kept
            )
        return sorted(lost, key=lambda c: c[1])
