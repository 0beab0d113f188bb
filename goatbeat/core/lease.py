"""LeaseManager: is this scheduler allowed to claim right now?

The store grants the lease with an expiry in the DATABASE clock; this manager adds the local
deadline: the holder trusts its lease only until ``monotonic_at_request + ttl - renew_interval``,
measured on the monotonic clock from *before* it asked. So even if the request sat in a queue,
or the process is frozen afterwards, the holder stops dispatching before anybody else could
take over (that can only happen after ``ttl`` of database time). The fencing token from the
grant goes with every claim, which the store refuses if the token is no longer current.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import StoreError
from goatbeat.core.instance import split_instance
from goatbeat.core.model import LeaseGrant
from goatbeat.core.observability import log_event
from goatbeat.core.store import ScheduleStore

__all__ = ["LeaseManager", "DEFAULT_LEASE_NAME"]

DEFAULT_LEASE_NAME = "scheduler"


class LeaseManager:
    def __init__(
        self,
        store: ScheduleStore,
        *,
        holder: str,
        ttl: timedelta = timedelta(seconds=30),
        renew_interval: timedelta = timedelta(seconds=10),
        name: str = DEFAULT_LEASE_NAME,
        clock: Clock | None = None,
    ) -> None:
        if renew_interval >= ttl:
            raise ValueError(
                f"lease_renew_interval: {renew_interval} must be below lease_ttl {ttl}"
            )
        self.store = store
        self.holder = holder
        """Who holds the lease: this process's identity (:func:`new_instance`)."""
        self.scheduler_id = split_instance(holder)[0]
        self.ttl = ttl
        self.renew_interval = renew_interval
        self.name = name
        self.clock = clock or SystemClock()
        self.grant: LeaseGrant | None = None
        self._requested_at = 0.0  # monotonic instant of the last successful request
        self._deadline = 0.0
        self._highest_token = 0

    @property
    def valid_for(self) -> timedelta:
        """How long the lease is trusted after the request: ttl - renew_interval."""
        return self.ttl - self.renew_interval

    def is_held(self) -> bool:
        """True while we hold a grant and the local deadline has not passed."""
        return self.grant is not None and self.clock.monotonic() < self._deadline

    def remaining(self) -> float:
        """Seconds until the local deadline (0 when not held)."""
        if self.grant is None:
            return 0.0
        return max(0.0, self._deadline - self.clock.monotonic())

    def due_for_renewal(self) -> bool:
        return self.grant is None or (
            self.clock.monotonic() >= self._requested_at + self.renew_interval.total_seconds()
        )

    def seconds_until_renewal(self) -> float:
        if self.grant is None:
            return 0.0
        return max(
            0.0, self._requested_at + self.renew_interval.total_seconds() - self.clock.monotonic()
        )

    def acquire(self) -> LeaseGrant | None:
        """Acquire or renew. Returns the grant, or None when another scheduler holds it."""
        started = self.clock.monotonic()
        previous = self.grant
        try:
            grant = self.store.acquire_lease(self.name, self.holder, self.ttl)
        except StoreError:
            # We cannot know whether the renewal landed; the local deadline still bounds us.
            raise
        if grant is None:
            if previous is not None:
                log_event(
                    "lease.lost",
                    scheduler_id=self.scheduler_id,
                    instance=self.holder,
                    fencing_token=previous.token,
                    lease=self.name,
                )
            self.grant = None
            self._deadline = 0.0
            return None
        if grant.token < self._highest_token:
            # Fencing tokens only grow: a lower one means the database forgot committed lease
            # changes (an asynchronous standby promoted, a restore), so claims made under the
            # higher ones may be gone and claimed again.
            log_event(
                "lease.token_went_back",
                level=logging.ERROR,
                scheduler_id=self.scheduler_id,
                instance=self.holder,
                lease=self.name,
                fencing_token=grant.token,
                highest_token_seen=self._highest_token,
                detail=(
                    "the database lost committed lease changes (a promoted asynchronous "
                    "standby, a restored backup): occurrences claimed under tokens above "
                    f"{grant.token} may be claimed and sent again"
                ),
            )
        self._highest_token = max(self._highest_token, grant.token)
        self.grant = grant
        self._requested_at = started
        self._deadline = started + self.valid_for.total_seconds()
        if previous is None or previous.token != grant.token:
            log_event(
                "lease.acquired",
                scheduler_id=self.scheduler_id,
                instance=self.holder,
                fencing_token=grant.token,
                lease=self.name,
                expires_at=grant.expires_at,
            )
        return grant

    def drop(self) -> None:
        """Forget the grant locally (after a refused claim or a lost connection)."""
        if self.grant is not None:
            log_event(
                "lease.lost",
                scheduler_id=self.scheduler_id,
                instance=self.holder,
                fencing_token=self.grant.token,
                lease=self.name,
            )
        self.grant = None
        self._deadline = 0.0

    def release(self) -> bool:
        """Give the lease up (graceful shutdown) so a standby takes over at once."""
        grant = self.grant
        self.grant = None
        self._deadline = 0.0
        if grant is None:
            return False
        released = self.store.release_lease(self.name, self.holder, grant.token)
        if released:
            log_event(
                "lease.released",
                scheduler_id=self.scheduler_id,
                instance=self.holder,
                fencing_token=grant.token,
                lease=self.name,
            )
        return released
