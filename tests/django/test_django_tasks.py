"""Django Tasks: submission, and completion through task_finished in a REAL db_worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from goatbeat.core.errors import PermanentSubmitError
from goatbeat.core.model import ExecutionStatus, Occurrence, Routing, Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.django.completions import on_task_finished
from goatbeat.submitters import django_tasks, load_submitter
from goatbeat.submitters.django_tasks import DjangoTasksSubmitter
from tests.django.conftest import manage

pytestmark = pytest.mark.django_tasks


def goatbeat(*args: str) -> str:
    out = StringIO()
    call_command("goatbeat", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _run_and_submit(store: Any, *names: str) -> None:
    goatbeat("schedule", "list")  # publishes the code schedules
    for name in names:
        goatbeat("schedule", "run", name)
    goatbeat("scheduler", "--once")
    for name in names:
        (execution,) = store.executions(name=name)
        assert execution.status is ExecutionStatus.SUBMITTED, execution


@pytest.mark.slow
def test_a_real_worker_reports_success_and_failure_back_to_the_executions(
    store: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    _run_and_submit(store, "weekly-report", "broken-report")

    worker = manage(
        "db_worker",
        "--batch",
        "--no-startup-delay",
        "--no-reload",
        "--queue-name",
        "reports",
        env={"GOATBEAT_TEST_TRACE": str(trace)},
    )
    assert worker.returncode == 0, worker.stderr

    assert trace.read_text().splitlines() == ["report:weekly"]
    (ok,) = store.executions(name="weekly-report")
    assert ok.status is ExecutionStatus.SUCCEEDED
    assert ok.finished_at is not None and ok.submitted_at is not None
    (broken,) = store.executions(name="broken-report")
    assert broken.status is ExecutionStatus.FAILED
    assert "the report generator broke" in (broken.error or "")
    assert store.get("broken-report").last_status == "failed"
    # As for every backend that reports: when it started, how long it ran, which worker.
    for execution in (ok, broken):
        assert execution.started_at is not None and execution.runtime is not None
        assert execution.started_at <= execution.finished_at  # type: ignore[operator]
        assert execution.runtime >= 0 and (execution.worker or "").count(":") == 1
    [failing] = [h for h in store.schedule_health(overdue_after=timedelta(hours=1))
                 if h.name == "broken-report"]  # fmt: skip
    assert failing.consecutive_failures == 1 and failing.last_failure_at is not None


def test_an_immediate_backend_finishes_inside_enqueue_and_is_still_recorded(store: Any) -> None:
    store.create(
        Schedule(
            name="right-now",
            task="tests.django.project.reports.tasks.immediate_report",
            trigger=IntervalTrigger("1h"),
            source=Source.ADMIN,
        )
    )
    goatbeat("schedule", "run", "right-now")
    goatbeat("scheduler", "--once")
    (execution,) = store.executions(name="right-now")
    # claimed -> submitted -> succeeded: the completion waited for the bookkeeping.
    assert execution.status is ExecutionStatus.SUCCEEDED
    assert execution.submitted_at is not None and execution.backend_task_id


def test_the_receiver_never_raises(store: Any) -> None:
    class Weird:
        status = "SUCCESSFUL"
        id = "no-such-task"

        @property
        def task(self) -> Any:
            raise RuntimeError("broken result object")

    on_task_finished(sender=None, task_result=Weird())
    on_task_finished(sender=None, task_result=object())


def test_the_submitter_is_loaded_by_name_and_rejects_what_django_tasks_cannot_honour() -> None:
    from goatbeat.core.errors import UnsupportedOption

    submitter = load_submitter("django_tasks")
    assert isinstance(submitter, DjangoTasksSubmitter)
    with pytest.raises(UnsupportedOption):
        submitter.validate(
            Schedule(
                name="x",
                task="tests.django.project.mail.tasks.send_email",
                trigger=IntervalTrigger("1h"),
                routing=Routing(exchange="amq.direct"),
            )
        )


def _occurrence(execution_id: int = 7) -> Occurrence:
    return Occurrence(
        execution_id=execution_id,
        schedule_id=1,
        schedule_name="weekly-report",
        task="tests.django.project.reports.tasks.generate_report",
        args=("weekly",),
        kwargs={},
        routing=Routing(),
        scheduled_at=datetime(2026, 12, 1, 8, tzinfo=UTC),
        idempotency_key="weekly-report:2026-12-01T08:00:00Z",
    )


class RecordingLedger:
    database = "default"

    def __init__(self) -> None:
        self.recorded: list[tuple[str, int, str, bool]] = []

    def record_task_id(self, database: str, execution_id: int, task_id: str) -> None:
        from django.db import connections

        in_transaction = connections[database].in_atomic_block
        self.recorded.append((database, execution_id, task_id, in_transaction))

    def store(self) -> Any:
        raise AssertionError("no completion to report")


def test_the_task_id_goes_to_the_ledger_inside_the_enqueue_transaction(store: Any) -> None:
    ledger = RecordingLedger()
    submitter = DjangoTasksSubmitter(ledger=ledger)
    task_id = submitter.submit(_occurrence())
    assert ledger.recorded == [("default", 7, task_id, True)]


def test_without_goatbeats_django_app_a_submission_fails_for_good_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(django_tasks, "_default_ledger", None)
    with pytest.raises(PermanentSubmitError, match="goatbeat.django"):
        DjangoTasksSubmitter().submit(_occurrence())
