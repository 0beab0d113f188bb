"""Django Tasks guarded by goatbeat.idempotency, next to an unguarded control; each leaves a
trace line per run of its body (tests/django/test_idempotency_worker.py counts them)."""

from django.tasks import task

from goatbeat.idempotency.django_tasks import idempotent
from tests.django.project.reports.tasks import _trace


@idempotent
@task(queue_name="reports")
def guarded_report(n: int) -> int:
    _trace(f"guarded:{n}")
    return n


@task(queue_name="reports")
def plain_report(n: int) -> int:
    _trace(f"plain:{n}")
    return n


@idempotent()
@task(queue_name="reports", takes_context=True)
def guarded_with_context(context: object, n: int) -> str:
    task_id = str(context.task_result.id)  # type: ignore[attr-defined]
    _trace(f"context:{n}:{task_id}")
    return task_id


@idempotent
@task(backend="immediate")
def guarded_immediate(n: int) -> int:
    _trace(f"immediate:{n}")
    return n
