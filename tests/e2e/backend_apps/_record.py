"""The side effect every e2e task has: one JSON line per run in a Redis list."""

from __future__ import annotations

import json
import os
from typing import Any

import redis

URL_ENV = "GOATBEAT_E2E_REDIS_URL"
WORKER_ENV = "GOATBEAT_E2E_WORKER"  # which worker ran the task: the test names each one


def results_key(backend: str) -> str:
    return f"goatbeat:e2e:{backend}"


def record(backend: str, **fields: Any) -> None:
    fields["worker"] = os.environ.get(WORKER_ENV)
    client = redis.Redis.from_url(os.environ[URL_ENV])
    try:
        client.rpush(results_key(backend), json.dumps(fields, sort_keys=True))
    finally:
        client.close()


def read(client: redis.Redis, backend: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(results_key(backend), 0, -1)]
