"""One scenario, two connection paths: a claim frozen inside its transaction, in-process.

``run_frozen_claim`` builds the "frozen" PostgresStore with a planner that blocks (the claim
transaction is open, the lease row held ``FOR SHARE``), and runs its claim in a thread. The
standby, on another connection, keeps asking for the lease. The test that calls it decides which
connections these are: psycopg's own (tests/integration) or Django's (tests/django).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from goatbeat.core.errors import StoreError
from goatbeat.core.misfire import Plan
from goatbeat.core.misfire import plan as default_plan
from goatbeat.core.model import Schedule
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores.claims import Planner
from goatbeat.stores.postgres import PostgresStore

TTL = timedelta(seconds=2)


@dataclass
class FrozenClaimOutcome:
    takeover: float
    """Seconds from the freeze to the standby's grant."""
    frozen_error: BaseException | None
    """What the frozen claim raised once resumed."""
    stale_refused: bool
    """A later claim with the frozen holder's token was refused."""
    standby_keys: list[str]
    frozen_keys: list[str]


def run_frozen_claim(
    make_store: Callable[[Planner], PostgresStore],
    standby: PostgresStore,
    *,
    in_thread: Callable[[Callable[[], None]], Callable[[], None]] = lambda f: f,
) -> FrozenClaimOutcome:
    """``make_store(planner)`` is called in the frozen thread; ``in_thread`` wraps that thread's
    body (Django closes the thread's connection with it)."""
    entered = threading.Event()
    resume = threading.Event()

    def freezing(schedule: Schedule, now: datetime) -> Plan:
        entered.set()
        resume.wait(30)
        return default_plan(schedule, now)

    now = standby.now()
    standby.create(Schedule(name="frozen-claim", task="tasks.tick", trigger=IntervalTrigger("1s")))
    claim_at = now + timedelta(seconds=10)
    outcome: dict[str, object] = {"error": None, "refused": False}

    def body() -> None:
        store = make_store(freezing)
        grant = store.acquire_lease("scheduler", "frozen", TTL)
        assert grant is not None
        outcome["grant"] = grant
        try:
            store.claim_due(grant, scheduler_id="frozen", limit=10, now=claim_at)
        except StoreError as exc:
            outcome["error"] = exc
        # Woken up: the token is stale now, and the store must say so (after reconnecting).
        refused = store.claim_due(grant, scheduler_id="frozen", limit=10, now=claim_at)
        outcome["refused"] = refused.refused and not refused.occurrences
        store.close()

    thread = threading.Thread(target=in_thread(body), name="frozen-claim")
    thread.start()
    try:
        assert entered.wait(30), "the frozen claim never reached its planner"
        froze = time.monotonic()
        deadline = froze + 5 * TTL.total_seconds()
        while (grant := standby.acquire_lease("scheduler", "standby", TTL)) is None:
            assert time.monotonic() < deadline, "the standby never got the lease"
            time.sleep(0.02)
        takeover = time.monotonic() - froze
        claimed = standby.claim_due(grant, scheduler_id="standby", limit=10, now=claim_at)
        assert not claimed.refused
    finally:
        resume.set()
        thread.join(60)
    assert not thread.is_alive()
    executions = standby.executions(name="frozen-claim")
    return FrozenClaimOutcome(
        takeover=takeover,
        frozen_error=outcome["error"],  # type: ignore[arg-type]
        stale_refused=bool(outcome["refused"]),
        standby_keys=[e.idempotency_key for e in executions if e.scheduler_id == "standby"],
        frozen_keys=[e.idempotency_key for e in executions if e.scheduler_id == "frozen"],
    )
