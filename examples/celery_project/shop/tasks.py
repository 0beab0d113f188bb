"""The example's Celery tasks. Each run is recorded in Redis so tests can count them."""

import time

import redis
from celery import shared_task
from django.conf import settings


@shared_task(name="shop.record")
def record(label: str, **kwargs: object) -> str:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.rpush("example:runs", f"{label} {time.time():.3f}")
    finally:
        client.close()
    return label
