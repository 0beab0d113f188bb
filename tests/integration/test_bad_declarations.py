"""Malformed schedules declared in code, end to end on a real database: each is refused with a
message naming the field, its valid neighbours are unaffected, and a publish that contains one
bad schedule writes nothing at all (no half-deployed batch).

Field-by-field validation of ``Beat.schedule`` is unit-tested (tests/unit/test_beat.py) and the
stores' own refusal in the conformance suite; this file covers what only shows with a database
and a process: values that pass declaration but not the store (column widths, a name owned by
another source), a publish that must be all-or-nothing, and the CLI refusing to start on them.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goatbeat.beat import Beat
from goatbeat.cli import cli
from goatbeat.core.errors import InvalidCron, InvalidSchedule, InvalidValue
from goatbeat.core.model import Schedule, Source
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import CronTrigger

ROOT = Path(__file__).resolve().parents[2]


def noop(*args: Any, **kwargs: Any) -> None:
    return None


@pytest.fixture
def beat(database: str) -> Iterator[Beat]:
    b = Beat(database)
    b.migrate()
    try:
        yield b
    finally:
        b.close()


def snapshot(store: ScheduleStore) -> list[tuple[Any, ...]]:
    return [
        (s.name, s.source, s.task, s.trigger.to_spec(), s.routing, s.next_run_at, s.version)
        for s in store.list_schedules()
    ]


def test_a_bad_declaration_names_its_field_and_leaves_its_neighbours_declared(beat: Beat) -> None:
    beat.schedule(name="before", task=noop, every="1m")
    with pytest.raises(InvalidCron) as bad_cron:
        beat.schedule(name="bad-cron", task=noop, cron="61 * * * *")
    with pytest.raises(InvalidSchedule) as bad_args:
        beat.schedule(name="bad-args", task=noop, every="1m", args=[float("nan")])
    with pytest.raises(InvalidValue) as bad_grace:
        beat.schedule(name="bad-grace", task=noop, every="1m", misfire_grace="-5s")
    beat.schedule(name="after", task=noop, cron="*/5 * * * *")

    assert bad_cron.value.field == "cron" and "61" in str(bad_cron.value)
    assert bad_args.value.field == "args"
    assert bad_grace.value.field == "misfire_grace"
    assert [s.name for s in beat.schedules] == ["before", "after"]
    result = beat.publish()
    assert sorted(result.created) == ["after", "before"]
    assert [s.name for s in beat.store.list_schedules()] == ["after", "before"]


class AnyTaskSubmitter:
    """Accepts any task name, as a Celery submitter would for tasks of another codebase."""

    name = "any"
    supports_queue = supports_priority = supports_exchange = True
    supports_expires = supports_headers = True

    def validate(self, schedule: Schedule) -> None:
        return None

    def submit(self, occurrence: Any) -> str | None:
        return None

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("bad_options", "field"),
    [
        # Both pass declaration; the store refuses them (column widths) before writing.
        ({"queue": "q" * 300}, "queue"),
        ({"task": "tasks." + "x" * 300}, "task"),
    ],
)
def test_a_publish_with_one_bad_schedule_writes_nothing(
    beat: Beat, bad_options: dict[str, Any], field: str
) -> None:
    beat.schedule(name="kept", task=noop, every="1m")
    beat.publish()
    before = snapshot(beat.store)

    again = Beat(beat.database, submitter=AnyTaskSubmitter())  # type: ignore[arg-type]
    try:
        again.schedule(name="kept", task=noop, every="2m")  # a changed definition
        again.schedule(name="new", task=noop, every="1m")  # a new one
        again.schedule(name="bad", **{"task": noop, "every": "1m", **bad_options})
        with pytest.raises(InvalidValue) as info:
            again.publish()
    finally:
        again.close()

    assert info.value.field == field
    assert snapshot(beat.store) == before  # neither the change nor the new schedule landed


def test_a_code_schedule_named_like_an_admin_one_is_refused_and_nothing_is_written(
    beat: Beat,
) -> None:
    beat.store.create(
        Schedule(name="report", task="t.r", trigger=CronTrigger("0 9 * * *"), source=Source.ADMIN)
    )
    beat.schedule(name="fresh", task=noop, every="1m")
    beat.schedule(name="report", task=noop, every="1m")
    before = snapshot(beat.store)

    with pytest.raises(InvalidSchedule) as info:
        beat.publish()

    assert info.value.field == "name" and "report" in str(info.value)
    assert snapshot(beat.store) == before
    assert beat.store.get("report").source is Source.ADMIN


def test_the_scheduler_command_refuses_to_start_on_a_schedule_the_store_rejects(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = Beat(database)
    seeded.migrate()
    seeded.schedule(name="kept", task=noop, every="1m")
    seeded.publish()
    before = snapshot(seeded.store)
    seeded.close()

    module = f"gb_bad_decl_{os.getpid()}_{abs(hash(database)) % 10**8}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from goatbeat.beat import Beat

            def noop():
                pass

            beat = Beat({database!r})
            beat.schedule(name="kept", task=noop, every="2m")
            beat.schedule(name="wide", task=noop, every="1m", routing_key="k" * 300)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("GOATBEAT_APP", raising=False)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    result = CliRunner().invoke(cli, ["--app", f"{module}:beat", "scheduler", "--once"])
    sys.modules.pop(module, None)

    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("goatbeat: error: routing_key:"), lines
    after = Beat(database)
    try:
        assert snapshot(after.store) == before
        assert after.store.executions() == []
    finally:
        after.close()
