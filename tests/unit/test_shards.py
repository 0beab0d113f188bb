"""The shard function (stable, evenly spread), lease names and fair shares."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from goatbeat.core.config import parse_settings
from goatbeat.core.errors import ConfigError
from goatbeat.core.health import LeaseState, StatusSnapshot, check
from goatbeat.core.shards import (
    ALL,
    Shard,
    fair_share,
    lease_name,
    parse_lease_name,
    shard_hash,
    shard_of,
)


def test_the_shard_of_a_name_never_changes() -> None:
    # Pinned: PostgreSQL computes these in the claim query, and every replica of every
    # version must agree, so a change here would move schedules between shards.
    assert shard_hash("daily-report") == 0xE91BF0BD
    assert [shard_of(f"s-{i}", 4) for i in range(8)] == [3, 3, 0, 2, 2, 3, 2, 0]


def test_the_hash_is_the_first_four_bytes_of_sha256() -> None:
    import hashlib

    digest = hashlib.sha256(b"ping").digest()
    assert shard_hash("ping") == int.from_bytes(digest[:4], "big")
    assert 0 <= shard_hash("x" * 1000) < 2**32


@pytest.mark.parametrize("shards", [2, 3, 4, 8, 16])
def test_names_spread_evenly(shards: int) -> None:
    counts = Counter(shard_of(f"schedule-{i}", shards) for i in range(100_000))
    assert set(counts) == set(range(shards))
    expected = 100_000 / shards
    assert max(abs(n - expected) for n in counts.values()) < expected * 0.03


def test_one_shard_holds_everything_under_todays_lease_name() -> None:
    assert shard_of("anything", 1) == 0
    assert lease_name(0, 1) == "scheduler"
    assert parse_lease_name("scheduler") == ALL
    assert ALL.everything and ALL.holds("x")


def test_lease_names_round_trip() -> None:
    for count in (2, 4, 7):
        for index in range(count):
            name = lease_name(index, count)
            assert name == f"scheduler/shard-{index}-of-{count}"
            assert parse_lease_name(name) == Shard(index=index, count=count)
    assert parse_lease_name("compat-lease") == ALL


def test_a_shard_outside_its_count_does_not_exist() -> None:
    with pytest.raises(ValueError, match="shard 4 of 4"):
        Shard(index=4, count=4)


@pytest.mark.parametrize(("shards", "members"), [(4, 3), (4, 2), (4, 4), (4, 5), (7, 3), (1, 3)])
def test_fair_shares_add_up_and_differ_by_one_at_most(shards: int, members: int) -> None:
    live = [f"m{i}" for i in range(members)]
    shares = [fair_share(shards, live, m) for m in live]
    assert sum(shares) == shards
    assert max(shares) - min(shares) <= 1


def test_a_member_not_yet_listed_counts_itself() -> None:
    assert fair_share(4, ["a", "b"], "c") == 1
    assert fair_share(4, [], "c") == 4


def test_the_shards_setting_is_validated() -> None:
    assert parse_settings({}).shards == 1
    assert parse_settings({"shards": 4}).shards == 4
    for bad in (0, -1, "4", 4.0, True, 100_000):
        with pytest.raises(ConfigError, match="shards: "):
            parse_settings({"shards": bad})


def _lease(name: str, holder: str, valid: bool, at: datetime) -> LeaseState:
    return LeaseState(name=name, holder=holder, token=1, expires_at=at, valid=valid)


def test_status_is_healthy_only_while_every_shard_is_held() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = now + timedelta(seconds=20)
    old = _lease("scheduler", "gone", False, now - timedelta(hours=1))
    held = [_lease(lease_name(i, 4), f"s{i % 2}", True, later) for i in range(4)]
    snap = StatusSnapshot(now=now, lease=old, shard_leases=held)
    assert [s.name for s in snap.shards] == [lease_name(i, 4) for i in range(4)]
    verdict = check(snap, max_lag=timedelta(minutes=1))
    assert verdict.ok and "2 scheduler(s) hold the 4 shards" in verdict.reason
    lapsed = [*held[:3], _lease(lease_name(3, 4), "s1", False, now)]
    verdict = check(StatusSnapshot(now=now, lease=old, shard_leases=lapsed), max_lag=timedelta(1))
    assert not verdict.ok and "scheduler/shard-3-of-4" in verdict.reason
    # A shard never held is reported too.
    verdict = check(
        StatusSnapshot(now=now, lease=None, shard_leases=held[:3]), max_lag=timedelta(1)
    )
    assert not verdict.ok and "scheduler/shard-3-of-4" in verdict.reason


def test_status_follows_the_single_lease_once_shards_are_history() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    single = _lease("scheduler", "s0", True, now + timedelta(seconds=20))
    stale = [_lease(lease_name(i, 4), "s1", False, now - timedelta(hours=1)) for i in range(4)]
    snap = StatusSnapshot(now=now, lease=single, shard_leases=stale)
    assert snap.shards == []
    assert check(snap, max_lag=timedelta(minutes=1)).ok
