"""goatbeat.idempotency on Django Tasks, through a REAL django-tasks-db ``db_worker``.

A resubmission enqueues the same occurrence again: a second task result with its own id.
Django Tasks messages carry no headers, so the scheduler notes each id's key as it enqueues
(``goatbeat_task_key``), and the guarded task finds its key by its own id in the worker. The
unguarded control shows the duplicate really runs twice without the helper.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.model import Occurrence, Routing, idempotency_key
from goatbeat.idempotency.django import DjangoLedger
from goatbeat.submitters.django_tasks import DjangoTasksSubmitter
from tests.django.conftest import manage

AT = datetime(2031, 3, 1, 12, 0, tzinfo=UTC)
MODULE = "tests.django.project.reports.guarded_tasks"

pytestmark = pytest.mark.django_tasks


def occurrence(task: str, n: int, *, queue: str | None = "reports") -> Occurrence:
    return Occurrence(
        execution_id=n,
        schedule_id=n,
        schedule_name=task,
        task=f"{MODULE}.{task}",
        args=(n,),
        kwargs={},
        routing=Routing(queue=queue),
        scheduled_at=AT,
        idempotency_key=idempotency_key(task, AT),
    )


def noted(key: str) -> list[str]:
    from goatbeat.django.models import TaskKey

    return sorted(
        TaskKey.objects.filter(idempotency_key=key).values_list("backend_task_id", flat=True)
    )


@pytest.mark.slow
def test_a_real_db_worker_runs_a_guarded_occurrence_once_when_it_is_enqueued_twice(
    store: Any, tmp_path: Path
) -> None:
    submitter = DjangoTasksSubmitter(store)
    guarded = occurrence("guarded_report", 1)
    with_context = occurrence("guarded_with_context", 3)
    plain = occurrence("plain_report", 2)
    ids = {
        o.idempotency_key: [submitter.submit(o), submitter.submit(o)]
        for o in (guarded, with_context, plain)
    }
    # Two enqueues, two task results; each guarded one is noted with its key.
    assert all(len(set(v)) == 2 for v in ids.values())
    assert noted(guarded.idempotency_key) == sorted(ids[guarded.idempotency_key])
    assert noted(plain.idempotency_key) == []

    trace = tmp_path / "trace.txt"
    worker = manage(
        "db_worker", "--batch", "--no-startup-delay", "--no-reload", "--queue-name", "reports",
        env={"GOATBEAT_TEST_TRACE": str(trace)},
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr

    lines = trace.read_text().splitlines()
    assert lines.count("guarded:1") == 1  # the side effect happened exactly once
    assert lines.count("plain:2") == 2  # without the helper the duplicate runs
    # A task that takes the context still gets it (its own task result id).
    (context_line,) = [line for line in lines if line.startswith("context:3:")]
    assert context_line.rsplit(":", 1)[1] in ids[with_context.idempotency_key]
    ledger = DjangoLedger()
    for key in (guarded.idempotency_key, with_context.idempotency_key):
        record = ledger.read(key)
        assert record is not None
        assert (record.state, record.attempts, record.duplicates) == ("succeeded", 1, 1)
    assert ledger.read(plain.idempotency_key) is None


def test_an_immediate_backend_runs_a_guarded_occurrence_once(store: Any, tmp_path: Path) -> None:
    # The task runs inside enqueue: it learns its key from the submission in flight.
    import os

    trace = tmp_path / "trace.txt"
    os.environ["GOATBEAT_TEST_TRACE"] = str(trace)
    try:
        submitter = DjangoTasksSubmitter(store)
        once = occurrence("guarded_immediate", 4, queue=None)
        submitter.submit(once)
        submitter.submit(once)
    finally:
        del os.environ["GOATBEAT_TEST_TRACE"]
    assert trace.read_text().splitlines() == ["immediate:4"]
    record = DjangoLedger().read(once.idempotency_key)
    assert record is not None and (record.attempts, record.duplicates) == (1, 1)
