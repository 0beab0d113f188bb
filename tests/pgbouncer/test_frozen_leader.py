"""tests/integration/test_frozen_leader.py, unchanged, through PgBouncer (transaction pooling).

A leader frozen inside its claim transaction holds a PgBouncer server connection "idle in
transaction"; the claim's transaction-local ``idle_in_transaction_session_timeout`` ends that
server session about when the lease expires, its locks go, and the standby dispatches within
``lease_ttl`` + 1 s, exactly as without PgBouncer. The scheduler processes LISTEN on PostgreSQL
itself (``GOATBEAT_LISTEN_DATABASE``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_frozen_leader import (
    Pair,
    test_a_claim_frozen_in_its_transaction_is_rolled_back_and_its_token_refused,
    test_a_leader_frozen_inside_its_claim_transaction_cannot_stall_failover,
    test_the_claims_cap_ends_with_its_transaction_and_stays_out_of_a_callers,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.pgbouncer,
    pytest.mark.slow,
    pytest.mark.timeout(120),
]

__all__ = [
    "test_a_claim_frozen_in_its_transaction_is_rolled_back_and_its_token_refused",
    "test_a_leader_frozen_inside_its_claim_transaction_cannot_stall_failover",
    "test_the_claims_cap_ends_with_its_transaction_and_stays_out_of_a_callers",
]


@pytest.fixture
def pg_dsn(pg_dsn: str, pgbouncer_server: Any) -> str:
    """The test's fresh database, through PgBouncer: every test above runs on it."""
    dsn: str = pgbouncer_server.pooled(pg_dsn)
    return dsn


class PooledPair(Pair):
    def __init__(self, pooled: str, direct: str, tmp: Path) -> None:
        super().__init__(pooled, tmp)
        self.direct = direct

    def start(self, sid: str, **env: str) -> subprocess.Popen[bytes]:
        return super().start(sid, GOATBEAT_LISTEN_DATABASE=self.direct, **env)


@pytest.fixture
def pair(pg_dsn: str, postgres_server: Any, tmp_path: Path) -> Iterator[Pair]:
    direct = postgres_server.dsn_for(pg_dsn.rsplit("/", 1)[1])
    p = PooledPair(pg_dsn, direct, tmp_path)
    try:
        yield p
    finally:
        p.shutdown()
