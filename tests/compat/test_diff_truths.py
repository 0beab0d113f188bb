"""``goatbeat diff`` tells the truth about the documented checks (#27 item 4): no false "runs
it at once" when a slot passes between the import and the diff while celery still runs, nor
with a window in the future; every-minute schedules over a year, without a cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("celery")

from celery.schedules import crontab  # noqa: E402

from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.diff import compute_diff  # noqa: E402
from goatbeat.importers import import_entries  # noqa: E402
from goatbeat.importers.celery_beat import read_beat_schedule  # noqa: E402
from goatbeat.stores import MemoryStore  # noqa: E402

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
HOURS = timedelta(hours=6)

BEAT = {
    "every-5s": {"task": "ping", "schedule": 5.0},
    "every-minute": {"task": "ping", "schedule": crontab()},
}


def _imported(last_runs: dict[str, datetime], at: datetime) -> MemoryStore:
    store = MemoryStore(clock=FakeClock(at))
    report = import_entries(store, read_beat_schedule(BEAT, last_runs=last_runs))
    assert report.ok, report.to_dict()
    return store


def _statuses(report: object) -> dict[str, str]:
    return {d.name: d.status for d in report.schedules}  # type: ignore[attr-defined]


def test_a_slot_passing_between_the_rehearsal_import_and_the_diff_is_no_difference() -> None:
    store = _imported({"every-5s": T0, "every-minute": T0}, T0 + 0.2 * SECOND)
    # celery beat keeps running during the rehearsal: it ran the next slots, a little late.
    runs = {
        "every-5s": T0 + 5 * SECOND + timedelta(milliseconds=2),
        "every-minute": T0 + 60 * SECOND,
    }
    entries = read_beat_schedule(BEAT, last_runs=runs)
    now = T0 + 61.4 * SECOND
    report = compute_diff(
        entries, store.list_schedules(), start=now.replace(microsecond=0), now=now, horizon=HOURS
    )
    assert report.equal, [d.to_dict() for d in report.schedules]
    notes = " ".join(n for d in report.schedules for n in d.notes)
    assert "compared as the cutover import leaves it" in notes


def test_a_window_in_the_future_runs_nothing_at_once() -> None:
    store = _imported({}, T0)
    entries = read_beat_schedule(BEAT)
    start = T0 + timedelta(days=3)
    report = compute_diff(entries, store.list_schedules(), start=start, now=T0, horizon=HOURS)
    assert report.equal, [d.to_dict() for d in report.schedules]
    # A start in the past still shows what is owed at once (the gap of a cutover).
    late = compute_diff(entries, store.list_schedules(), start=start, now=start, horizon=HOURS)
    assert _statuses(late)["every-minute"] == "different"


def test_every_minute_over_a_year_is_compared_to_the_end() -> None:
    # 527,040 and 1,054,080 instants a side: the cap was 100,000 ("compared up to ... only",
    # about 69 days of an every-minute schedule).
    beat = {
        "every-minute": {"task": "ping", "schedule": 60.0},
        "every-30s": {"task": "ping", "schedule": 30.0},
        "every-10-minutes": {"task": "ping", "schedule": crontab(minute="*/10")},
    }
    runs = dict.fromkeys(beat, T0)
    store = MemoryStore(clock=FakeClock(T0))
    entries = read_beat_schedule(beat, last_runs=runs)
    assert import_entries(store, entries).ok
    report = compute_diff(
        entries, store.list_schedules(), start=T0, horizon=timedelta(days=366), now=T0
    )
    assert report.equal, [d.to_dict() for d in report.schedules]
    notes = [n for d in report.schedules for n in d.notes]
    assert not any("compared up to" in n for n in notes), notes
