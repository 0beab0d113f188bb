"""A Redis broker frozen with SIGSTOP mid-publish does not hold the Celery submitter: the
publish gives up after ``publish_timeout`` (kombu's Redis transport takes no per-publish
timeout, so the submitter bounds the process's Redis sockets), is reported retryable, and
goes through once the server runs again."""

from __future__ import annotations

import json
import os
import signal
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import Occurrence, Routing
from goatbeat.submitters.celery import CelerySubmitter
from tests.services import RedisServer

celery = pytest.importorskip("celery")

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(90)]

LOCAL_DEADLINE = 20.0


def _occurrence(i: int) -> Occurrence:
    return Occurrence(
        execution_id=i,
        schedule_id=1,
        schedule_name="frozen",
        task="proj.tasks.report",
        args=(i,),
        kwargs={},
        routing=Routing(),
        scheduled_at=datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        idempotency_key=f"frozen:{i}",
        fencing_token=1,
    )


def test_a_frozen_redis_gives_the_publish_up_before_the_local_deadline() -> None:
    server = RedisServer().start()
    assert server.proc is not None
    app = celery.Celery("frozen", broker=server.url, set_as_current=False)
    app.conf.task_serializer = "json"
    submitter = CelerySubmitter(app, publish_timeout=2.0)
    results: list[Any] = []
    try:
        assert submitter.submit_many([_occurrence(0)]) == ["frozen:0"]
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            thread = threading.Thread(
                target=lambda: results.extend(submitter.submit_many([_occurrence(1)]))
            )
            thread.start()
            thread.join(LOCAL_DEADLINE)
            still_blocked = thread.is_alive()
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        thread.join(30)
        assert not still_blocked, "the publish was still blocked at the lease's local deadline"
        assert len(results) == 1 and isinstance(results[0], RetryableSubmitError)
        assert submitter.submit_many([_occurrence(1)]) == ["frozen:1"]
        client = redis.Redis.from_url(server.url)
        ids = [json.loads(m)["headers"]["id"] for m in client.lrange("celery", 0, -1)]
        client.close()
        assert "frozen:1" in ids and "frozen:0" in ids
    finally:
        submitter.close()
        app.close()
        server.stop()
