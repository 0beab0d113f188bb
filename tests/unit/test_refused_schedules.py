"""A refusal is not a death (#30 item 7), with two code versions on one database: an admin
schedule naming a task the running release does not know yet (a release not rolled out
everywhere) is refused by the old scheduler — visible as refused, alerted — and runs again by
itself once a scheduler of the new release leads, with no disable and enable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from goatbeat.beat import Beat
from goatbeat.core.alerts import Alert, Alerter, AlertKind
from goatbeat.core.clock import FakeClock
from goatbeat.core.model import ExecutionStatus, Schedule, Source
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.triggers import IntervalTrigger

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TASK = "tests.unit.test_refused_schedules.report"
ran: list[str] = []


def report() -> None:
    ran.append("report")


def tick() -> None:
    pass


def release(database: str, clock: FakeClock, *, knows_report: bool) -> Beat:
    """One release of the app: the new one allows the report task (its allowed_tasks)."""
    settings: dict[str, Any] = {"scheduler_id": "new" if knows_report else "old"}
    if knows_report:
        settings["allowed_tasks"] = [TASK]
    beat = Beat(database, clock=clock, settings=settings)
    beat.schedule(name="tick", task=tick, every="1m")
    return beat


def loop(beat: Beat, alerts: list[Alert]) -> Scheduler:
    return Scheduler(
        beat.store,
        beat.submitter,
        settings=beat.settings,
        clock=beat.clock,
        alerter=Alerter([alerts.append]),
        allowed=beat.task_allow_list(),
    )


def test_a_schedule_refused_by_an_older_release_runs_once_a_scheduler_knows_its_task(
    tmp_path: Path,
) -> None:
    ran.clear()
    database = f"sqlite:///{tmp_path}/gb.db"
    clock = FakeClock(START)
    old = release(database, clock, knows_report=False)
    old.migrate()
    old.publish()
    old.store.create(
        Schedule(
            name="report",
            task=TASK,
            trigger=IntervalTrigger("1m"),
            source=Source.ADMIN,
            last_run_at=START - timedelta(minutes=1),
        )
    )
    alerts: list[Alert] = []
    first = loop(old, alerts)
    first.run_once()
    first.release()
    first.close()  # delivers the alerts
    refused = old.store.get("report")
    assert isinstance(refused, Schedule) and refused.last_status == "refused"
    assert [e.status for e in old.store.executions(name="report")] == [
        ExecutionStatus.SUBMIT_FAILED
    ]
    [alert] = [a for a in alerts if a.kind is AlertKind.REFUSED]
    assert alert.schedule == "report" and "not run" in alert.text
    old.close()

    clock.advance(5 * 60)
    new = release(database, clock, knows_report=True)
    new.publish()
    second = loop(new, [])
    second.run_once()  # leads, schedules the refused one again
    clock.advance(60)
    second.run_once()
    second.release()
    second.close()
    back = new.store.get("report")
    assert isinstance(back, Schedule) and back.next_run_at is not None
    statuses = [e.status for e in new.store.executions(name="report", limit=10)]
    assert ExecutionStatus.SUCCEEDED in statuses, statuses
    assert ran == ["report"]
    new.close()
