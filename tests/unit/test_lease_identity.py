"""A lease holder is one process, whatever its scheduler id (#32 item 0).

Every replica of a Django project reads the same ``GOATBEAT["scheduler_id"]``; before, the id
alone held the lease, so a second process under it found the lease "ours already", both led
under one fencing token, and a restart under a fixed id got the same token back. Here every
start has its own identity (``web-1#3f9a0c1e``): MemoryStore and a FakeClock, the same rules
the SQL stores run (their conformance tests cover the token rule itself)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import ClassVar

import pytest

from goatbeat.core.clock import FakeClock
from goatbeat.core.config import parse_settings
from goatbeat.core.errors import ConfigError
from goatbeat.core.instance import new_instance, split_instance
from goatbeat.core.model import Occurrence, Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.memory import MemoryStore
from tests.doubles import AcceptingSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Recording(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    def submit(self, occurrence: Occurrence) -> str | None:
        self.keys.append(occurrence.idempotency_key)
        return occurrence.idempotency_key


def replica(store: MemoryStore, clock: FakeClock, submitter: Recording) -> Scheduler:
    settings = parse_settings(
        {"scheduler_id": "web-1", "lease_ttl": "3s", "lease_renew_interval": "1s"}
    )
    return Scheduler(store, submitter, settings=settings, clock=clock)


@pytest.fixture
def world() -> tuple[MemoryStore, FakeClock]:
    clock = FakeClock(START)
    store = MemoryStore(clock)
    store.publish([Schedule(name="tick", task="tasks.tick", trigger=IntervalTrigger("1s"))])
    return store, clock


def test_two_processes_with_one_scheduler_id_never_both_lead(world) -> None:
    store, clock = world
    first, second = Recording(), Recording()
    a, b = replica(store, clock, first), replica(store, clock, second)
    assert a.scheduler_id == b.scheduler_id == "web-1"
    assert a.instance != b.instance
    for _ in range(10):
        clock.advance(0.5)
        ra, rb = a.run_once(), b.run_once()
        assert ra.leader and not rb.leader
    assert first.keys and second.keys == []
    holder, token, _, _ = store.read_lease("scheduler") or ("", 0, None, True)
    assert holder == a.instance and token == 1


def test_a_restarted_twin_gets_a_higher_token_and_the_frozen_one_sends_nothing(world) -> None:
    store, clock = world
    frozen_keys, twin_keys = Recording(), Recording()
    frozen = replica(store, clock, frozen_keys)
    assert frozen.run_once().leader
    old_token = frozen.lease.grant.token if frozen.lease.grant else None
    # frozen stops (SIGSTOP, a GC pause); a new process under the same id is started and
    # waits for the lease to expire.
    twin = replica(store, clock, twin_keys)
    assert not twin.run_once().leader
    clock.advance(3.5)
    result = twin.run_once()
    assert result.leader and result.fencing_token is not None and old_token is not None
    assert result.fencing_token > old_token
    sent_before = len(frozen_keys.keys)
    # The frozen one wakes up: its local deadline passed, its token is stale, the lease is
    # the twin's. It sends nothing, whatever it had claimed.
    for _ in range(4):
        assert not frozen.run_once().leader
        clock.advance(0.5)
        assert twin.run_once().leader
    assert len(frozen_keys.keys) == sent_before
    assert not set(frozen_keys.keys) & set(twin_keys.keys)


def test_a_graceful_restart_under_a_fixed_id_gets_a_new_token(world) -> None:
    store, clock = world
    first = replica(store, clock, Recording())
    result = first.run_once()
    assert result.leader
    assert first.release()
    restarted = replica(store, clock, Recording())
    again = restarted.run_once()
    assert again.leader and again.fencing_token == (result.fencing_token or 0) + 1


def test_a_start_beside_a_live_process_with_its_id_warns_naming_both(world, caplog) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    store, clock = world
    a = replica(store, clock, Recording())
    a.run_once()
    assert not [r for r in caplog.records if r.getMessage() == "scheduler.duplicate_id"]
    b = replica(store, clock, Recording())
    b.run_once()
    [warning] = [r for r in caplog.records if r.getMessage() == "scheduler.duplicate_id"]
    assert warning.levelno == logging.WARNING
    assert warning.instance == b.instance  # type: ignore[attr-defined]
    assert [o.split(" ")[0] for o in warning.others] == [a.instance]  # type: ignore[attr-defined]
    # status shows both processes, and says the id is shared.
    snapshot = store.status()
    assert sorted(p.scheduler_id for p in snapshot.schedulers) == sorted([a.instance, b.instance])
    assert {p.name for p in snapshot.schedulers} == {"web-1"}
    assert list(snapshot.shared_ids) == ["web-1"]
    assert snapshot.leader is not None and snapshot.leader.scheduler_id == a.instance
    as_json = snapshot.to_dict()
    assert as_json["shared_scheduler_ids"] == {
        "web-1": [p.scheduler_id for p in snapshot.schedulers]
    }
    assert {p["scheduler_id"] for p in as_json["schedulers"]} == {"web-1"}


def test_the_lease_logs_name_the_id_and_the_instance(world, caplog) -> None:
    caplog.set_level(logging.INFO, logger="goatbeat")
    store, clock = world
    a = replica(store, clock, Recording())
    a.run_once()
    [acquired] = [r for r in caplog.records if r.getMessage() == "lease.acquired"]
    assert acquired.scheduler_id == "web-1"  # type: ignore[attr-defined]
    assert acquired.instance == a.instance  # type: ignore[attr-defined]


def test_instances_split_back_into_their_id() -> None:
    one, two = new_instance("web#1"), new_instance("web#1")
    assert one != two
    assert split_instance(one)[0] == "web#1"
    assert split_instance("web-1") == ("web-1", None)  # a holder of an older version
    assert split_instance("a#not-hex!") == ("a#not-hex!", None)


def test_a_scheduler_id_leaves_room_for_the_instance_suffix() -> None:
    assert len(new_instance("x" * 246)) == 255
    with pytest.raises(ConfigError, match="scheduler_id.*longer than 246"):
        parse_settings({"scheduler_id": "x" * 247})
