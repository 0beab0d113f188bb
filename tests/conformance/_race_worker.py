"""A claimer in its own process, for the multi-process race (see test_store_claims.py).

    python -m tests.conformance._race_worker URL LEASE START_EPOCH ROUNDS STEP_S LIMIT

Holds its own lease ``LEASE``, waits until ``START_EPOCH`` (so both racers start together),
then for each round claims everything due at ``T0 + round * STEP_S`` and prints the claimed
idempotency keys as one JSON list.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

from goatbeat.stores import open_store
from tests.conformance.helpers import T0, claim_all


def main(argv: list[str]) -> int:
    url, lease_name, start, rounds, step, limit = argv
    store = open_store(url)
    grant = store.acquire_lease(lease_name, f"proc-{lease_name}", timedelta(minutes=10))
    assert grant is not None
    time.sleep(max(0.0, float(start) - time.time()))
    claimed: list[str] = []
    for r in range(1, int(rounds) + 1):
        now = T0 + timedelta(seconds=r * float(step))
        claimed.extend(o.idempotency_key for o in claim_all(store, grant, now, limit=int(limit)))
    store.close()
    json.dump(claimed, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
