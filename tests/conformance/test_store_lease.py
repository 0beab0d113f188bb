"""Conformance: the lease (every store). Expiry is judged by the store's clock."""

from __future__ import annotations

import time
from datetime import timedelta

from goatbeat.core.store import ScheduleStore
from tests.conformance.helpers import T0, hourly

SHORT = timedelta(milliseconds=300)


def test_first_acquire_grants_token_one_and_renewal_keeps_it(store: ScheduleStore) -> None:
    before = store.now()
    grant = store.acquire_lease("scheduler", "a", timedelta(seconds=30))
    assert grant is not None
    assert (grant.name, grant.holder, grant.token) == ("scheduler", "a", 1)
    assert before + timedelta(seconds=30) <= grant.expires_at

    renewed = store.acquire_lease("scheduler", "a", timedelta(seconds=60))
    assert renewed is not None
    assert renewed.token == grant.token
    assert renewed.expires_at > grant.expires_at

    holder, token, expires_at, expired = store.read_lease("scheduler")  # type: ignore[misc]
    assert (holder, token, expires_at, expired) == ("a", 1, renewed.expires_at, False)


def test_unexpired_lease_is_refused_to_another_holder(store: ScheduleStore) -> None:
    assert store.acquire_lease("scheduler", "a", timedelta(seconds=30)) is not None
    assert store.acquire_lease("scheduler", "b", timedelta(seconds=30)) is None
    assert store.read_lease("scheduler")[:2] == ("a", 1)  # type: ignore[index]


def test_leases_are_independent_by_name(store: ScheduleStore) -> None:
    assert store.acquire_lease("one", "a", timedelta(seconds=30)) is not None
    other = store.acquire_lease("two", "b", timedelta(seconds=30))
    assert other is not None and other.token == 1
    assert store.read_lease("three") is None


def test_takeover_after_expiry_bumps_the_token(store: ScheduleStore) -> None:
    first = store.acquire_lease("scheduler", "a", SHORT)
    assert first is not None
    time.sleep(SHORT.total_seconds() + 0.2)
    assert store.read_lease("scheduler")[3] is True  # type: ignore[index]

    taken = store.acquire_lease("scheduler", "b", timedelta(seconds=30))

    assert taken is not None and taken.holder == "b"
    assert taken.token == first.token + 1
    assert store.acquire_lease("scheduler", "a", timedelta(seconds=30)) is None


def test_same_holder_reacquiring_after_expiry_keeps_its_token(store: ScheduleStore) -> None:
    first = store.acquire_lease("scheduler", "a", SHORT)
    assert first is not None
    time.sleep(SHORT.total_seconds() + 0.2)
    again = store.acquire_lease("scheduler", "a", timedelta(seconds=30))
    assert again is not None and again.token == first.token  # nobody else held it meanwhile


def test_release_lets_another_holder_acquire_at_once(store: ScheduleStore) -> None:
    grant = store.acquire_lease("scheduler", "a", timedelta(minutes=10))
    assert grant is not None

    assert store.release_lease("scheduler", "b", grant.token) is False  # not the holder
    assert store.release_lease("scheduler", "a", grant.token + 1) is False  # wrong token
    assert store.release_lease("scheduler", "a", grant.token) is True
    assert store.read_lease("scheduler")[3] is True  # type: ignore[index]
    assert store.release_lease("scheduler", "a", grant.token) is False  # already released

    taken = store.acquire_lease("scheduler", "b", timedelta(minutes=10))
    assert taken is not None and taken.token == grant.token + 1


def test_released_lease_cannot_claim(store: ScheduleStore) -> None:
    store.publish([hourly("a")])
    grant = store.acquire_lease("scheduler", "a", timedelta(minutes=10))
    assert grant is not None
    assert store.release_lease("scheduler", "a", grant.token)

    result = store.claim_due(grant, scheduler_id="a", limit=10, now=T0 + timedelta(hours=2))

    assert result.refused and result.occurrences == []
    assert store.executions() == []
