"""``goatbeat export``: schedules back to celery beat after edits in goatbeat (#27 item 8).

The round trip is the property: import(export(x)) == x on every field both sides have, over
many generated schedules, for both targets (``beat_schedule`` code, executed; django-celery-beat
rows in real tables, SQLite and PostgreSQL), and celery's own schedule objects built from what
was exported fire at the same instants as goatbeat over a week (``goatbeat.diff``). What cannot
come back as itself is refused by name and field, and these tests assert each refusal.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("celery")

from goatbeat.cli import cli  # noqa: E402
from goatbeat.core.cron import CronTrigger  # noqa: E402
from goatbeat.core.model import (  # noqa: E402
    MisfirePolicy,
    OverlapPolicy,
    Routing,
    Schedule,
    Source,
)
from goatbeat.core.triggers import (  # noqa: E402
    CeleryCrontabTrigger,
    IntervalTrigger,
    OnceTrigger,
    SolarTrigger,
    Trigger,
)
from goatbeat.diff import compute_diff  # noqa: E402
from goatbeat.importers import kombu_json  # noqa: E402
from goatbeat.importers.celery_beat import read_beat_schedule, read_last_runs  # noqa: E402
from goatbeat.importers.django_celery_beat import read_django_celery_beat  # noqa: E402
from goatbeat.importers.entries import SourceEntry  # noqa: E402
from goatbeat.stores import open_store  # noqa: E402

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney"]
EVENTS = [
    "dawn_astronomical",
    "dawn_nautical",
    "dawn_civil",
    "sunrise",
    "solar_noon",
    "sunset",
    "dusk_civil",
    "dusk_nautical",
    "dusk_astronomical",
]
WEEK = timedelta(days=7)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gb.sqlite3'}"
    store = open_store(url)
    store.migrate()
    store.close()
    return url


def store_schedules(url: str, schedules: list[Schedule]) -> dict[str, Schedule]:
    store = open_store(url)
    try:
        for sched in schedules:
            store.create(sched)
        stored = {s.name: s for s in store.list_schedules() if isinstance(s, Schedule)}
    finally:
        store.close()
    return stored


def stored(url: str) -> dict[str, Schedule]:
    store = open_store(url)
    try:
        return {s.name: s for s in store.list_schedules() if isinstance(s, Schedule)}
    finally:
        store.close()


# -- generated schedules ---------------------------------------------------------------------


def _cron_field(rng: random.Random, low: int, high: int) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return "*"
    if kind == 1:
        return f"*/{rng.randint(2, max(2, (high - low) // 2))}"
    if kind == 2:
        return str(rng.randint(low, high))
    if kind == 3:
        a = rng.randint(low, high - 2)
        return f"{a}-{rng.randint(a + 1, min(high - 1, a + (high - low) // 2))}"
    picks = sorted(rng.sample(range(low, high + 1), 3))
    return ",".join(str(p) for p in picks)


def _cron(rng: random.Random, zone: str) -> Trigger:
    minute = _cron_field(rng, 0, 59)
    if minute == "*" or minute.startswith("*/"):
        minute = str(rng.randint(0, 59)) if rng.random() < 0.5 else minute
    hour = _cron_field(rng, 0, 23)
    month = rng.choice(["*", "*", "*", "1-6,8-12", "*/2"])
    day = rng.randrange(4)
    if day == 0:
        return CronTrigger(f"{minute} {hour} * {month} *", timezone=zone)
    if day == 1:
        dow = rng.choice(["1-5", "0,6", "mon-fri", "1", "*/2"])
        return CronTrigger(f"{minute} {hour} * {month} {dow}", timezone=zone)
    if day == 2:
        dom = rng.choice(["1-15", "1,10,20", "*/3", "5"])
        return CronTrigger(f"{minute} {hour} {dom} {month} *", timezone=zone)
    # celery's AND of both day fields (a crontab imported with both restricted)
    return CeleryCrontabTrigger(f"{minute} {hour} 1-28 * 1-5", timezone=zone)


_VALUES: list[Any] = [
    1,
    "x",
    2.5,
    None,
    True,
    {"k": [1, 2]},
    {"__type__": "datetime", "__value__": "2026-01-02T03:04:05+00:00"},
    {"__type__": "decimal", "__value__": "1.50"},
    {"__type__": "uuid", "__value__": {"hex": "12345678123456781234567812345678"}},
]


def generate(
    rng: random.Random, count: int, *, now: datetime, dcb: bool, app_zone: str = "UTC"
) -> tuple[list[Schedule], dict[str, str]]:
    """``count`` schedules of goatbeat's, made in goatbeat; some deliberately unexportable:
    name -> the field their refusal must name."""
    out: list[Schedule] = []
    refused: dict[str, str] = {}
    base = now.replace(microsecond=0)
    for i in range(count):
        name = f"s{i:03d}"
        kind = rng.choice(
            ["cron", "cron", "interval", "interval", "solar"] + (["once"] if dcb else [])
        )
        zone = rng.choice(ZONES) if dcb else app_zone
        fields: dict[str, Any] = {}
        trigger: Trigger
        if kind == "cron":
            trigger = _cron(rng, zone)
        elif kind == "interval":
            every = timedelta(
                seconds=rng.choice([10, 30, 45, 300, 420, 3600, 3601, 5400, 86400, 172800])
            )
            anchor = base - timedelta(seconds=rng.randint(0, 10**7))
            trigger = IntervalTrigger(every, anchor=anchor)
            if dcb and rng.random() < 0.3:
                fields["start_at"] = anchor + every * rng.randint(0, 3)
        elif kind == "solar":
            trigger = SolarTrigger(
                event=rng.choice(EVENTS),
                latitude=round(rng.uniform(-55, 55), 4),
                longitude=round(rng.uniform(-179, 179), 4),
            )
        else:
            trigger = OnceTrigger(base + timedelta(seconds=rng.randint(60, 6 * 86400)))
        if rng.random() < 0.6:
            fields["args"] = tuple(rng.sample(_VALUES, rng.randint(1, 3)))
        if rng.random() < 0.5:
            fields["kwargs"] = {f"k{j}": v for j, v in enumerate(rng.sample(_VALUES, 2))}
        routing: dict[str, Any] = {}
        if rng.random() < 0.5:
            routing["queue"] = rng.choice(["default", "reports", "low"])
        if rng.random() < 0.2:
            routing["exchange"], routing["routing_key"] = "ex", "rk.1"
        if rng.random() < 0.3:
            routing["priority"] = rng.randint(0, 9)
        if rng.random() < 0.3:
            routing["expires"] = float(rng.choice([30, 600])) if dcb else rng.choice([12.5, 600.0])
        if rng.random() < 0.2:
            routing["headers"] = {"x-origin": "goatbeat"}
        fields["routing"] = Routing(**routing)
        if rng.random() < 0.2 and kind != "once" and "expires" not in routing:
            fields["end_at"] = base + timedelta(days=30 + rng.randint(0, 30))
        if dcb:
            # A one-off crontab is owed an instant that passes before the export (a
            # refusal, tested on its own): none within a few minutes of now.
            if kind == "once" or (
                kind == "cron"
                and rng.random() < 0.15
                and trigger.next_after(now - timedelta(minutes=1)) > now + timedelta(minutes=5)  # type: ignore[operator]
            ):
                fields["one_off"] = True
            if kind == "cron" and rng.random() < 0.2 and not fields.get("one_off"):
                fields["start_at"] = base - timedelta(days=rng.randint(1, 30))
            fields["enabled"] = rng.random() < 0.8
            if rng.random() < 0.3:
                fields["description"] = rng.choice(["nightly", "for the shop", "é ü"])
        sched = Schedule(
            name=name, task=f"shop.task{i % 7}", trigger=trigger, source=Source.ADMIN, **fields
        )
        spoil = rng.random() < 0.15
        if spoil:
            sched, field = _spoil(rng, sched, dcb=dcb, app_zone=app_zone)
            refused[name] = field
        out.append(sched)
    return out, refused


def _spoil(
    rng: random.Random, sched: Schedule, *, dcb: bool, app_zone: str
) -> tuple[Schedule, str]:
    """``sched`` with one thing the target cannot hold, and the field the refusal names."""
    choices = ["jitter", "overlap", "misfire", "misfire_grace", "catch_up_limit", "trigger"]
    if dcb:
        choices += ["priority", "expires", "latitude"]
    else:
        choices += ["timezone", "start_at", "one_off"]
    field = rng.choice(choices)
    if field == "jitter":
        return sched.evolve(jitter=timedelta(seconds=5)), field
    if field == "overlap":
        return sched.evolve(overlap=OverlapPolicy.SKIP, max_runtime=timedelta(hours=1)), field
    if field == "misfire":
        return sched.evolve(misfire=MisfirePolicy.SKIP), field
    if field == "misfire_grace":
        return sched.evolve(misfire_grace=timedelta(seconds=7)), field
    if field == "catch_up_limit":
        return sched.evolve(catch_up_limit=3), field
    if field == "trigger":
        zone = sched.timezone if dcb else app_zone
        return sched.evolve(trigger=CronTrigger("0 9 L * *", timezone=zone), one_off=False), field
    if field == "priority":
        return sched.evolve(routing=Routing(priority=-5)), field
    if field == "expires":
        return sched.evolve(routing=Routing(expires=2.5)), field
    if field == "latitude":
        trigger = SolarTrigger(event="sunset", latitude=48.1234567, longitude=2.0)
        return sched.evolve(trigger=trigger, start_at=None), field
    if field == "timezone":
        other = "Asia/Tokyo" if app_zone != "Asia/Tokyo" else "Europe/Paris"
        return sched.evolve(trigger=CronTrigger("0 9 * * *", timezone=other)), field
    if field == "start_at":
        return sched.evolve(start_at=sched.created_at or datetime(2026, 1, 1, tzinfo=UTC)), field
    return sched.evolve(one_off=True), field


def refused_lines(out: str) -> dict[str, str]:
    """name -> field of each FAILED / skipped line."""
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        for prefix in ("FAILED  ", "skipped  "):
            if line.startswith(prefix):
                name, field_name, _ = line[len(prefix) :].split(": ", 2)
                found.setdefault(name, []).append(field_name)
    return {n: ",".join(fs) for n, fs in found.items()}


def assert_same_fields(ours: Schedule, back: Schedule, *, dcb: bool) -> None:
    """import(export(x)) == x on the fields both sides have."""
    assert back.task == ours.task
    assert kombu_json.decode(list(back.args)) == kombu_json.decode(list(ours.args))
    assert kombu_json.decode(dict(back.kwargs)) == kombu_json.decode(dict(ours.kwargs))
    theirs, mine = back.routing.to_dict(), ours.routing.to_dict()
    if dcb:  # django-celery-beat sends the row's name as a header with every run
        assert theirs["headers"].pop("periodic_task_name") == ours.name
        assert mine["headers"].pop("periodic_task_name", ours.name) == ours.name
    assert theirs == mine
    assert back.end_at == ours.end_at
    assert type(back.trigger) in (type(ours.trigger), CronTrigger, CeleryCrontabTrigger)
    if isinstance(ours.trigger, (CronTrigger, CeleryCrontabTrigger)):
        assert back.trigger.timezone == ours.trigger.timezone  # type: ignore[attr-defined]
    if isinstance(ours.trigger, IntervalTrigger):
        assert back.trigger.every == ours.trigger.every  # type: ignore[attr-defined]
    if isinstance(ours.trigger, SolarTrigger):
        assert back.trigger == ours.trigger
    if isinstance(ours.trigger, OnceTrigger):
        assert back.trigger == ours.trigger
    if dcb:
        assert back.start_at == ours.start_at
        assert back.one_off == (ours.one_off or isinstance(ours.trigger, OnceTrigger))
        assert back.enabled == ours.enabled
        assert back.description == ours.description


def assert_same_instants(entries: list[SourceEntry], ours: list[Schedule], now: datetime) -> None:
    """celery's own schedule objects, rebuilt from the export, against goatbeat's schedules,
    stepped as celery beat steps them (goatbeat.diff), over a week."""
    report = compute_diff(entries, ours, start=now, horizon=WEEK, accept_known=True, now=now)
    for s in report.schedules:
        if "headers" in s.fields:
            # django-celery-beat sends the row's name as a header with every run, a
            # schedule made in goatbeat does not: the one header allowed to differ.
            theirs, mine = s.fields["headers"]
            if {k: v for k, v in theirs.items() if k != "periodic_task_name"} == mine:
                del s.fields["headers"]
    bad = [s for s in report.schedules if s.differs(accept_known=True)]
    assert not bad, [(s.name, s.status, s.fields, s.fire_times[:2], s.notes) for s in bad]
    assert len(report.schedules) == len(ours)


# -- beat_schedule ---------------------------------------------------------------------------


def exec_code(path: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
    beat_schedule: dict[str, Any] = namespace["beat_schedule"]
    return beat_schedule


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_schedules_come_back_from_beat_schedule_code(
    db: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    zone = ZONES[seed % len(ZONES)]
    now = datetime.now(UTC)
    made, spoiled = generate(rng, 80, now=now, dcb=False, app_zone=zone)
    ours = store_schedules(db, made)
    code_file, runs_file = tmp_path / "beat.py", tmp_path / "runs.json"
    args = ["export", "--to", "beat-schedule", "--database", db, "--timezone", zone]
    args += ["--output", str(code_file), "--last-runs", str(runs_file)]

    code, out = run(*args)
    assert code == 1, out
    assert refused_lines(out) == {n: f for n, f in refused_lines(out).items()}  # parsed
    assert {n: set(f.split(",")) >= {spoiled[n]} for n, f in refused_lines(out).items()} == {
        n: True for n in spoiled
    }, out
    assert not code_file.exists()  # nothing written while one is refused

    code, out = run(*args, "--skip-unexportable")
    assert code == 0, out
    assert set(refused_lines(out)) == set(spoiled), out
    assert "Traceback" not in out
    exported = exec_code(code_file)
    kept = {n: s for n, s in ours.items() if n not in spoiled}
    enabled = {n: s for n, s in kept.items() if s.enabled}
    assert set(exported) == set(enabled)
    entries = read_beat_schedule(exported, timezone=zone, last_runs=read_last_runs(str(runs_file)))
    for entry in entries:
        assert entry.schedule is not None, (entry.name, entry.problem)
        assert_same_fields(ours[entry.name], entry.schedule, dcb=False)
    assert_same_instants(entries, list(enabled.values()), datetime.now(UTC).replace(microsecond=0))


def test_a_disabled_schedule_is_written_as_a_comment_not_as_an_entry_that_runs(
    db: str, tmp_path: Path
) -> None:
    store_schedules(
        db,
        [
            Schedule(name="on", task="t", trigger=CronTrigger("0 9 * * *"), source=Source.ADMIN),
            Schedule(
                name="off",
                task="t",
                trigger=CronTrigger("0 10 * * *"),
                source=Source.ADMIN,
                enabled=False,
            ),
        ],
    )
    path = tmp_path / "beat.py"
    code, out = run("export", "--to", "beat-schedule", "--database", db, "--output", str(path))
    assert code == 0, out
    assert "note     off: disabled in goatbeat: written as a comment" in out
    assert set(exec_code(path)) == {"on"}
    assert "    # 'off': {" in path.read_text()


def test_beat_schedule_refusals_name_the_schedule_and_the_field(db: str, tmp_path: Path) -> None:
    every = IntervalTrigger(timedelta(minutes=5))
    cron = CronTrigger("0 9 * * *", timezone="Europe/Paris")

    def admin(name: str, trigger: Trigger = every, **fields: Any) -> Schedule:
        return Schedule(name=name, task="t", trigger=trigger, source=Source.ADMIN, **fields)

    store_schedules(
        db,
        [
            admin("fine", cron),
            admin("jitter", jitter=timedelta(seconds=10)),
            admin("overlap", overlap=OverlapPolicy.SKIP, max_runtime=timedelta(hours=1)),
            admin("pause", pause_on_failure=3),
            admin("misfire", misfire=MisfirePolicy.RUN_ALL),
            admin("grace", misfire_grace=timedelta(minutes=10)),
            admin("limit", catch_up_limit=5),
            admin("tokyo", CronTrigger("0 9 * * *", timezone="Asia/Tokyo")),
            admin("start", start_at=datetime(2027, 1, 1, tzinfo=UTC)),
            admin("once-only", one_off=True),
            admin("at", OnceTrigger(datetime(2027, 1, 1, tzinfo=UTC))),
            admin("last-day", CronTrigger("0 9 L * *", timezone="Europe/Paris")),
            admin("seconds", CronTrigger("30 0 9 * * *", timezone="Europe/Paris")),
            admin("either-day", CronTrigger("0 9 1 * 1", timezone="Europe/Paris")),
            admin("full-hours", CronTrigger("0 0-23 * * *", timezone="Europe/Paris")),
            admin("fast", IntervalTrigger(timedelta(milliseconds=500), allow_subsecond=True)),
            admin(
                "end-and-expiry",
                end_at=datetime(2027, 1, 1, tzinfo=UTC),
                routing=Routing(expires=60.0),
            ),
        ],
    )
    path = tmp_path / "beat.py"
    args = ["export", "--to", "beat-schedule", "--database", db, "--timezone", "Europe/Paris"]
    code, out = run(*args, "--output", str(path))
    assert code == 1, out
    assert "Traceback" not in out
    assert refused_lines(out) == {
        "jitter": "jitter",
        "overlap": "overlap,max_runtime",
        "pause": "pause_on_failure",
        "misfire": "misfire",
        "grace": "misfire_grace",
        "limit": "catch_up_limit",
        "tokyo": "timezone",
        "start": "start_at",
        "once-only": "one_off",
        "at": "trigger",
        "last-day": "trigger",
        "seconds": "trigger",
        "either-day": "trigger",
        "full-hours": "trigger",
        "fast": "trigger",
        "end-and-expiry": "end_at",
    }
    assert "FAILED  tokyo: timezone: 'Asia/Tokyo': a beat_schedule crontab runs in the app's" in out
    assert "summary: 16 cannot be exported, nothing written" in out
    assert not path.exists()
    code, out = run(*args, "--output", str(path), "--skip-unexportable")
    assert code == 0, out
    assert "skipped  jitter: jitter: 10s is goatbeat's" in out
    assert set(exec_code(path)) == {"fine"}


def test_a_beat_schedule_edited_in_goatbeat_after_import_comes_back_as_edited(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gb_export_app.py").write_text(
        "from datetime import timedelta\n"
        "from celery import Celery\n"
        "from celery.schedules import crontab\n"
        "app = Celery('x', set_as_current=False)\n"
        "app.conf.timezone = 'Europe/Paris'\n"
        "app.conf.beat_schedule = {\n"
        "    'morning': {'task': 'report', 'schedule': crontab(minute=0, hour=9), 'args': [1]},\n"
        "    'every-10m': {'task': 'ping', 'schedule': timedelta(minutes=10),\n"
        "                  'options': {'queue': 'q'}},\n"
        "    'weekdays': {'task': 'ping', 'schedule': crontab(minute='*/30', hour='8-18',\n"
        "                 day_of_week='mon-fri')},\n"
        "}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = "gb_export_app:app"
    code, out = run("import_celery_beat", "--from-app", app, "--database", db, "--no-check-tasks")
    assert code == 0, out
    store = open_store(db)
    try:
        morning = store.get("morning")
        assert isinstance(morning, Schedule)
        store.update(
            morning.evolve(trigger=CronTrigger("15 7 * * 1-5", timezone="Europe/Paris"), args=(2,))
        )
        store.set_enabled("weekdays", False)
    finally:
        store.close()
    path, runs = tmp_path / "beat.py", tmp_path / "runs.json"
    code, out = run(
        "export", "--to", "beat-schedule", "--database", db, "--from-app", app,
        "--output", str(path), "--last-runs", str(runs),
    )  # fmt: skip
    assert code == 0, out
    exported = exec_code(path)
    assert set(exported) == {"morning", "every-10m"}  # weekdays: disabled, a comment
    assert "note     celery.backend_cleanup: left out: celery beat adds it itself" in out
    morning_c = exported["morning"]["schedule"]
    assert (morning_c.minute, morning_c.hour, morning_c.day_of_week) == ({15}, {7}, {1, 2, 3, 4, 5})
    assert exported["morning"]["args"] == [2]
    assert exported["every-10m"]["options"] == {"queue": "q"}
    entries = read_beat_schedule(
        exported, timezone="Europe/Paris", last_runs=read_last_runs(str(runs))
    )
    ours = stored(db)
    for entry in entries:
        assert entry.schedule is not None
        assert_same_fields(ours[entry.name], entry.schedule, dcb=False)
    now = datetime.now(UTC).replace(microsecond=0)
    assert_same_instants(entries, [ours["morning"], ours["every-10m"]], now)
    # The original code no longer fires as goatbeat does: the edit is what the export carries.
    from gb_export_app import app as original  # type: ignore[import-not-found]

    before = read_beat_schedule(original.conf.beat_schedule, timezone="Europe/Paris")
    report = compute_diff(
        [e for e in before if e.name == "morning"], [ours["morning"]], start=now, horizon=WEEK
    )
    assert not report.equal


# -- django-celery-beat ----------------------------------------------------------------------


def dcb_rows(url: str) -> dict[str, dict[str, Any]]:
    from goatbeat.importers.django_celery_beat import connect
    from goatbeat.importers.export import read_rows

    with connect(url) as conn:
        return read_rows(conn)


@pytest.mark.parametrize("seed", [11, 12])
def test_generated_schedules_come_back_from_django_celery_beat_rows(
    db: str, dcb_url: str, dcb_tables: Callable[..., None], seed: int
) -> None:
    dcb_tables(
        dcb_url, [{"name": "theirs", "task": "x", "interval": {"every": 1, "period": "hours"}}]
    )
    before = dcb_rows(dcb_url)["theirs"]
    rng = random.Random(seed)
    now = datetime.now(UTC)
    made, spoiled = generate(rng, 80, now=now, dcb=True)
    ours = store_schedules(db, made)
    args = ["export", "--to", "django-celery-beat", "--database", db, "--target", dcb_url]

    code, out = run(*args, "--apply")
    assert code == 1, out
    assert {n: set(f.split(",")) >= {spoiled[n]} for n, f in refused_lines(out).items()} == {
        n: True for n in spoiled
    }, out
    assert set(dcb_rows(dcb_url)) == {"theirs"}  # nothing written while one is refused

    code, out = run(*args, "--skip-unexportable")
    assert code == 0, out
    assert "(dry run: nothing written; --apply to write)" in out
    assert set(dcb_rows(dcb_url)) == {"theirs"}
    kept = {n: s for n, s in ours.items() if n not in spoiled}
    for name in kept:
        assert f"would create  {name}" in out

    code, out = run(*args, "--skip-unexportable", "--apply")
    assert code == 0, out
    assert "left alone  theirs: goatbeat exports no schedule of that name" in out
    rows = dcb_rows(dcb_url)
    assert rows["theirs"] == before  # only goatbeat's rows are touched
    assert set(rows) == {"theirs", *kept}
    entries = [e for e in read_django_celery_beat(dcb_url) if e.name != "theirs"]
    for entry in entries:
        assert entry.schedule is not None, (entry.name, entry.problem)
        assert_same_fields(kept[entry.name], entry.schedule, dcb=True)
    assert_same_instants(entries, list(kept.values()), datetime.now(UTC).replace(microsecond=0))

    # django-celery-beat's own DatabaseScheduler loads every row written as goatbeat has it.
    loaded = load_as_django_celery_beat(dcb_url)
    for name, sched in kept.items():
        row = loaded[name]
        assert row["schedule"] == _CELERY_CLASS[type(sched.trigger)], name
        assert row["args"] == kombu_json.decode(list(sched.args)), name
        assert row["kwargs"] == kombu_json.decode(dict(sched.kwargs)), name
        options = row["options"]
        assert options.pop("headers") == {
            **kombu_json.decode(dict(sched.routing.headers)),
            "periodic_task_name": name,
        }
        wanted = {
            k: v
            for k, v in sched.routing.to_dict().items()
            if k not in ("headers", "expires") and v is not None
        }
        if sched.end_at is not None:  # django-celery-beat expires each message at the end
            wanted["expires"] = sched.end_at
        elif sched.routing.expires is not None:
            wanted["expires"] = int(sched.routing.expires)
        assert options == wanted, name
        assert (row["enabled"], row["one_off"]) == (
            sched.enabled,
            sched.one_off or isinstance(sched.trigger, OnceTrigger),
        )
        if isinstance(sched.trigger, (CronTrigger, CeleryCrontabTrigger)):
            assert row["tz"] == sched.trigger.timezone

    code, out = run(*args, "--skip-unexportable", "--apply")  # idempotent
    assert code == 0 and f"0 create, 0 update, {len(kept)} unchanged" in out, out


_CELERY_CLASS = {
    CronTrigger: "TzAwareCrontab",
    CeleryCrontabTrigger: "TzAwareCrontab",
    IntervalTrigger: "schedule",
    SolarTrigger: "solar",
    OnceTrigger: "clocked",
}


def load_as_django_celery_beat(url: str) -> dict[str, Any]:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.importers.dcb_load", url],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: dict[str, Any] = kombu_json.loads(proc.stdout, field="rows")
    return loaded


def test_django_celery_beat_rows_edited_in_goatbeat_after_import_come_back_as_edited(
    db: str, dcb_url: str, dcb_tables: Callable[..., None]
) -> None:
    dcb_tables(
        dcb_url,
        [
            {
                "name": "cron-paris",
                "task": "report",
                "crontab": {
                    "minute": "0",
                    "hour": "8",
                    "day_of_week": "1-5",
                    "timezone": "Europe/Paris",
                },
                "args": "[1, 2]",
                "queue": "reports",
                "priority": 3,
            },
            {
                "name": "every-10s",
                "task": "ping",
                "interval": {"every": 10, "period": "seconds"},
                "last_run_at": "2026-06-10T12:00:00+00:00",
                "total_run_count": 5,
                "expire_seconds": 30,
                "headers": '{"x-h": "v"}',
            },
            {
                "name": "sunrise",
                "task": "ping",
                "solar": {"event": "sunrise", "latitude": "48.856600", "longitude": "2.352200"},
                "description": "morning",
            },
            {"name": "untouched", "task": "ping", "interval": {"every": 1, "period": "hours"}},
        ],
    )
    code, out = run("import_celery_beat", "--from-django-celery-beat", dcb_url, "--database", db)
    assert code == 0, out
    with closing(_connect(dcb_url)) as conn:
        marker = _scalar(conn, "SELECT last_update FROM django_celery_beat_periodictasks")
    store = open_store(db)
    try:
        cron = store.get("cron-paris")
        assert isinstance(cron, Schedule)
        store.update(
            cron.evolve(trigger=CronTrigger("15 7 * * 1-6", timezone="Europe/Paris"), args=(3,))
        )
        store.set_enabled("every-10s", False)
        sunrise = store.get("sunrise")
        assert isinstance(sunrise, Schedule)
        store.update(sunrise.evolve(kwargs={"loud": True}))
        store.delete("untouched")
        store.create(
            Schedule(
                name="made-here",
                task="ping",
                trigger=IntervalTrigger(
                    timedelta(minutes=7), anchor=datetime(2026, 1, 1, tzinfo=UTC)
                ),
                source=Source.ADMIN,
            )
        )
    finally:
        store.close()
    untouched = dcb_rows(dcb_url)["untouched"]
    args = ["export", "--to", "django-celery-beat", "--database", db, "--target", dcb_url]
    code, out = run(*args)
    assert code == 0, out
    assert "would create  made-here" in out
    assert (
        "would update  cron-paris: schedule: crontab 0 8 * * 1-5 (Europe/Paris) -> crontab "
        "15 7 * * 1-6 (Europe/Paris); args: '[1, 2]' -> '[3]'"
    ) in out
    assert "would update  every-10s: enabled: " in out and " -> False" in out
    assert "would update  sunrise: kwargs: '{}' -> '{\"loud\": true}'" in out
    assert "left alone  untouched" in out
    code, out = run(*args, "--apply")
    assert code == 0, out
    assert "django_celery_beat_periodictasks.last_update moved to now" in out
    with closing(_connect(dcb_url)) as conn:
        bumped = _scalar(conn, "SELECT last_update FROM django_celery_beat_periodictasks")
    assert bumped is not None and bumped != marker  # a running DatabaseScheduler reloads
    rows = dcb_rows(dcb_url)
    assert rows["untouched"] == untouched
    assert rows["cron-paris"]["schedule"]["minute"] == "15"
    assert rows["cron-paris"]["schedule"]["day_of_week"] == "1-6"
    assert (rows["cron-paris"]["queue"], rows["cron-paris"]["priority"]) == ("reports", 3)
    assert json.loads(rows["cron-paris"]["args"]) == [3]
    assert not rows["every-10s"]["enabled"]
    assert rows["every-10s"]["expire_seconds"] == 30
    assert json.loads(rows["every-10s"]["headers"]) == {"x-h": "v"}
    assert rows["every-10s"]["total_run_count"] == 5
    assert rows["every-10s"]["last_run_at"] >= datetime(2026, 6, 10, 12, tzinfo=UTC)
    assert rows["sunrise"]["description"] == "morning"
    assert rows["made-here"]["schedule"] == {"every": 7, "period": "minutes"}

    ours = stored(db)
    entries = [e for e in read_django_celery_beat(dcb_url) if e.name != "untouched"]
    for entry in entries:
        assert entry.schedule is not None, (entry.name, entry.problem)
        assert_same_fields(ours[entry.name], entry.schedule, dcb=True)
    assert_same_instants(entries, list(ours.values()), datetime.now(UTC).replace(microsecond=0))
    # Re-cutover: the import finds its rows saying what goatbeat has: no update, no conflict.
    code, out = run(
        "import_celery_beat", "--from-django-celery-beat", dcb_url, "--database", db, "--dry-run"
    )
    lines = out.splitlines()
    assert code == 0, out
    assert not [x for x in lines if x.startswith(("conflict", "would update", "FAILED"))], out
    assert "unchanged every-10s" in lines and "unchanged made-here" in lines, out
    assert "would refresh cron-paris" in out and "would refresh sunrise" in out  # phase only
    # The row deleted in goatbeat was left alone, and says so: it runs under celery.
    assert "would create  untouched" in lines


def test_django_celery_beat_refusals_name_the_schedule_and_the_field(
    db: str, tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    url = f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dcb_tables(url, [{"name": "taken", "task": "x", "interval": {"every": 1, "period": "hours"}}])
    every = IntervalTrigger(timedelta(minutes=5))

    def admin(name: str, trigger: Trigger = every, **fields: Any) -> Schedule:
        return Schedule(name=name, task="t", trigger=trigger, source=Source.ADMIN, **fields)

    store_schedules(
        db,
        [
            admin("fine", CronTrigger("0 9 * * *", timezone="Asia/Tokyo")),
            admin("prio", routing=Routing(priority=-1)),
            admin("expiry", routing=Routing(expires=1.5)),
            admin("precise", SolarTrigger(event="sunset", latitude=48.1234567, longitude=2.0)),
            admin("one-off-interval", one_off=True),
            admin("jitter", jitter=timedelta(seconds=3)),
            admin("either-day", CronTrigger("0 9 1 * 1")),
            admin(
                "off-grid",
                IntervalTrigger(timedelta(minutes=5)),
                start_at=datetime(2027, 1, 1, 0, 0, 7, tzinfo=UTC),
            ),
            admin("taken", CronTrigger("0 9 * * *")),
            admin(
                "end-and-expiry",
                end_at=datetime(2027, 1, 1, tzinfo=UTC),
                routing=Routing(expires=60.0),
            ),
            admin(
                "one-off-start",
                CronTrigger("0 9 * * *"),
                one_off=True,
                start_at=datetime.now(UTC) - timedelta(days=2),
            ),
        ],
    )
    args = ["export", "--to", "django-celery-beat", "--database", db, "--target", url]
    code, out = run(*args, "--apply")
    assert code == 1, out
    assert "Traceback" not in out
    assert refused_lines(out) == {
        "prio": "priority",
        "expiry": "expires",
        "precise": "latitude",
        "one-off-interval": "one_off",
        "jitter": "jitter",
        "either-day": "trigger",
        "off-grid": "trigger",
        "taken": "name",
        "one-off-start": "one_off",
        "end-and-expiry": "end_at",
    }
    assert (
        "FAILED  taken: name: a django-celery-beat row of that name exists and goatbeat did not"
        in out
    )
    assert set(dcb_rows(url)) == {"taken"}
    code, out = run(*args, "--apply", "--skip-unexportable")
    assert code == 0, out
    assert set(dcb_rows(url)) == {"taken", "fine"}
    assert dcb_rows(url)["fine"]["schedule"]["timezone"] == "Asia/Tokyo"


def test_export_usage_errors_are_one_line(db: str) -> None:
    code, out = run("export", "--to", "beat-schedule", "--database", db, "--apply")
    assert code == 2 and "--target and --apply are for --to django-celery-beat" in out
    code, out = run("export", "--to", "beat-schedule", "--database", db, "--timezone", "Mars/Base")
    assert code == 2 and "Traceback" not in out and "Mars/Base" in out, out
    code, out = run("export", "--to", "django-celery-beat", "--database", db)
    assert code == 2 and "needs --target URL outside Django" in out
    code, out = run(
        "export", "--to", "django-celery-beat", "--database", db, "--target", "mysql://x/y"
    )
    assert code == 2 and "Traceback" not in out and "mysql" in out, out


def _connect(url: str) -> Any:
    if url.startswith("sqlite:///"):
        return sqlite3.connect(url[len("sqlite:///") :])
    import psycopg

    return psycopg.connect(url)


def _scalar(conn: Any, sql: str) -> Any:
    cursor = conn.cursor()
    cursor.execute(sql)
    row = cursor.fetchone()
    return None if row is None else row[0]


def test_an_instant_goatbeat_still_owes_is_run_at_once_by_celery_after_the_export() -> None:
    # goatbeat stopped before 09:00 ran (the rollback): its next_run_at is past, the occurrence
    # owed. celery, from what the export hands it, runs it at once too, and then the same
    # instants; an interval keeps goatbeat's grid.
    from goatbeat.importers.django_celery_beat import read_row
    from goatbeat.importers.export import plan_beat_schedule, plan_django_celery_beat
    from goatbeat.importers.export_dcb import _importer_row

    now = datetime(2026, 12, 2, 9, 0, 40, tzinfo=UTC)
    owed = [
        Schedule(
            name="nine",
            task="t",
            trigger=CronTrigger("0 9 * * *", timezone="Europe/Paris"),
            source=Source.ADMIN,
            next_run_at=datetime(2026, 12, 2, 8, 0, tzinfo=UTC),
        ),
        Schedule(
            name="every-7m",
            task="t",
            trigger=IntervalTrigger(timedelta(minutes=7), anchor=datetime(2026, 1, 1, tzinfo=UTC)),
            source=Source.ADMIN,
            next_run_at=datetime(2026, 12, 2, 8, 57, tzinfo=UTC),  # on the grid, owed
        ),
    ]
    dcb = plan_django_celery_beat(owed, {}, now=now)
    assert not dcb.refused
    # A one-off cannot be handed over owed: a last run is what finishes one.
    one_off = owed[0].evolve(name="nine-once", one_off=True)
    refused = plan_django_celery_beat([one_off], {}, now=now).refused
    assert [(r.name, r.field) for r in refused] == [("nine-once", "one_off")]
    assert "whose instant 2026-12-02T08:00:00+00:00 is owed" in refused[0].reason
    rows = {r.name: r for r in dcb.create}
    assert rows["nine"].values["last_run_at"] == datetime(2026, 12, 2, 7, 59, 59, tzinfo=UTC)
    assert rows["every-7m"].values["last_run_at"] == datetime(2026, 12, 2, 8, 50, tzinfo=UTC)
    entries = [read_row(_importer_row(rows[s.name], now)) for s in owed]
    assert_same_instants(entries, owed, now)
    beat = plan_beat_schedule(owed[:1], timezone="Europe/Paris", now=now)
    assert beat.last_runs == {"nine": datetime(2026, 12, 2, 7, 59, 59, tzinfo=UTC)}
    from goatbeat.diff import celery_fire_times

    fires = celery_fire_times(entries[0], now, now + timedelta(days=2))
    assert fires[0] == now  # at once: the 09:00 Paris goatbeat owed
    assert fires[1:] == [
        datetime(2026, 12, 3, 8, 0, tzinfo=UTC),
        datetime(2026, 12, 4, 8, 0, tzinfo=UTC),
    ]
    every = celery_fire_times(entries[1], now, now + timedelta(minutes=15))
    assert every == [
        now,
        datetime(2026, 12, 2, 9, 4, tzinfo=UTC),
        datetime(2026, 12, 2, 9, 11, tzinfo=UTC),
    ]


@pytest.mark.postgres
def test_manage_py_goatbeat_export_writes_django_celery_beat_rows_through_djangos_connection(
    pg_dsn: str,
) -> None:
    import psycopg

    from tests.importers.test_cutover_command import Example

    example = Example(pg_dsn, EXAMPLE_BEAT_SCHEDULE="none")
    for step in (("migrate", "--verbosity", "0"), ("seed_beat_rows",)):
        done = example.run("manage.py", *step)
        assert done.returncode == 0, done.stderr
    done = example.run("manage.py", "goatbeat", "import_celery_beat")
    assert done.returncode == 0, done.stdout + done.stderr
    done = example.run("manage.py", "goatbeat", "schedule", "disable", "admin-poll-3s")
    assert done.returncode == 0, done.stderr
    with psycopg.connect(pg_dsn) as conn:
        (marker,) = conn.execute("SELECT last_update FROM django_celery_beat_periodictasks")
    dry = example.run("manage.py", "goatbeat", "export", "--to", "django-celery-beat")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "to: django-celery-beat's tables (Django's default database) (dry run)" in dry.stdout
    assert "would update  admin-poll-3s: enabled: True -> False" in dry.stdout, dry.stdout
    # Never ran: handed a last run a second before goatbeat's next instant (06:00 Paris on
    # the 1st), so celery starts with that instant.
    assert re.search(
        r"^would update  admin-monthly-invoices: last_run_at: None -> \S+T0[34]:59:59Z$",
        dry.stdout,
        re.M,
    ), dry.stdout
    done = example.run("manage.py", "goatbeat", "export", "--to", "django-celery-beat", "--apply")
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(pg_dsn) as conn:
        rows = dict(conn.execute("SELECT name, enabled FROM django_celery_beat_periodictask"))
        (bumped,) = conn.execute("SELECT last_update FROM django_celery_beat_periodictasks")
    assert rows == {"admin-poll-3s": False, "admin-monthly-invoices": True}
    assert bumped != marker
    again = example.run("manage.py", "goatbeat", "export", "--to", "django-celery-beat")
    assert "0 would create, 0 would update, 2 unchanged" in again.stdout, again.stdout


def test_a_dst_change_where_celerys_crontab_fires_otherwise_is_said_by_name(
    db: str, tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    # celery runs 02:30 late on the spring-forward day and the repeated hour of a wildcard
    # crontab once; no crontab says goatbeat's rule. Exported (the import accepts the same
    # difference), with a note naming the day.
    store_schedules(
        db,
        [
            Schedule(
                name=name,
                task="t",
                trigger=CronTrigger(expression, timezone="Europe/Paris"),
                source=Source.ADMIN,
            )
            for name, expression in (
                ("half-past-two", "30 2 * * *"),
                ("every-15", "*/15 * * * *"),
                ("nine", "0 9 * * *"),
            )
        ],
    )
    args = ["export", "--database", db]
    code, out = run(*args, "--to", "beat-schedule", "--timezone", "Europe/Paris")
    assert code == 0, out
    notes = [line for line in out.splitlines() if line.startswith("note     ")]
    assert [n.split(":")[0] for n in notes] == ["note     every-15", "note     half-past-two"]
    assert re.search(r"half-past-two: at the DST change of \d{4}-03-\d\d in Europe/Paris", out)
    assert "celery runs a local time that does not exist late" in out
    assert re.search(r"every-15: at the DST change of \d{4}-10-\d\d in Europe/Paris", out)
    url = f"sqlite:///{tmp_path / 'dcb.sqlite3'}"
    dcb_tables(url, [])
    code, out = run(*args, "--to", "django-celery-beat", "--target", url)
    assert code == 0, out
    assert re.search(r"note  half-past-two: at the DST change of \d{4}-03-\d\d", out), out
    assert "note  nine" not in out
