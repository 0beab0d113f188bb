"""Beat: declarations validated at once, publishing, and a scheduler built from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from goatbeat.beat import Beat, task_path
from goatbeat.core.clock import FakeClock
from goatbeat.core.errors import (
    ConfigError,
    InvalidCoordinate,
    InvalidCron,
    InvalidDuration,
    InvalidSchedule,
    InvalidTimezone,
    InvalidValue,
    TaskNotAllowed,
    UnsupportedOption,
)
from goatbeat.core.model import ExecutionStatus, MisfirePolicy, Source
from goatbeat.core.triggers import CronTrigger, IntervalTrigger, OnceTrigger, SolarTrigger
from goatbeat.submitters.inline import InlineSubmitter

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
ran: list[Any] = []


def job(*args: Any, **kwargs: Any) -> None:
    ran.append((args, kwargs))


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def beat(**kw: Any) -> Beat:
    return Beat("memory://", **kw)


def test_each_trigger_keyword_builds_its_trigger():
    b = beat(timezone="Europe/Paris", clock=FakeClock(START))
    cron = b.schedule(name="c", task=job, cron="0 9 * * mon-fri")
    interval = b.schedule(name="i", task=job, every="5m")
    once = b.schedule(name="o", task=job, at="2027-01-01T09:00:00Z")
    solar = b.schedule(
        name="s", task=job, solar={"event": "sunrise", "latitude": 48.85, "longitude": 2.35}
    )
    assert isinstance(cron.trigger, CronTrigger) and cron.timezone == "Europe/Paris"
    assert isinstance(interval.trigger, IntervalTrigger)
    assert interval.trigger.every == timedelta(minutes=5)
    assert isinstance(once.trigger, OnceTrigger)
    assert once.trigger.at == datetime(2027, 1, 1, 9, tzinfo=UTC)
    assert isinstance(solar.trigger, SolarTrigger)
    assert [s.name for s in b.schedules] == ["c", "i", "o", "s"]


def test_declaration_carries_every_option():
    b = beat()
    s = b.schedule(
        name="full",
        task="json.dumps",
        cron="*/5 * * * *",
        timezone="America/New_York",
        args=[1, "two"],
        kwargs={"k": [3]},
        queue="emails",
        priority=5,
        expires="10m",
        headers={"h": 1},
        misfire="run_all",
        misfire_grace="2m",
        catch_up_limit=7,
        start_at="2026-06-01T00:00:00Z",
        end_at=datetime(2027, 1, 1, tzinfo=UTC),
        description="all of it",
        enabled=False,
    )
    assert s.task == "json.dumps" and s.source is Source.CODE
    assert s.timezone == "America/New_York"
    assert s.args == (1, "two") and s.kwargs == {"k": [3]}
    assert s.routing.queue == "emails" and s.routing.priority == 5
    assert s.routing.expires == 600.0 and s.routing.headers == {"h": 1}
    assert s.misfire is MisfirePolicy.RUN_ALL and s.misfire_grace == timedelta(minutes=2)
    assert s.catch_up_limit == 7 and not s.enabled
    assert s.start_at == datetime(2026, 6, 1, tzinfo=UTC)
    assert s.description == "all of it"


def test_an_interval_with_start_at_is_anchored_on_it():
    s = beat().schedule(name="i", task=job, every="1h", start_at="2026-06-01T10:30:00Z")
    assert s.first_run_after(START) == datetime(2026, 6, 1, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("options", "error", "field"),
    [
        ({}, InvalidSchedule, "trigger"),
        ({"cron": "* * * * *", "every": "5m"}, InvalidSchedule, "trigger"),
        ({"cron": "0 9 * * 8"}, InvalidCron, "cron"),
        ({"every": "five minutes"}, InvalidDuration, "every"),
        ({"every": "0s"}, InvalidSchedule, "every"),
        ({"at": "tomorrow"}, InvalidValue, "at"),
        ({"solar": {"event": "sunrise", "latitude": 91, "longitude": 0}}, InvalidCoordinate, None),
        ({"solar": {"event": "sunrise"}}, InvalidSchedule, "solar"),
        ({"every": "5m", "timezone": "Mars/Olympus"}, InvalidTimezone, "timezone"),
        ({"every": "5m", "misfire": "sometimes"}, InvalidSchedule, "misfire"),
        ({"every": "5m", "misfire_grace": "soon"}, InvalidDuration, "misfire_grace"),
        ({"every": "5m", "expires": "never"}, InvalidDuration, "expires"),
        ({"every": "5m", "args": [object()]}, InvalidSchedule, "args"),
        ({"every": "5m", "kwargs": {"x": {1, 2}}}, InvalidSchedule, "kwargs"),
        ({"every": "5m", "priority": "high"}, InvalidSchedule, "priority"),
        ({"every": "5m", "catch_up_limit": 0}, InvalidSchedule, "catch_up_limit"),
        ({"every": "5m", "start_at": datetime(2026, 1, 1)}, InvalidValue, "start_at"),
        ({"every": "5m", "enabled": "yes"}, InvalidSchedule, "enabled"),
    ],
)
def test_invalid_declarations_fail_at_once_naming_the_field(options, error, field):
    b = beat()
    with pytest.raises(error) as info:
        b.schedule(name="bad", task=job, **options)
    if field is not None:
        assert info.value.field == field
    assert b.schedules == []


def test_a_name_declared_twice_is_refused():
    b = beat()
    b.schedule(name="x", task=job, every="1m")
    with pytest.raises(InvalidSchedule, match="declared twice") as info:
        b.schedule(name="x", task=job, every="2m")
    assert info.value.field == "name"


def test_task_paths_of_callables_and_rejection_of_unimportable_ones():
    assert task_path(job) == f"{job.__module__}.job"
    assert task_path("a.b.c") == "a.b.c"

    def nested() -> None: ...

    with pytest.raises(InvalidSchedule, match="module level") as info:
        beat().schedule(name="n", task=nested, every="1m")
    assert info.value.field == "task"
    with pytest.raises(InvalidSchedule, match="module level"):
        beat().schedule(name="l", task=lambda: None, every="1m")


def test_the_submitter_validates_each_declaration():
    with pytest.raises(InvalidSchedule) as info:
        beat().schedule(name="typo", task="json.dumpz", every="1m")
    assert info.value.field == "task"
    strict = beat(submitter=InlineSubmitter(strict=True))
    with pytest.raises(UnsupportedOption) as unsupported:
        strict.schedule(name="q", task=job, every="1m", queue="emails")
    assert unsupported.value.field == "queue"


decorated = Beat("memory://")


@decorated.schedule(every="10s")
def tick() -> None: ...


@decorated.schedule(name="named", cron="0 * * * *")
def other() -> None: ...


def test_schedule_works_as_a_decorator():
    assert [s.name for s in decorated.schedules] == ["tick", "named"]
    assert decorated.schedules[0].task == f"{tick.__module__}.tick"
    assert callable(tick) and callable(other)  # the functions themselves are returned


def test_settings_are_validated_listing_every_problem():
    with pytest.raises(ConfigError) as info:
        Beat("memory://", settings={"lease_ttl": "abc", "batch_size": 0})
    assert len(info.value.problems) == 2
    with pytest.raises(InvalidTimezone):
        Beat("memory://", timezone="Nowhere/Land")
    b = Beat("memory://", settings={"lease_ttl": "3s", "lease_renew_interval": "1s"})
    assert b.settings.lease_ttl == timedelta(seconds=3)
    assert b.settings.database == "memory://"


def test_declaring_touches_no_database():
    b = Beat("postgresql://nobody@127.0.0.1:1/none")
    b.schedule(name="x", task=job, every="1m")
    assert b._store is None


# -- with a store ------------------------------------------------------------------------------


def test_publish_then_scheduler_runs_the_declared_tasks():
    clock = FakeClock(START)
    b = Beat("memory://", clock=clock, settings={"scheduler_id": "me"})
    b.schedule(name="tick", task=job, every="10s", args=[1], kwargs={"k": "v"})
    result = b.publish()
    assert result.created == ["tick"]
    assert b.publish().unchanged == ["tick"]
    loop = b.scheduler()
    loop.run_once()
    clock.advance(10)
    assert loop.run_once().submitted == 1
    assert ran == [((1,), {"k": "v"})]
    assert b.store.executions(name="tick")[0].status is ExecutionStatus.SUCCEEDED
    b.close()


def test_prune_disables_code_schedules_no_longer_declared():
    clock = FakeClock(START)
    first = Beat("memory://", clock=clock)
    first.schedule(name="keep", task=job, every="1m")
    first.schedule(name="gone", task=job, every="1m")
    first.publish()
    store = first.store

    second = Beat("memory://", clock=clock)
    second._store = store  # the same database, as after a redeploy
    second.schedule(name="keep", task=job, every="1m")
    second.publish()
    assert second.prune() == ["gone"]
    assert not store.get("gone").enabled and store.get("keep").enabled


def test_run_now_requests_a_manual_run_the_scheduler_submits():
    clock = FakeClock(START)
    b = Beat("memory://", clock=clock)
    b.schedule(name="tick", task=job, every="1h")
    b.publish()
    execution = b.run_now("tick")
    assert execution.idempotency_key.startswith("tick:manual:")
    assert b.scheduler().run_once().submitted == 1
    assert ran == [((), {})]


def test_use_database_is_refused_once_the_store_is_open():
    b = Beat("memory://")
    b.use_database("memory://")
    assert b.store is not None
    with pytest.raises(InvalidValue):
        b.use_database("sqlite:///other.db")


# -- limits that mean what they say (#12) ----------------------------------------------------


@pytest.mark.parametrize("at", ["2026-03-01T11:59:59Z", START, START - timedelta(days=400)])
def test_a_new_one_off_already_past_is_refused_by_name_and_the_others_are_published(
    at: Any,
) -> None:
    b = beat(clock=FakeClock(START))
    b.schedule(name="launch-email", task=job, at=at)
    b.schedule(
        name="launch-trigger", task=job, trigger=OnceTrigger(at=START - timedelta(seconds=1))
    )
    b.schedule(name="tick", task=job, every="1m")
    result = b.publish()
    assert result.created == ["tick"]
    assert sorted(result.refused) == ["launch-email", "launch-trigger"]
    message = result.refused["launch-email"]
    assert "already past" in message and "now 2026-03-01T12:00:00Z" in message
    assert [s.name for s in b.store.list_schedules()] == ["tick"]
    assert result.orphaned == []


def test_a_stored_one_off_whose_instant_passed_is_ended_and_publishes_again(
    tmp_path: Any,
) -> None:
    database = f"sqlite:///{tmp_path}/gb.db"
    clock = FakeClock(START)
    at = START + timedelta(seconds=3)
    first = Beat(database, clock=clock)
    first.migrate()
    first.schedule(name="launch-email", task=job, at=at)
    first.schedule(name="tick", task=job, every="1m")
    first.publish()
    clock.advance(10)
    loop = first.scheduler()
    loop.run_once()
    loop.run_once()
    first.close()
    assert ((), {}) in ran

    # The same code, restarted after the instant: nothing refused, nothing orphaned.
    again = Beat(database, clock=clock)
    again.schedule(name="launch-email", task=job, at=at)
    again.schedule(name="tick", task=job, every="1m")
    result = again.publish()
    assert result.refused == {} and result.orphaned == []
    assert sorted(result.unchanged) == ["launch-email", "tick"]
    assert again.store.get("launch-email").next_run_at is None

    # Moving it to another past instant is a new declaration of a past instant: refused,
    # the stored row kept as it was and not counted orphaned.
    moved = Beat(database, clock=clock)
    moved.schedule(name="launch-email", task=job, at=START + timedelta(seconds=1))
    moved.schedule(name="tick", task=job, every="1m")
    result = moved.publish()
    assert list(result.refused) == ["launch-email"] and result.orphaned == []
    assert moved.store.get("launch-email").trigger == OnceTrigger(at=at)  # type: ignore[union-attr]
    assert moved.prune() == []
    again.close()
    moved.close()


def test_a_one_off_in_the_future_is_declared_and_fires_once() -> None:
    clock = FakeClock(START)
    b = beat(clock=clock)
    at = START + timedelta(minutes=5)
    once = b.schedule(name="launch-email", task=job, at=at, args=[1])
    b.publish()
    assert b.store.get("launch-email").next_run_at == at
    clock.advance(600)
    loop = b.scheduler()
    loop.run_once()
    loop.run_once()
    assert ran == [((1,), {})]
    assert once.trigger.next_after(at) is None


@pytest.mark.parametrize("every", [0.5, "500ms", timedelta(milliseconds=10)])
def test_an_interval_below_one_second_is_refused_unless_allowed(every: Any) -> None:
    b = beat()
    with pytest.raises(InvalidSchedule) as caught:
        b.schedule(name="fast", task=job, every=every)
    assert caught.value.field == "every" and caught.value.value == every
    assert "allow_subsecond=True" in str(caught.value)
    fast = b.schedule(name="fast", task=job, every=every, allow_subsecond=True)
    assert isinstance(fast.trigger, IntervalTrigger) and fast.trigger.allow_subsecond
    b.publish()
    stored = b.store.get("fast")
    assert stored.trigger == fast.trigger  # type: ignore[union-attr]


def test_allow_subsecond_applies_to_intervals_only() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        beat().schedule(name="c", task=job, cron="* * * * *", allow_subsecond=True)
    assert caught.value.field == "allow_subsecond"


def test_declarations_of_the_same_cron_or_interval_share_one_trigger():
    beat = Beat("memory://")
    a = beat.schedule(name="a", task="os.getcwd", cron="*/5 * * * *")
    b = beat.schedule(name="b", task="os.getpid", cron="*/5 * * * *")
    c = beat.schedule(name="c", task="os.cpu_count", cron="*/5 * * * *", timezone="Europe/Paris")
    d = beat.schedule(name="d", task="os.getcwd", every="5m")
    e = beat.schedule(name="e", task="os.getcwd", every="5m")
    f = beat.schedule(name="f", task="os.getcwd", every=300)
    assert a.trigger is b.trigger and c.trigger is not a.trigger
    assert c.trigger == CronTrigger("*/5 * * * *", timezone="Europe/Paris")
    assert d.trigger is e.trigger and d.trigger == f.trigger == IntervalTrigger(300)


def test_released_declarations_keep_their_names_and_tasks_and_refuse_a_publication():
    beat = Beat("memory://")
    beat.schedule(name="a", task="os.getcwd", every="1h")
    beat.schedule(name="b", task="os.getpid", every="1h")
    assert sorted(beat.publish().created) == ["a", "b"]
    beat.store.publish(  # an older code schedule, still enabled in the store
        [beat.schedules[0].evolve(name="old")], source=Source.CODE
    )

    beat.release_declarations()

    assert beat.schedules == []
    beat.check_task("os.getcwd")  # still allowed: its schedule was declared
    with pytest.raises(TaskNotAllowed):
        beat.check_task("os.system")
    assert beat.prune() == ["old"]  # the released names are kept
    with pytest.raises(InvalidValue, match="released"):
        beat.publish()
    with pytest.raises(InvalidSchedule, match="released"):
        beat.schedule(name="c", task="os.cpu_count", every="1h")


def test_expires_from_per_schedule_is_a_one_line_error_naming_the_field() -> None:
    b = beat()
    with pytest.raises(InvalidSchedule) as caught:
        b.schedule(name="late", task=job, every="1m", expires="30s", expires_from="scheduled")
    assert caught.value.field == "expires_from"
    assert "give it to the submitter" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(InvalidSchedule) as unknown:
        b.schedule(name="late", task=job, every="1m", colour="blue")
    assert unknown.value.field == "colour"
    assert b.schedules == []
