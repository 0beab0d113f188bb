"""The example's Celery tasks. Each run is recorded in Redis so tests can count them."""

import json
import time

import redis
from celery import shared_task
from django.conf import settings


@shared_task(name="shop.record", bind=True)
def record(self: object, label: str, **kwargs: object) -> str:
    """Append ``{"label", "id", "at"}`` to the Redis list ``example:runs``: the schedule's
    label, the task id (goatbeat sends the idempotency key, ``name:instant``; celery beat a
    UUID) and when the worker ran it."""
    task_id = getattr(getattr(self, "request", None), "id", None)
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.rpush("example:runs", json.dumps({"label": label, "id": task_id, "at": time.time()}))
    finally:
        client.close()
    return label
