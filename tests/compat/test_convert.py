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


class EveryOtherTick:
    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        return True, 1.0


def test_custom_schedule_is_refused_naming_type_and_reason() -> None:
    with pytest.raises(UnsupportedSchedule) as info:
        to_trigger(EveryOtherTick())
    assert isinstance(info.value, GoatbeatError) and isinstance(info.value, ValueError)
    assert "EveryOtherTick" in str(info.value)
    assert "is_due" in str(info.value)


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
