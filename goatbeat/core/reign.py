"""Reigns: one per lease a scheduler may hold, and the sharing out of shard leases.

A :class:`Reign` is one lease (a :class:`~goatbeat.core.lease.LeaseManager`) with what the
loop knows under it: the shard it covers (every schedule with a single lease), the fencing
token last granted (a new one: this scheduler became its leader), this iteration's read of
``next_due_at`` and whether rows of it may be backing off. A scheduler has one reign per lease
it may hold: one with a single lease, one per shard with ``shards`` > 1. Every step of the loop
(:mod:`goatbeat.core.scheduler`) is given the reign it works for; nothing points at "the
current shard".

:class:`ShardBalance` renews, releases and takes the shard reigns so that every live member
holds its fair share (docs/scaling.md); :class:`SingleLease` renews the one reign of a
scheduler without shards, and logs and sleeps as a standby while another holds it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import cast

from goatbeat.core.clock import Clock
from goatbeat.core.config import Settings
from goatbeat.core.dbwatch import DatabaseWatch
from goatbeat.core.errors import InvalidValue, StoreError
from goatbeat.core.instance import split_instance
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import LeaseGrant, Occurrence
from goatbeat.core.observability import log_event
from goatbeat.core.shards import ALL, Shard, fair_share
from goatbeat.core.store import ScheduleStore, ShardedStore

__all__ = [
    "Reign",
    "SingleLease",
    "ShardBalance",
    "lease_plan",
    "MIN_IDLE_SLEEP",
    "ERROR_BACKOFF_BASE",
]

MIN_IDLE_SLEEP = 0.01
"""Floor for the sleep of an iteration that did nothing, so a due row that cannot be claimed
(a lost compare-and-set, a renewal that keeps failing) never turns into a busy loop."""
ERROR_BACKOFF_BASE = 0.5
"""The first sleep after a store error (it doubles with each one in a row)."""


def lease_plan(
    store: ScheduleStore,
    settings: Settings,
    *,
    instance: str,
    clock: Clock,
    name: str,
    watch: DatabaseWatch,
) -> SingleLease | ShardBalance:
    """The reigns of a scheduler with ``settings`` (held by ``instance``) and how they are
    taken: the single lease ``name``, or one lease per shard (``shards`` > 1, which needs a
    store that runs shards: PostgreSQL)."""

    def lease(lease_name: str) -> LeaseManager:
        return LeaseManager(
            store,
            holder=instance,
            ttl=settings.lease_ttl,
            renew_interval=settings.lease_renew_interval,
            name=lease_name,
            clock=clock,
        )

    if settings.shards <= 1:
        return SingleLease(
            Reign(lease(name), store),
            store,
            instance=instance,
            scheduler_id=settings.scheduler_id,
            max_sleep=settings.max_sleep,
            watch=watch,
        )
    if not getattr(store, "supports_shards", False):
        kind = type(store).__name__
        raise InvalidValue(
            "shards",
            settings.shards,
            f"{settings.shards} needs PostgreSQL: {kind} runs a single shard "
            "(one process); set shards to 1",
        )
    sharded = cast(ShardedStore, store)
    shards = [Shard(index=i, count=settings.shards) for i in range(settings.shards)]
    return ShardBalance(
        sharded,
        [Reign(lease(shard.lease), store, shard=shard, sharded=sharded) for shard in shards],
        instance=instance,
        scheduler_id=settings.scheduler_id,
        lease_ttl=settings.lease_ttl,
        renew_interval=settings.lease_renew_interval,
        clock=clock,
    )


class Reign:
    """One lease this scheduler may hold and what the loop knows under it (see the module
    docstring). ``sharded`` is the store to read one shard of; None reads every schedule."""

    __slots__ = ("lease", "shard", "token", "due_read", "retries_possible", "_store", "_sharded")

    def __init__(
        self,
        lease: LeaseManager,
        store: ScheduleStore,
        *,
        shard: Shard = ALL,
        sharded: ShardedStore | None = None,
    ) -> None:
        self.lease = lease
        self.shard = shard
        self.token: int | None = None
        """The fencing token last granted and seen (None: not leading under this lease)."""
        self.due_read: tuple[datetime | None] | None = None
        """This iteration's read of next_due_at(), once made (a 1-tuple: None is an answer)."""
        self.retries_possible = True
        """Whether a claimed row may be backing off, so the sleep must ask for the next retry."""
        self._store = store
        self._sharded = sharded

    @property
    def name(self) -> str:
        return self.lease.name

    def held(self) -> bool:
        """Whether the lease is held, within its local deadline."""
        return self.lease.is_held()

    @property
    def grant(self) -> LeaseGrant:
        """The grant of a held lease."""
        grant = self.lease.grant
        assert grant is not None
        return grant

    def took(self, grant: LeaseGrant) -> bool:
        """Note a granted lease; whether its token is new (this scheduler became its leader:
        rows another reign left backing off are woken for)."""
        if grant.token == self.token:
            return False
        self.token = grant.token
        self.retries_possible = True
        return True

    def drop(self) -> None:
        """Stop trusting the lease (a store error, a refused claim, a bug): dropped locally,
        its token forgotten."""
        self.lease.drop()
        self.token = None

    # -- the store, read for this reign's shard -------------------------------------------------

    def pending(self, limit: int) -> list[Occurrence]:
        if self._sharded is None:
            return self._store.pending(limit=limit)
        return self._sharded.pending(limit=limit, shard=self.shard)

    def next_due_at(self) -> datetime | None:
        if self._sharded is None:
            return self._store.next_due_at()
        return self._sharded.next_due_at(shard=self.shard)

    def next_retry_at(self) -> datetime | None:
        if self._sharded is None:
            return self._store.next_retry_at()
        return self._sharded.next_retry_at(shard=self.shard)


