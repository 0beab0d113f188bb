"""The health rules for refused schedules (#30 item 7): ``is_refused`` (the rule the stores
repeat in SQL and the admin reads from a row's columns), and ``check``, which is unhealthy
while a schedule is refused, naming the first, the count, since when and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goatbeat.core.health import LeaseState, Refusal, Refusals, StatusSnapshot, check, is_refused

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _refused(**kw: object) -> bool:
    row: dict[str, object] = {
        "enabled": True,
        "paused": False,
        "last_status": "refused",
        "source": "admin",
        "next_run_at": None,
    }
    row.update(kw)
    return is_refused(**row)  # type: ignore[arg-type]


def test_a_refused_row_stays_refused_until_it_runs_is_rescheduled_or_stopped_on_purpose() -> None:
    assert _refused()
    assert _refused(source="code", next_run_at=NOW)  # a code row keeps its next run
    assert not _refused(next_run_at=NOW)  # an admin row scheduled again (readmitted, edited)
    assert not _refused(last_status="submitted")  # it ran
    assert not _refused(enabled=False) and not _refused(paused=True)


def test_check_is_unhealthy_while_a_schedule_is_refused_and_says_which_since_when_and_why() -> None:
    lease = LeaseState(
        name="scheduler", holder="s1", token=3, expires_at=NOW + timedelta(seconds=20), valid=True
    )
    snapshot = StatusSnapshot(now=NOW, lease=lease)
    assert check(snapshot, max_lag=timedelta(minutes=1), refusals=Refusals()).ok
    first = Refusal(
        name="report",
        task="reports.weekly",
        source="admin",
        reason="refused: 'reports.weekly' is not a known task",
        since=NOW - timedelta(minutes=5),
    )
    refusals = Refusals(total=2, schedules=(first,))
    verdict = check(snapshot, max_lag=timedelta(minutes=1), refusals=refusals)
    assert not verdict.ok
    assert verdict.reason == (
        "refused: 2 schedule(s) do not run: 'report' since 2026-03-01T11:55:00Z (300s ago): "
        "refused: 'reports.weekly' is not a known task and 1 more (a scheduler that knows the "
        "task runs it again once it leads)"
    )
    assert "lease" not in verdict.reason  # the leader is fine
