"""tests/integration/test_multi_scheduler.py, unchanged, through PgBouncer (transaction pooling).

The same real ``python -m goatbeat scheduler`` processes and the same checks (one dispatcher at
a time, graceful handover, crash failover, nothing lost, nothing claimed twice, a crash between
submission and bookkeeping resubmits the same key); only their database is PgBouncer, with
``GOATBEAT_LISTEN_DATABASE`` naming PostgreSQL itself for LISTEN.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_multi_scheduler import (
    Cluster,
    test_crash_between_submission_and_bookkeeping_resubmits_the_same_key,
    test_exactly_one_of_several_schedulers_dispatches,
    test_sigkill_of_the_leader_fails_over_within_the_lease_ttl,
    test_sigterm_of_the_leader_hands_over_to_the_standby,
)

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer, pytest.mark.slow]

__all__ = [
    "test_crash_between_submission_and_bookkeeping_resubmits_the_same_key",
    "test_exactly_one_of_several_schedulers_dispatches",
    "test_sigkill_of_the_leader_fails_over_within_the_lease_ttl",
    "test_sigterm_of_the_leader_hands_over_to_the_standby",
]


class PooledCluster(Cluster):
    """Schedulers on PgBouncer that LISTEN on PostgreSQL directly."""

    def __init__(self, pooled: str, direct: str, tmp_path: Path) -> None:
        super().__init__(pooled, tmp_path)
        self.direct = direct

    def start(self, sid: str, **env: str) -> subprocess.Popen[bytes]:
        return super().start(sid, GOATBEAT_LISTEN_DATABASE=self.direct, **env)


@pytest.fixture
def cluster(pg_dsn: str, pgbouncer_server: Any, tmp_path: Path) -> Iterator[Cluster]:
    c = PooledCluster(pgbouncer_server.pooled(pg_dsn), pg_dsn, tmp_path)
    try:
        yield c
    finally:
        c.shutdown()
