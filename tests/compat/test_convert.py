"""to_trigger's contract: what converts, what is refused and why, celery bugs kept out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("celery")

from celery import Celery  # noqa: E402
from celery.schedules import crontab, schedule  # noqa: E402

from goatbeat.compat import UnsupportedSchedule, to_trigger  # noqa: E402
from goatbeat.core.errors import GoatbeatError  # noqa: E402
from goatbeat.core.triggers import IntervalTrigger  # noqa: E402
from tests.compat.custom_schedules import DailyButChristmas, OfficeHoursEvery10Min  # noqa: E402


class EveryOtherTick:
    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        return True, 1.0


def test_custom_schedule_is_refused_naming_type_and_reason() -> None:
    with pytest.raises(UnsupportedSchedule) as info:
        to_trigger(EveryOtherTick())
    assert isinstance(info.value, GoatbeatError) and isinstance(info.value, ValueError)
    assert "EveryOtherTick" in str(info.value)
    assert "is_due" in str(info.value)


def test_a_schedule_subclass_overriding_is_due_is_refused_naming_the_class() -> None:
    with pytest.raises(UnsupportedSchedule) as info:
        to_trigger(OfficeHoursEvery10Min(timedelta(minutes=10)))
    message = str(info.value)
    assert "custom schedule class OfficeHoursEvery10Min" in message
    assert "OfficeHoursEvery10Min.is_due" in message and "celery's schedule" in message


def test_a_crontab_subclass_skipping_a_day_is_refused_naming_the_class() -> None:
    with pytest.raises(UnsupportedSchedule) as info:
        to_trigger(DailyButChristmas(minute=0, hour=8), timezone="UTC")
    message = str(info.value)
    assert "custom schedule class DailyButChristmas" in message
    assert "DailyButChristmas.is_due" in message and "crontab" in message


class _Mixin:
    def remaining_delta(self, *args: object, **kwargs: object) -> object:
        raise NotImplementedError


class _EstimateOverride(schedule):  # type: ignore[misc]
    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return timedelta(seconds=1)


class _NowOverride(crontab):  # type: ignore[misc]
    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


class _MixedIn(_Mixin, crontab):  # type: ignore[misc]
    pass


@pytest.mark.parametrize(
    ("value", "method"),
    [
        (_EstimateOverride(timedelta(minutes=5)), "_EstimateOverride.remaining_estimate"),
        (_NowOverride(minute=0), "_NowOverride.now"),
        (_MixedIn(minute=0), "_Mixin.remaining_delta"),
    ],
)
def test_any_override_of_what_decides_the_fire_times_is_refused(value: object, method: str) -> None:
    with pytest.raises(UnsupportedSchedule, match=method):
        to_trigger(value, timezone="UTC")


class _Labelled(crontab):  # type: ignore[misc]
    def __init__(self, label: str, **fields: object) -> None:
        super().__init__(**fields)
        self.label = label

    def __repr__(self) -> str:
        return f"<labelled {self.label}>"


def test_a_subclass_changing_only_construction_or_repr_still_converts() -> None:
    from goatbeat.core.cron import CronTrigger

    assert to_trigger(_Labelled("x", minute=0, hour=8), timezone="UTC") == CronTrigger(
        "0 8 * * *", timezone="UTC"
    )


def test_django_celery_beats_own_classes_are_not_custom() -> None:
    pytest.importorskip("django_celery_beat")
    from django_celery_beat.tzcrontab import TzAwareCrontab

    from goatbeat.conversion import timing_overrides

    assert timing_overrides(TzAwareCrontab(minute=0, hour=8, tz=UTC)) == []
    assert timing_overrides(crontab(minute=0)) == [] and timing_overrides(object()) == []


@pytest.mark.parametrize("value", ["*/5", None, -3, 0, True])
def test_non_schedules_are_refused(value: object) -> None:
    with pytest.raises(UnsupportedSchedule):
        to_trigger(value)


def test_number_and_timedelta_are_intervals() -> None:
    assert to_trigger(30) == IntervalTrigger(timedelta(seconds=30))
    assert to_trigger(timedelta(minutes=5)) == IntervalTrigger(timedelta(minutes=5))


@pytest.mark.parametrize("value", [0.5, timedelta(milliseconds=200), schedule(0.25)])
def test_a_sub_second_interval_is_refused_saying_how_to_opt_in(value: object) -> None:
    with pytest.raises(UnsupportedSchedule, match="shorter than 1 s.*allow_subsecond=True"):
        to_trigger(value)


def test_relative_interval_that_celery_would_round_differently_is_refused() -> None:
    with pytest.raises(UnsupportedSchedule, match="every 1:00:00"):
        to_trigger(schedule(timedelta(minutes=90), relative=True), timezone="UTC")


def test_spring_forward_fixed_time_fires_when_clocks_jump_not_an_hour_late() -> None:
    app = Celery("t", set_as_current=False)
    app.conf.timezone = "Europe/Paris"
    c = crontab(minute=30, hour=2, app=app)
    before = datetime(2026, 3, 28, 12, tzinfo=UTC)
    c.nowfun = lambda: before
    celery_fire = before + c.remaining_estimate(before)
    ours = to_trigger(c).next_after(before)
    # celery: 03:30 CEST (01:30Z); goatbeat (Debian cron): 03:00 CEST, the jump (01:00Z).
    assert celery_fire == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert ours == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_local_time_app_without_zone_is_refused() -> None:
    app = Celery("t", set_as_current=False)
    app.conf.enable_utc = False
    with pytest.raises(UnsupportedSchedule, match="timezone"):
        to_trigger(crontab(minute=0, app=app))
