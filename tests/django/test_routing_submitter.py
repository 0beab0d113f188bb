"""DjangoRoutingSubmitter.submit_many: each backend gets its share in one call (Celery publishes
its share in one kombu batch), answers come back in the order asked, and a task no backend
claims is a permanent failure of that occurrence alone. Real Celery and RQ over the test Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from goatbeat.core.errors import PermanentSubmitError
from goatbeat.core.model import Occurrence, Routing, idempotency_key
from goatbeat.django.submitter import DjangoRoutingSubmitter
from tests.unit.test_submitters import count_batches

AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
CELERY_TASK = "proj.tasks.report"
RQ_TASK = "proj.jobs.cleanup"


def occurrence(name: str, task: str, execution_id: int) -> Occurrence:
    return Occurrence(
        execution_id=execution_id,
        schedule_id=execution_id,
        schedule_name=name,
        task=task,
        args=(execution_id,),
        kwargs={},
        routing=Routing(),
        scheduled_at=AT,
        idempotency_key=idempotency_key(name, AT),
    )


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture
def router(redis_url: str) -> Iterator[DjangoRoutingSubmitter]:
    submitter = DjangoRoutingSubmitter(
        options={"celery": {"app": redis_url}, "rq": {"connection": redis_url}},
        backends={CELERY_TASK: "celery", RQ_TASK: "rq"},
    )
    yield submitter
    submitter.close()


def test_each_backend_gets_its_share_in_one_call_and_answers_keep_their_order(
    router: DjangoRoutingSubmitter, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = count_batches(monkeypatch)
    occurrences = [
        occurrence("c1", CELERY_TASK, 1),
        occurrence("r1", RQ_TASK, 2),
        occurrence("lost", "nowhere.at_all.task", 3),
        occurrence("c2", CELERY_TASK, 4),
        occurrence("r2", RQ_TASK, 5),
        occurrence("c3", CELERY_TASK, 6),
    ]
    results = router.submit_many(occurrences)

    assert len(results) == 6
    assert [results[i] for i in (0, 3, 5)] == [occurrences[i].idempotency_key for i in (0, 3, 5)]
    assert isinstance(results[2], PermanentSubmitError)
    assert "nowhere.at_all.task" in str(results[2])
    assert all(isinstance(results[i], str) for i in (1, 4))  # RQ job ids
    assert batches and len(batches) == 1  # the three Celery messages: one batch
    celery_ids = [json.loads(m)["headers"]["id"] for m in client.lrange("celery", 0, -1)]
    assert sorted(celery_ids) == sorted(occurrences[i].idempotency_key for i in (0, 3, 5))
    rq_jobs = client.lrange("rq:queue:default", 0, -1)
    assert sorted(j.decode() for j in rq_jobs) == sorted(str(results[i]) for i in (1, 4))


def test_a_backend_that_fails_as_a_whole_fails_only_its_share(
    router: DjangoRoutingSubmitter, client: redis.Redis
) -> None:
    class Exploding:
        name = "exploding"

        def submit_many(self, occurrences: Any) -> list[Any]:
            raise ConnectionError("broker gone")

        def submit(self, occurrence: Any) -> str:
            raise AssertionError("submit_many is used when offered")

        def close(self) -> None:
            return None

    router.submitter_for("rq")
    router._submitters["celery"] = Exploding()  # type: ignore[assignment]
    occurrences = [occurrence("c1", CELERY_TASK, 1), occurrence("r1", RQ_TASK, 2)]
    results = router.submit_many(occurrences)
    assert isinstance(results[0], ConnectionError)
    assert isinstance(results[1], str)
    assert client.llen("rq:queue:default") == 1


def test_the_router_awaits_the_bookkeeping_only_when_a_backend_does(
    router: DjangoRoutingSubmitter,
) -> None:
    """Celery and RQ finish nothing inside a submission: a batch routed to them does not
    wait for its bookkeeping, so the next claim may write it (claim_due(record=...)). A
    backend that finished something inside it (immediate Django Tasks, inline) does."""
    assert router.submit_many([occurrence("a", CELERY_TASK, 1), occurrence("b", RQ_TASK, 2)])
    assert router.awaits_bookkeeping() is False

    class Finishing:
        finished = ["done"]

        def awaits_bookkeeping(self) -> bool:
            return bool(self.finished)

        def after_bookkeeping(self) -> None:
            self.finished = []

        def close(self) -> None:
            pass

    router._submitters["django_tasks"] = Finishing()  # type: ignore[assignment]
    assert router.awaits_bookkeeping() is True
    router.after_bookkeeping()
    assert router.awaits_bookkeeping() is False
