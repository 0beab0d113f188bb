"""A scheduler that sees the database change under it says so (#32 item 2): a new timeline (a
standby promoted) or a new system identifier (a restore) is logged at ERROR with the window of
this process's claims the new database lost; a fencing token that goes back too."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import Settings
from goatbeat.core.lease import LeaseManager
from goatbeat.core.model import Execution, ExecutionStatus, LeaseGrant, Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Accepting(AcceptingSubmitter):
    name: ClassVar[str] = "accepting"

    def submit(self, occurrence: Occurrence) -> str | None:
        return occurrence.idempotency_key


class PromotedStore(MemoryStore):
    """A MemoryStore that reports a database identity, and after ``promote()`` a new timeline
    whose history ends before the claims made since ``lose_after``."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.identity = ("7714575121356301082", 1)
        self.lose_from: datetime | None = None

    def database_identity(self) -> tuple[str, int] | None:
        return self.identity

    def executions(
        self, *, name: str | None = None, status: ExecutionStatus | None = None, limit: int = 50
    ) -> list[Execution]:
        found = super().executions(name=name, status=status, limit=limit)
        if self.lose_from is None:
            return found
        return [e for e in found if e.scheduled_at < self.lose_from]


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [r.goatbeat for r in caplog.records if r.getMessage() == name]  # type: ignore[attr-defined]


def test_a_promotion_is_logged_with_the_window_of_claims_it_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(START)
    store = PromotedStore(clock)
    store.publish([Schedule(name="a", task="tasks.a", trigger=IntervalTrigger("1s"))])
    sched = Scheduler(
        store, Accepting(), settings=Settings(scheduler_id="s1", lease_ttl=timedelta(seconds=3),
                                              lease_renew_interval=timedelta(seconds=1)),
        clock=clock,
    )  # fmt: skip
    for _ in range(10):
        clock.advance(1)
        sched.run_once()
    assert not events(caplog, "store.database_changed")
    store.identity = ("7714575121356301082", 2)
    store.lose_from = START + timedelta(seconds=7)  # the last claims never reached the standby
    with caplog.at_level(logging.ERROR, logger="goatbeat"):
        clock.advance(1)
        sched.run_once()
    (changed,) = events(caplog, "store.database_changed")
    assert changed["reason"].startswith("promotion")
    assert (changed["previous_timeline"], changed["timeline"]) == (1, 2)
    assert changed["lost_claims"] == 4  # 12:00:07 .. 12:00:10
    assert changed["may_repeat_from"] == START + timedelta(seconds=7)
    assert changed["may_repeat_to"] == START + timedelta(seconds=10)
    assert changed["lost_keys"][0] == "a:2026-03-01T12:00:07Z"
    assert changed["old_database_last_seen"] == START + timedelta(seconds=10)
    # Said once: the new identity is the one compared from now on.
    clock.advance(1)
    sched.run_once()
    assert len(events(caplog, "store.database_changed")) == 1


def test_another_database_behind_the_url_is_named_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(START)
    store = PromotedStore(clock)
    sched = Scheduler(store, Accepting(), settings=Settings(scheduler_id="s1"), clock=clock)
    sched.run_once()
    store.identity = ("1111", 1)
    with caplog.at_level(logging.ERROR, logger="goatbeat"):
        clock.advance(11)
        sched.run_once()
    (changed,) = events(caplog, "store.database_changed")
    assert changed["reason"].startswith("another database")
    assert changed["claimed_by_this_process_and_lost"] == 0


class ForgetfulStore(MemoryStore):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.tokens = [5, 5, 3]

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> LeaseGrant | None:
        grant = super().acquire_lease(name, holder, ttl)
        assert grant is not None
        return LeaseGrant(
            name=grant.name, holder=grant.holder, token=self.tokens.pop(0),
            expires_at=grant.expires_at,
        )  # fmt: skip


def test_a_fencing_token_that_goes_back_is_logged_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(START)
    lease = LeaseManager(ForgetfulStore(clock), holder="s1#00000000", clock=clock)
    with caplog.at_level(logging.ERROR, logger="goatbeat"):
        lease.acquire()
        lease.acquire()
        assert not events(caplog, "lease.token_went_back")
        lease.acquire()
    (back,) = events(caplog, "lease.token_went_back")
    assert (back["fencing_token"], back["highest_token_seen"]) == (3, 5)


def test_every_outcome_the_scheduler_writes_names_its_occurrence_by_key() -> None:
    """The held outcomes of a batch can cross a promotion, where execution ids repeat: each
    one carries its occurrence's key, and the store writes it only where id and key match
    (tests/conformance test_an_outcome_lands_only_on_the_execution_with_its_key)."""
    from goatbeat.core.runs import SubmitOutcome

    clock = FakeClock(START)
    written: list[SubmitOutcome] = []

    class Recording(MemoryStore):
        def record_outcomes(self, outcomes: Any) -> None:
            written.extend(outcomes)
            super().record_outcomes(outcomes)

        def claim_due(self, *args: Any, record: Any = (), **kwargs: Any) -> Any:
            written.extend(record)
            return super().claim_due(*args, record=record, **kwargs)

    store = Recording(clock)
    store.publish(
        [Schedule(name=f"s{i}", task="tasks.a", trigger=IntervalTrigger("1s")) for i in range(5)]
    )
    sched = Scheduler(store, Accepting(), settings=Settings(scheduler_id="s1"), clock=clock)
    for _ in range(4):
        clock.advance(1)
        sched.run_once()
    keys = {e.id: e.idempotency_key for e in store.executions(limit=1000)}
    assert len(written) >= 15
    assert all(o.idempotency_key is not None for o in written)
    assert all(keys[o.execution_id] == o.idempotency_key for o in written)