class SingleLease:
    """The one reign of a scheduler without shards: acquired or renewed when due, and while
    another scheduler holds it, the standby's log records and its sleep."""

    def __init__(
        self,
        reign: Reign,
        store: ScheduleStore,
        *,
        instance: str,
        scheduler_id: str,
        max_sleep: timedelta,
        watch: DatabaseWatch,
    ) -> None:
        self.reign = reign
        self.reigns = [reign]
        self.store = store
        self.instance = instance
        self.scheduler_id = scheduler_id
        self.max_sleep = max_sleep
        self.watch = watch
        self._standby_logged = False
        self._standby_iterations = 0

    def renew(self) -> bool:
        """Acquire or renew the lease when due; whether this scheduler became leader."""
        reign = self.reign
        # Past the local deadline we renew at once rather than wait for the renewal slot.
        if not (reign.lease.due_for_renewal() or not reign.held()):
            return False
        self.watch.watch()
        grant = reign.lease.acquire()
        if grant is None:
            self._on_standby()
            return False
        if reign.took(grant):
            self._standby_logged = False
            self._standby_iterations = 0
            return True
        log_event(
            "lease.renewed",
            level=logging.DEBUG,
            scheduler_id=self.scheduler_id,
            fencing_token=grant.token,
            lease=reign.name,
        )
        return False

    def _on_standby(self) -> None:
        self.reign.token = None
        self._standby_iterations += 1
        if self._standby_logged:
            # A heartbeat: at DEBUG an operator sees the standby is alive and still trying.
            log_event(
                "lease.standby",
                level=logging.DEBUG,
                scheduler_id=self.scheduler_id,
                lease=self.reign.name,
                heartbeat=True,
                iterations=self._standby_iterations,
            )
            return
        self._standby_logged = True
        holder: str | None = None
        try:
            current = self.store.read_lease(self.reign.name)
        except StoreError:
            current = None
        if current is not None:
            holder = current[0]
        log_event(
            "lease.standby",
            scheduler_id=self.scheduler_id,
            instance=self.instance,
            lease=self.reign.name,
            holder=None if holder is None else split_instance(holder)[0],
            holder_instance=holder,
        )

    def standby_sleep(self) -> float:
        """Until the holder's lease could expire (a release NOTIFY ends the wait sooner)."""
        max_sleep = self.max_sleep.total_seconds()
        try:
            current = self.store.read_lease(self.reign.name)
            if current is None:
                return MIN_IDLE_SLEEP
            _holder, _token, expires_at, expired = current
            if expired:
                return MIN_IDLE_SLEEP
            until = (expires_at - self.store.now()).total_seconds()
        except StoreError:
            return min(max_sleep, ERROR_BACKOFF_BASE)
        # Wake just after the expiry; a release NOTIFY ends the wait sooner.
        return max(MIN_IDLE_SLEEP, min(max_sleep, until + MIN_IDLE_SLEEP))


