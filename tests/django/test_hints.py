"""What the commands tell a Django team: a hint printed under ``manage.py goatbeat`` names
``manage.py goatbeat ...`` (the standalone form, ``goatbeat ...``, where that runs), and
``schedule run`` says who will submit the run: the leader when one holds the lease, nobody
until one leads otherwise. Real subprocesses on the throwaway PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from goatbeat.core.model import Schedule, Source
from goatbeat.core.triggers import IntervalTrigger
from tests.django.conftest import manage
from tests.django.test_probes import standalone


def _orphan(store: Any) -> None:
    manage("goatbeat", "publish")
    store.create(
        Schedule(
            name="retired",
            task="tests.django.project.mail.tasks.send_email",
            trigger=IntervalTrigger("1h"),
            source=Source.CODE,
        )
    )


def test_hints_under_manage_py_name_manage_py_goatbeat(store: Any) -> None:
    _orphan(store)
    listed = manage("goatbeat", "schedule", "list")
    assert listed.returncode == 0, listed.stderr
    assert "(`manage.py goatbeat schedule prune` disables them): retired" in listed.stdout
    published = manage("goatbeat", "publish")
    assert "(`manage.py goatbeat schedule prune` disables it)" in published.stderr
    shown = manage("goatbeat", "schedule", "show", "not-published-nor-declared")
    assert shown.returncode == 2
    # The standalone command on the same project names itself.
    alone = standalone("schedule", "list")
    assert "(`goatbeat schedule prune` disables them): retired" in alone.stdout
    assert "manage.py" not in alone.stdout


def test_schedule_run_promises_no_leader_when_none_runs(store: Any) -> None:
    manage("goatbeat", "publish")
    nobody = manage("goatbeat", "schedule", "run", "ping")
    assert nobody.returncode == 0, nobody.stderr
    line = nobody.stdout.strip()
    assert "leading scheduler" not in line, line
    assert line.endswith(
        "no scheduler leads now (no unexpired lease): it waits in the database and the next "
        "scheduler to lead submits it; start one with `manage.py goatbeat scheduler`"
    ), line

    assert store.acquire_lease("scheduler", "web-1:7:abc", timedelta(minutes=5)) is not None
    led = manage("goatbeat", "schedule", "run", "ping")
    assert led.stdout.strip().endswith(
        "the leading scheduler (web-1:7:abc) submits it on its next iteration"
    ), led.stdout
