"""Converted celery schedules fire when celery says they fire (celery itself is the oracle)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

celery = pytest.importorskip("celery")
pytest.importorskip("ephem")

from celery import Celery  # noqa: E402
from celery.schedules import crontab, schedule, solar  # noqa: E402

from goatbeat.compat import CeleryCrontabTrigger, to_trigger  # noqa: E402
from goatbeat.core.cron import CronTrigger  # noqa: E402

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Sydney"]


def _app(zone: str) -> Celery:
    app = Celery("oracle", set_as_current=False)
    app.conf.timezone = zone
    return app


def celery_next(sched: object, after: datetime) -> datetime:
    """What celery beat computes: with last_run_at = now = ``after``, the next run."""
    sched.nowfun = lambda: after  # type: ignore[attr-defined]
    # elapsed time: add it in UTC (aware local arithmetic would be wall-clock arithmetic)
    return after.astimezone(UTC) + sched.remaining_estimate(after)  # type: ignore[attr-defined]


def near_dst(instant: datetime, zone: str) -> bool:
    tz = ZoneInfo(zone)
    return (instant - timedelta(hours=3)).astimezone(tz).utcoffset() != (
        instant + timedelta(hours=3)
    ).astimezone(tz).utcoffset()


def _field(values: st.SearchStrategy[int], low: int, high: int) -> st.SearchStrategy[object]:
    subset = st.sets(values, min_size=1, max_size=4)
    return st.one_of(
        st.just("*"),
        subset.map(lambda s: ",".join(str(v) for v in sorted(s))),
        st.integers(2, max(2, (high - low) // 2)).map(lambda k: f"*/{k}"),
        st.tuples(st.integers(low, high), st.integers(low, high)).map(
            lambda ab: f"{min(ab)}-{max(ab)}"
        ),
    )


crontab_specs = st.fixed_dictionaries(
    {
        "minute": _field(st.integers(0, 59), 0, 59),
        "hour": _field(st.integers(0, 23), 0, 23),
        "day_of_month": st.one_of(st.just("*"), st.just("*"), _field(st.integers(1, 28), 1, 28)),
        "month_of_year": st.one_of(st.just("*"), _field(st.integers(1, 12), 1, 12)),
        "day_of_week": st.one_of(st.just("*"), _field(st.integers(0, 6), 0, 6)),
    }
)
instants = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2032, 12, 31), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=0))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=crontab_specs, zone=st.sampled_from(ZONES), start=instants)
def test_converted_crontab_fires_when_celery_computes(
    spec: dict[str, str], zone: str, start: datetime
) -> None:
    app = _app(zone)
    try:
        c = crontab(app=app, **spec)
    except ValueError:
        assume(False)
        return
    trigger = to_trigger(c, timezone=zone)
    assume(not near_dst(start, zone))
    expected = celery_next(c, start)
    assume(not near_dst(expected, zone))
    got = trigger.next_after(start)
    assert got is not None
    assume(not near_dst(got, zone))
    assert got == expected.astimezone(UTC), (spec, zone, start, trigger)
    # ... and the next one after that too (celery steps from the run it just made).
    assume(not near_dst(got, zone))
    following = celery_next(c, expected)
    assume(not near_dst(following, zone))
    assert trigger.next_after(got) == following.astimezone(UTC)


@settings(max_examples=150, deadline=None)
@given(
    dom=st.sets(st.integers(1, 31), min_size=1, max_size=3),
    dow=st.sets(st.integers(0, 6), min_size=1, max_size=3),
    zone=st.sampled_from(ZONES),
    start=instants,
)
def test_both_day_fields_restricted_are_anded_like_celery(
    dom: set[int], dow: set[int], zone: str, start: datetime
) -> None:
    c = crontab(minute=0, hour=12, day_of_month=dom, day_of_week=dow, app=_app(zone))
    trigger = to_trigger(c)
    assert isinstance(trigger, CeleryCrontabTrigger)
    expected = celery_next(c, start)
    got = trigger.next_after(start)
    assert got == expected.astimezone(UTC)
    local = got.astimezone(ZoneInfo(zone))
    assert local.day in dom and local.isoweekday() % 7 in dow


def test_friday_the_13th_is_not_every_friday() -> None:
    trigger = to_trigger(
        crontab(minute=0, hour=9, day_of_month=13, day_of_week="fri"), timezone="UTC"
    )
    fires = []
    t = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(3):
        nxt = trigger.next_after(t)
        assert nxt is not None
        fires.append(nxt)
        t = nxt
    assert fires == [
        datetime(2026, 2, 13, 9, tzinfo=UTC),
        datetime(2026, 3, 13, 9, tzinfo=UTC),
        datetime(2026, 11, 13, 9, tzinfo=UTC),
    ]


def test_one_starred_day_field_stays_a_plain_cron_trigger() -> None:
    trigger = to_trigger(
        crontab(minute=0, hour=0, day_of_month="*/2", day_of_week=1), timezone="UTC"
    )
    assert isinstance(trigger, CronTrigger)
    assert trigger.expression == "0 0 */2 * 1"


def test_crontab_without_zone_uses_its_apps_timezone() -> None:
    c = crontab(minute=30, hour=2, app=_app("Europe/Paris"))
    trigger = to_trigger(c)
    assert isinstance(trigger, CronTrigger) and trigger.timezone == "Europe/Paris"


def test_wrapping_hour_range_keeps_celerys_expansion() -> None:
    trigger = to_trigger(crontab(minute=0, hour="22-2"), timezone="UTC")
    assert isinstance(trigger, CronTrigger)
    assert trigger.expression == "0 0-2,22-23 * * *"


@settings(max_examples=60, deadline=None)
@given(
    event=st.sampled_from(sorted(solar._all_events)),
    lat=st.floats(-60, 60),
    lon=st.floats(-180, 180),
    start=instants,
)
def test_converted_solar_within_a_minute_of_celery(
    event: str, lat: float, lon: float, start: datetime
) -> None:
    s = solar(event, lat, lon, app=_app("UTC"))
    expected = celery_next(s, start)
    got = to_trigger(s).next_after(start)
    assert got is not None
    # An event a few seconds from ``start`` may land on either side of it in either model.
    assume(abs((expected - start).total_seconds()) > 120)
    assert abs((got - expected).total_seconds()) <= 60, (event, lat, lon, start, got, expected)


@given(seconds=st.integers(1, 10 * 86_400), last=instants, zone=st.sampled_from(ZONES))
@settings(max_examples=100, deadline=None)
def test_interval_counts_from_last_run_like_celery(seconds: int, last: datetime, zone: str) -> None:
    s = schedule(timedelta(seconds=seconds), app=_app(zone))
    trigger = to_trigger(s, last_run_at=last)
    assert trigger.next_after(last) == celery_next(s, last)


@pytest.mark.parametrize("every", [timedelta(minutes=5), timedelta(hours=2), timedelta(days=1)])
def test_relative_interval_rounds_like_celery(every: timedelta) -> None:
    s = schedule(every, relative=True, app=_app("Europe/Paris"))
    # celery beat stamps last_run_at with app.now(), in the app's zone: it rounds there.
    last = datetime(2026, 5, 4, 10, 0, tzinfo=UTC).astimezone(ZoneInfo("Europe/Paris"))
    trigger = to_trigger(s, timezone="Europe/Paris", last_run_at=last)
    t = last
    for _ in range(4):
        expected = celery_next(s, t)
        assert trigger.next_after(t) == expected.astimezone(UTC)
        t = expected.astimezone(ZoneInfo("Europe/Paris"))
