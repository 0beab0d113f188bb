"""Django's connection gets the frozen-claim protection too.

The scheduler of a Django project runs PostgresStore over Django's own connection
(goatbeat/django/connection.py). Its claim transaction caps itself the same way (the cap is SQL,
``SET LOCAL``), so a claim frozen inside it is disconnected by the server when its lease runs
out and the standby takes over. tests/integration/frozen_claim.py holds the scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from goatbeat.django.connection import DjangoConnectionProvider
from goatbeat.stores.postgres import PostgresStore
from tests.integration.frozen_claim import TTL, run_frozen_claim

pytestmark = [pytest.mark.slow]


def _closing_connections(body: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        from django.db import connections

        try:
            body()
        finally:
            connections.close_all()

    return run


def test_a_claim_frozen_on_djangos_connection_cannot_stall_the_standby(store: Any) -> None:
    outcome = run_frozen_claim(
        lambda planner: PostgresStore(
            connection_provider=DjangoConnectionProvider("default"), planner=planner
        ),
        store,
        in_thread=_closing_connections,
    )
    print(f"\nfrozen claim (Django): the standby got the lease {outcome.takeover:.3f}s after")
    assert outcome.takeover <= TTL.total_seconds() + 1.0
    assert "idle-in-transaction timeout" in str(outcome.frozen_error)
    assert outcome.stale_refused
    assert outcome.frozen_keys == []
    assert outcome.standby_keys