class ShardBalance:
    """The shard reigns of one scheduler, shared out among the live members: renew those
    held, release extras to a member short of its fair share, take free ones up to this
    scheduler's share, or any shard left free for a renewal interval."""

    def __init__(
        self,
        store: ShardedStore,
        reigns: list[Reign],
        *,
        instance: str,
        scheduler_id: str,
        lease_ttl: timedelta,
        renew_interval: timedelta,
        clock: Clock,
    ) -> None:
        self.store = store
        self.reigns = reigns
        self.instance = instance
        self.scheduler_id = scheduler_id
        self.lease_ttl = lease_ttl
        self.renew_interval = renew_interval
        self.clock = clock
        self._free_since: dict[int, float] = {}
        self._view: tuple[tuple[int, ...], int, int] | None = None

    def live_window(self) -> timedelta:
        """A scheduler whose heartbeat is older than this no longer counts as a member. Sharded
        schedulers beat at least once per ``lease_renew_interval``; a crashed one drops out
        before its leases expire (``lease_ttl`` after its last renewal), so the survivors'
        shares already include its shards when they come free."""
        renew = self.renew_interval
        return max(renew * 1.5, self.lease_ttl - renew)

    def balance(self) -> tuple[bool, float]:
        """Renew, release and acquire shard leases. Returns whether a shard was newly taken
        and how long to sleep at most for the shards not held (until one may come free)."""
        store = self.store
        count = len(self.reigns)
        me = self.instance
        renew = self.renew_interval.total_seconds()
        live = store.live_schedulers(self.live_window(), shards=count)
        if me not in live:
            live = sorted([*live, me])
        target = fair_share(count, live, me)
        rows = store.read_leases([reign.name for reign in self.reigns])
        now = store.now()
        mono = self.clock.monotonic()
        became = False
        # Renew what is ours first. A lease still ours in the store that this process stopped
        # trusting (a store error, a refused claim) is renewed at once, as the single lease is.
        for reign in self.reigns:
            lease = reign.lease
            row = rows.get(lease.name)
            ours = row is not None and row[0] == me and not row[3]
            if lease.grant is None and not ours:
                continue
            if lease.grant is None or lease.due_for_renewal() or not lease.is_held():
                grant = lease.acquire()
                if grant is None:
                    reign.token = None
                elif reign.took(grant):
                    became = True
        held = [i for i, reign in enumerate(self.reigns) if reign.held()]
        # Who holds what (valid leases of live members), to see whether anybody is short.
        holdings: dict[str, int] = {m: 0 for m in live}
        free: list[int] = []
        for index, reign in enumerate(self.reigns):
            row = rows.get(reign.name)
            if index in held:
                holdings[me] = holdings.get(me, 0) + 1
                self._free_since.pop(index, None)
            elif row is None or row[3]:
                free.append(index)
                self._free_since.setdefault(index, mono)
            else:
                self._free_since.pop(index, None)
                if row[0] in holdings:
                    holdings[row[0]] += 1
        short = any(holdings[m] < fair_share(count, live, m) for m in live if m != me)
        if len(held) > target and not free and short:
            # Hand the extras over: each release NOTIFYs, the member short of its share takes
            # it at once. The highest shards go, so the members agree on the rest.
            for index in sorted(held, reverse=True)[: len(held) - target]:
                self.reigns[index].lease.release()
                self.reigns[index].token = None
                held.remove(index)
        for index in free:
            reign = self.reigns[index]
            # A free shard nobody takes within a renewal interval (the members disagree about
            # who is alive) is taken anyway: a shard without a holder is worse than an uneven
            # split.
            stranded = mono - self._free_since.get(index, mono) >= renew
            if len(held) >= target and not stranded:
                continue
            grant = reign.lease.acquire()
            if grant is None:
                continue
            held.append(index)
            self._free_since.pop(index, None)
            if reign.took(grant):
                became = True
        # Sleep until a shard this scheduler would take may come free: at its expiry when
        # short of the share, a renewal interval after it (the stranded rule) otherwise.
        until = [renew]
        for index, reign in enumerate(self.reigns):
            if index in held:
                continue
            row = rows.get(reign.name)
            if row is None or row[3]:
                since = self._free_since.get(index, mono)
                until.append(max(MIN_IDLE_SLEEP, since + renew - mono))
                continue
            wait = (row[2] - now).total_seconds() + MIN_IDLE_SLEEP
            until.append(wait if len(held) < target else wait + renew)
        view = (tuple(sorted(held)), target, len(live))
        if view != self._view:
            self._view = view
            log_event(
                "lease.shards",
                scheduler_id=self.scheduler_id,
                instance=me,
                shards=count,
                held=list(view[0]),
                target=target,
                live=len(live),
            )
        return became, max(MIN_IDLE_SLEEP, min(until))
