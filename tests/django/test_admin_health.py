"""The admin's operations pages: the executions' outcomes, the lease and the scheduler processes
(read-only, judged by the database clock, headed by the health verdict), the missed runs."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from goatbeat.core.health import Outcome, Role, SchedulerBeat
from goatbeat.core.model import Miss, SubmitOutcome


@pytest.fixture
def client(store: Any) -> Client:
    call_command("goatbeat", "schedule", "list", stdout=StringIO(), stderr=StringIO())
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def _report(store: Any, name: str, outcome: Outcome, **kw: Any) -> Any:
    execution = store.request_run(name)
    grant = store.acquire_lease("scheduler", "web-1:7:abc", timedelta(minutes=5))
    store.claim_manual_runs(grant, scheduler_id="web-1:7:abc", execution_ids=[execution.id])
    store.record_outcomes([SubmitOutcome(execution_id=execution.id, ok=True)])
    store.record_started(execution.idempotency_key, worker="worker-1:99")
    store.record_completion(execution.idempotency_key, outcome=outcome, **kw)
    return execution


def test_the_executions_list_shows_outcome_runtime_error_and_links_the_schedule(
    client: Client, store: Any
) -> None:
    _report(store, "daily-report", Outcome.FAILED, error="RuntimeError: disk full", runtime=2.5)
    _report(store, "ping", Outcome.SUCCEEDED, runtime=0.25)
    listing = reverse("admin:goatbeat_execution_changelist")
    page = client.get(listing).content.decode()
    report = store.get("daily-report")
    assert f'href="{reverse("admin:goatbeat_schedule_change", args=[report.id])}"' in page
    assert "RuntimeError: disk full" in page and "2.5 seconds" in page and "250 ms" in page
    assert "worker-1:99" in page

    only = client.get(listing, {"schedule": "daily-report"}).content.decode()
    assert "disk full" in only and "250 ms" not in only
    failed = client.get(listing, {"status__exact": "failed"}).content.decode()
    assert "disk full" in failed and "250 ms" not in failed
    searched = client.get(listing, {"q": "disk full"}).content.decode()
    assert "2.5 seconds" in searched and "250 ms" not in searched


def test_the_lease_and_the_schedulers_are_visible_read_only_with_the_verdict(
    client: Client, store: Any
) -> None:
    lease = reverse("admin:goatbeat_lease_changelist")
    page = client.get(lease).content.decode()
    assert "Unhealthy: no scheduler has ever held the lease" in page

    grant = store.acquire_lease("scheduler", "web-1:7:abc", timedelta(seconds=30))
    assert grant is not None
    store.heartbeat(
        SchedulerBeat(
            scheduler_id="web-1:7:abc",
            role=Role.LEADER,
            fencing_token=grant.token,
            hostname="web-1",
            pid=7,
            version="1.2.3",
        )
    )
    store.heartbeat(SchedulerBeat(scheduler_id="web-2:8:def", role=Role.STANDBY))
    page = client.get(lease).content.decode()
    assert "Healthy: web-1:7:abc holds the lease" in page
    assert "web-1:7:abc" in page and "s left" in page

    schedulers = client.get(reverse("admin:goatbeat_schedulerprocess_changelist"))
    text = schedulers.content.decode()
    assert "web-1:7:abc" in text and "web-2:8:def" in text and "leader" in text
    assert "1.2.3" in text and "s ago" in text and 'alt="True"' in text

    for model in ("lease", "schedulerprocess", "miss"):
        assert client.get(reverse(f"admin:goatbeat_{model}_add")).status_code == 403
    change = reverse("admin:goatbeat_lease_change", args=["scheduler"])
    client.post(change, {"holder": "intruder"})
    assert store.read_lease("scheduler")[0] == "web-1:7:abc"


def test_missed_runs_are_listed(client: Client, store: Any) -> None:
    report = store.get("daily-report")
    store.record_misses(
        [Miss(schedule_id=report.id, schedule_name="daily-report", count=4)], scheduler_id="s1"
    )
    page = client.get(reverse("admin:goatbeat_miss_changelist")).content.decode()
    assert "daily-report" in page and ">4<" in page


def test_manage_py_goatbeat_status_is_the_same_probe(store: Any) -> None:
    from tests.django.conftest import manage

    down = manage("goatbeat", "status", "--check")
    assert down.returncode == 1, down.stderr
    assert down.stdout == "goatbeat: unhealthy: no scheduler has ever held the lease\n"
    assert store.acquire_lease("scheduler", "web-1:7:abc", timedelta(seconds=30)) is not None
    up = manage("goatbeat", "status", "--json")
    assert up.returncode == 0, up.stderr
    assert '"holder": "web-1:7:abc"' in up.stdout and '"healthy": true' in up.stdout
