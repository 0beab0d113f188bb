"""Two ``manage.py goatbeat scheduler`` replicas reading one ``GOATBEAT["scheduler_id"]``
(#32 item 0): the Django guide's own example sets it, and every replica reads the same
settings file. Before, both logged ``lease.acquired`` with the same fencing token and both
submitted. Now one leads, the other stands by and warns naming both, and every occurrence is
enqueued once (each enqueue is a row of django-tasks-db's results table)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.instance import split_instance
from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from tests.django.test_overlap_workers import _popen, _stop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_tasks]


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def _wait(what: str, check: Any, procs: list[Any], logs: list[Path], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"a scheduler ended: {[log.read_text()[-2000:] for log in logs]}")
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}: {[log.read_text()[-2000:] for log in logs]}")


def test_replicas_sharing_the_settings_scheduler_id_never_both_lead(
    store: Any, tmp_path: Path, settings: Any
) -> None:
    from django_tasks_db.models import DBTaskResult

    shared = settings.GOATBEAT["scheduler_id"]
    store.create(
        Schedule(
            name="every-second",
            task="tests.django.project.reports.tasks.generate_report",
            trigger=IntervalTrigger("1s"),
            source=Source.ADMIN,
        )
    )
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = _popen("goatbeat", "-v", "2", "scheduler", "--no-publish", env={}, log=logs[0])
    procs = [a]
    try:
        _wait("a to lead", lambda: any(e["event"] == "lease.acquired" for e in _events(logs[0])),
              procs, logs)  # fmt: skip
        b = _popen("goatbeat", "-v", "2", "scheduler", "--no-publish", env={}, log=logs[1])
        procs.append(b)
        warning = _wait(
            "b's warning",
            lambda: next(
                (e for e in _events(logs[1]) if e["event"] == "scheduler.duplicate_id"), None
            ),
            procs,
            logs,
        )
        executions = len(store.executions(name="every-second", limit=1000))
        _wait("more runs", lambda: len(store.executions(name="every-second", limit=1000))
              >= executions + 5, procs, logs)  # fmt: skip
        status = store.status()
    finally:
        if len(procs) > 1:
            _stop(procs[1])  # b first: a would hand its lease over on SIGTERM
        _stop(procs[0])
    a_events, b_events = _events(logs[0]), _events(logs[1])
    a_instance = next(e["instance"] for e in a_events if e["event"] == "lease.acquired")
    assert split_instance(a_instance)[0] == shared == warning["scheduler_id"]
    assert warning["instance"] != a_instance
    assert [o.split(" ")[0] for o in warning["others"]] == [a_instance]
    assert [e for e in b_events if e["event"] == "lease.acquired"] == []
    assert any(e["event"] == "lease.standby" for e in b_events)
    assert sorted(p.scheduler_id for p in status.schedulers) == sorted(
        [a_instance, warning["instance"]]
    )
    # Each occurrence enqueued once: as many Django Tasks results as executions.
    rows = store.executions(name="every-second", limit=1000)
    assert {e.scheduler_id for e in rows} == {shared}
    assert DBTaskResult.objects.count() == len(rows)
