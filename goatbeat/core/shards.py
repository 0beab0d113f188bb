"""Shards: which lease a schedule's claims answer to, and how many leases each scheduler holds.

With ``shards = N`` (setting ``shards``, default 1) every schedule belongs to shard
``shard_of(name, N)``: the first four bytes of the SHA-256 of its UTF-8 name, big-endian, modulo
N. PostgreSQL computes the very same number in the claim query (:data:`SHARD_HASH_SQL` in
``stores/sql/postgres/queries.sql``), so the shard is never stored: changing N needs no
migration and no rewrite, and a row written by any means (SQL, the ORM) is in the right shard.
A test checks the two agree on awkward names.

Each shard has its own lease row, fencing token and local deadline. Shard 0 of 1 keeps the
name ``"scheduler"`` (one shard is exactly the single-leader goatbeat of before); shard K of N
is ``"scheduler/shard-K-of-N"``. A claim under a shard's lease touches only that shard's
schedules, so two holders of different shards never race on a row, and a stale token is refused
as before.

Balance. :func:`fair_share` gives each live scheduler (sorted by id) ``N // live`` leases, the
first ``N % live`` one more, so the holdings differ by one at most and every scheduler computes
the same targets from the same list.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "Shard",
    "ALL",
    "shard_of",
    "shard_hash",
    "lease_name",
    "parse_lease_name",
    "fair_share",
    "MAX_SHARDS",
]

MAX_SHARDS = 256
"""The largest ``shards``: each shard is a lease row every scheduler reads per iteration, and
the claim query lists the other shards (PostgreSQL's estimate of that filter stays sane)."""
_BASE = "scheduler"
_LEASE = re.compile(r"scheduler/shard-(\d+)-of-(\d+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shard:
    """Shard ``index`` of ``count``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")

    @property
    def lease(self) -> str:
        return lease_name(self.index, self.count)

    @property
    def everything(self) -> bool:
        """One shard: every schedule belongs to it (no filter at all)."""
        return self.count == 1

    def holds(self, name: str) -> bool:
        return self.everything or shard_of(name, self.count) == self.index


ALL = Shard()
"""The single shard of an unsharded deployment: every schedule."""


def shard_hash(name: str) -> int:
    """The stable 32-bit hash of a schedule name (identical in PostgreSQL)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big")


def shard_of(name: str, shards: int) -> int:
    """The shard (0 .. shards-1) the schedule ``name`` belongs to."""
    if shards == 1:
        return 0
    return shard_hash(name) % shards


def lease_name(index: int, count: int) -> str:
    """``"scheduler"`` for the one shard of one, ``"scheduler/shard-K-of-N"`` otherwise."""
    return _BASE if count == 1 else f"{_BASE}/shard-{index}-of-{count}"


def parse_lease_name(name: str) -> Shard:
    """The shard a lease name stands for. Any other name (a custom lease name, as tests and
    ``compat.Scheduler`` use) covers every schedule, as before shards existed."""
    match = _LEASE.fullmatch(name)
    if match is None:
        return ALL
    return Shard(index=int(match.group(1)), count=int(match.group(2)))


def fair_share(shards: int, live: list[str], me: str) -> int:
    """How many of ``shards`` leases ``me`` should hold among the ``live`` scheduler ids (``me``
    included or not): ``shards // live``, plus one for the first ``shards % live`` ids in
    sorted order."""
    members = sorted(set(live) | {me})
    base, extra = divmod(shards, len(members))
    return base + (1 if members.index(me) < extra else 0)
