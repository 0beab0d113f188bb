"""``goatbeat diff`` can reach exit 0 on a correct migration: solar instants match within the
documented tolerance, a cap on the instants computed never creates a difference, DST reasons
name the actual shift, and a run owed at once (the cutover gap) is compared on both sides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("celery")

from celery.schedules import crontab, solar  # noqa: E402

from goatbeat import diff as diff_module  # noqa: E402
from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.core.model import Schedule  # noqa: E402
from goatbeat.diff import SOLAR_TOLERANCE, compute_diff  # noqa: E402
from goatbeat.importers import import_entries, read_beat_schedule  # noqa: E402
from goatbeat.importers.entries import SourceEntry  # noqa: E402
from goatbeat.stores import MemoryStore  # noqa: E402


def entries_and_rows(
    beat: dict[str, object], zone: str, now: datetime, **kw: object
) -> tuple[list[SourceEntry], list[Schedule]]:
    entries = read_beat_schedule(beat, timezone=zone, **kw)  # type: ignore[arg-type]
    store = MemoryStore(clock=FakeClock(now))
    report = import_entries(store, entries)
    assert report.failed == []
    return entries, store.list_schedules()


def test_solar_instants_match_within_the_tolerance_and_the_largest_deviation_is_given() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    beat = {
        name: {"task": "t", "schedule": solar(event, lat, lon)}
        for name, event, lat, lon in [
            ("paris-sunrise", "sunrise", 48.85, 2.35),
            ("oslo-dusk", "dusk_civil", 59.9, 10.75),
            ("quito-noon", "solar_noon", -0.18, -78.47),
        ]
    }
    old, new = entries_and_rows(beat, "UTC", start)

    report = compute_diff(old, new, start=start, horizon=timedelta(days=60))

    assert report.equal, [s.to_dict() for s in report.schedules if s.differs()]
    for s in report.schedules:
        assert s.solar_max_deviation is not None
        assert timedelta(0) < s.solar_max_deviation < SOLAR_TOLERANCE
        assert any("largest deviation" in note for note in s.notes)
        assert s.to_dict()["solar_max_deviation_seconds"] == s.solar_max_deviation.total_seconds()


def test_a_solar_instant_beyond_the_tolerance_is_still_a_difference() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    old, _ = entries_and_rows(
        {"s": {"task": "t", "schedule": solar("sunrise", 48.85, 2.35)}}, "UTC", start
    )
    _, moved = entries_and_rows(
        {"s": {"task": "t", "schedule": solar("sunrise", 48.85, 3.5)}}, "UTC", start
    )  # about 4.6 minutes earlier, every day
    report = compute_diff(old, moved, start=start, horizon=timedelta(days=2))
    (s,) = report.schedules
    assert s.status == "different" and s.fire_difference_count == 4


def test_the_instant_cap_never_creates_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every minute across the fall-back night: goatbeat runs the repeated hour twice, celery
    # once, so with a cap the two sides stop at instants an hour apart. Beyond the earlier one
    # nothing may be reported, and what is reported before it is the explained DST hour.
    monkeypatch.setattr(diff_module, "MAX_FIRES", 3000)
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    old, new = entries_and_rows(
        {"every-minute": {"task": "t", "schedule": crontab()}}, "Europe/Paris", start
    )

    report = compute_diff(old, new, start=start, horizon=timedelta(days=4), accept_known=True)

    (s,) = report.schedules
    assert report.equal, s.to_dict()
    assert s.fire_difference_count == 60  # the second pass of 02:00-02:59, goatbeat only
    assert all(f.known and f.new and not f.old for f in s.fire_times)
    assert any("3000 fire times per side" in note for note in s.notes)


def test_dst_reasons_name_the_actual_shift() -> None:
    start = datetime(2026, 10, 3, tzinfo=UTC)
    old, new = entries_and_rows(
        {"quarter-past-two": {"task": "t", "schedule": crontab(minute=15, hour=2)}},
        "Australia/Lord_Howe",
        start,
    )
    report = compute_diff(old, new, start=start, horizon=timedelta(days=2))
    (s,) = report.schedules
    reasons = {f.reason or "" for f in s.fire_times}
    assert reasons and all("30 minutes forward, from 02:00 to 02:30" in r for r in reasons)
    assert not any("hour" in r.split("not exist")[0] for r in reasons)
    assert all(f.known for f in s.fire_times)


def test_a_wildcard_minute_in_the_missing_hour_is_explained() -> None:
    # crontab(minute="*", hour=2) on the spring-forward night in Paris: 02:xx does not exist;
    # celery runs once at 03:00, goatbeat not at all (docs/migration/differences.md).
    start = datetime(2026, 3, 28, 12, tzinfo=UTC)
    old, new = entries_and_rows(
        {"two-oclock-hour": {"task": "t", "schedule": crontab(minute="*", hour=2)}},
        "Europe/Paris",
        start,
    )
    report = compute_diff(old, new, start=start, horizon=timedelta(days=1))
    (s,) = report.schedules
    assert [(f.at, f.old, f.new, f.known) for f in s.fire_times] == [
        (datetime(2026, 3, 29, 1, tzinfo=UTC), True, False, True)
    ]
    assert "from 02:00 to 03:00" in (s.fire_times[0].reason or "")


def test_a_run_owed_at_once_is_compared_on_both_sides() -> None:
    # celery beat was stopped 25 minutes after its last run of a 10-minute interval: both
    # celery (its catch-up) and goatbeat (next_run_at in the gap) run it at once.
    last = datetime(2026, 6, 10, 11, 55, tzinfo=UTC)
    start = last + timedelta(minutes=25)
    old, new = entries_and_rows(
        {"every-10m": {"task": "t", "schedule": timedelta(minutes=10)}},
        "UTC",
        start,
        last_runs={"every-10m": last},
    )
    report = compute_diff(old, new, start=start, horizon=timedelta(hours=1))
    assert report.equal, [s.to_dict() for s in report.schedules]

    # A goatbeat row planned from "now" (the defect of #14.2) drops the owed run: diff says so.
    dropped = [new[0].evolve(next_run_at=start + timedelta(minutes=10))]
    report = compute_diff(old, dropped, start=start, horizon=timedelta(hours=1))
    (s,) = report.schedules
    assert [(f.at, f.old, f.new) for f in s.fire_times] == [(start, True, False)]
    assert "at once" in (s.fire_times[0].reason or "")


def test_an_instant_claimed_ahead_of_the_diff_is_not_a_fire_to_come() -> None:
    # goatbeat's scheduler claims an occurrence shortly before its instant; a diff started in
    # between sees last_run_at after its start. Both sides count that instant as run (celery's
    # from goatbeat's last run): no difference (the example project's cutover test met it).
    start = datetime(2026, 6, 10, 12, 0, 15, 100_000, tzinfo=UTC)
    old, new = entries_and_rows(
        {"every-3s": {"task": "t", "schedule": timedelta(seconds=3)}}, "UTC", start
    )
    (row,) = new
    claimed = row.trigger.next_after(start)
    assert claimed is not None and claimed > start
    ahead = [row.evolve(last_run_at=claimed, next_run_at=claimed + timedelta(seconds=3))]
    report = compute_diff(old, ahead, start=start, horizon=timedelta(minutes=1))
    assert report.equal, [s.to_dict() for s in report.schedules]
    (fires,) = [diff_module.goatbeat_fire_times(ahead[0], start, start + timedelta(seconds=10))]
    assert claimed not in fires and fires[0] == claimed + timedelta(seconds=3)


def test_django_celery_beats_run_at_start_time_of_a_crontab_is_a_known_difference() -> None:
    # A never-run django-celery-beat crontab row with a start_time, as the reader builds it.
    start = datetime(2026, 6, 10, 12, tzinfo=UTC)
    (entry,) = read_beat_schedule(
        {"nine": {"task": "t", "schedule": crontab(minute=0, hour=9)}}, timezone="UTC"
    )
    assert entry.schedule is not None
    start_time = datetime(2026, 6, 10, 14, tzinfo=UTC)
    never_ran = start - timedelta(days=365 * 30)  # as django-celery-beat dates it
    entry = SourceEntry(
        name="nine",
        source=entry.source,
        schedule=entry.schedule.evolve(start_at=start_time, last_run_at=never_ran),
        celery_schedule=entry.celery_schedule,
        celery_tz="UTC",
        last_run_at=never_ran,
        task="t",
        args=[],
        kwargs={},
        routing=entry.routing,
    )
    store = MemoryStore(clock=FakeClock(start))
    import_entries(store, [entry])
    report = compute_diff([entry], store.list_schedules(), start=start, horizon=timedelta(days=2))
    (s,) = report.schedules
    assert [(f.at, f.old, f.known) for f in s.fire_times] == [(start_time, True, True)]
    assert "start_time" in (s.fire_times[0].reason or "")
    assert compute_diff(
        [entry], store.list_schedules(), start=start, horizon=timedelta(days=2), accept_known=True
    ).equal
