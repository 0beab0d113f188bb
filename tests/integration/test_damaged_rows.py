"""One damaged row never stops the others, end to end on SQLite and PostgreSQL.

Rows are damaged by SQL in every way the database can hold (``DAMAGE``) beside a good schedule
that fires every second. The scheduler — in process, then the real ``goatbeat scheduler``
command — keeps firing the good one every second, quarantines each damaged row and logs
``schedule.invalid`` once for it, naming the column; ``schedule list`` / ``show`` (and
``--json``) list the damaged rows instead of failing.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from goatbeat.beat import Beat
from goatbeat.cli import cli
from goatbeat.core.model import SCHEDULE_INVALID, DamagedSchedule, Occurrence, Schedule, Source
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.stores import open_store
from tests.conformance.helpers import DAMAGE, write_raw
from tests.doubles import AcceptingSubmitter

ROOT = Path(__file__).resolve().parents[2]
SECOND = timedelta(seconds=1)


@dataclass
class Target:
    kind: str
    url: str


class Recording(AcceptingSubmitter):
    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.submitted: list[Occurrence] = []

    def submit(self, occurrence: Occurrence) -> str | None:
        self.submitted.append(occurrence)
        return None


def noop() -> None:
    return None


def damage(target: Target, store: ScheduleStore) -> dict[str, str]:
    """Admin schedules firing every second, each damaged one way; returns name -> column."""
    cases = {name: d for name, d in DAMAGE.items() if target.kind in d[2]}
    for name in cases:
        store.create(
            Schedule(
                name=name, task="tasks.damaged", trigger=IntervalTrigger("1s"), source=Source.ADMIN
            )
        )
    for name, (column, value, _) in cases.items():
        write_raw(target, store, name, **{column: value})
    return {name: column for name, (column, _, _) in cases.items()}


@pytest.fixture
def target(database: str) -> Iterator[Target]:
    store = open_store(database)
    store.migrate()
    store.close()
    yield Target("sqlite" if database.startswith("sqlite") else "postgres", database)


def assert_every_second(scheduled: list[Any]) -> None:
    """At least three runs, one per second with none missing: the good one stayed on time."""
    assert len(scheduled) >= 3
    assert all(b - a == SECOND for a, b in zip(scheduled, scheduled[1:], strict=False))


def test_the_scheduler_quarantines_damaged_rows_and_fires_the_good_one_every_second(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    submitter = Recording()
    beat = Beat(target.url, submitter=submitter)
    beat.schedule(name="good", task=noop, every="1s")
    beat.publish()
    damaged = damage(target, beat.store)
    loop = beat.scheduler(max_sleep="0.2s")
    caplog.set_level(logging.INFO, logger="goatbeat")
    deadline = time.monotonic() + 30  # a guard, not an expectation
    try:
        while len(submitter.submitted) < 4 and time.monotonic() < deadline:
            result = loop.run_once()
            assert result.error is None
            time.sleep(min(result.sleep, 0.2))
    finally:
        loop.release()
    assert {o.schedule_name for o in submitter.submitted} == {"good"}
    assert_every_second([o.scheduled_at for o in submitter.submitted])
    invalid = [r for r in caplog.records if r.getMessage() == "schedule.invalid"]
    assert sorted((r.goatbeat["schedule"], r.goatbeat["column"]) for r in invalid) == sorted(
        damaged.items()
    )
    assert all(r.levelno == logging.ERROR for r in invalid)
    assert not [r for r in caplog.records if r.getMessage() == "scheduler.error"]
    for row in beat.store.list_schedules():
        if row.name != "good":
            assert isinstance(row, DamagedSchedule) and row.last_status == SCHEDULE_INVALID
    beat.close()


APP = """
    import os
    from goatbeat.beat import Beat

    beat = Beat(os.environ["GB_TEST_DB"])

    def tick():
        pass

    beat.schedule(name="good", task=tick, every="1s")
"""


def test_the_goatbeat_command_survives_damaged_rows_and_lists_them(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"damaged_app_{target.kind}_{os.getpid()}"  # fresh: imported in-process below
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(APP))
    spec = f"{module}:beat"
    store = open_store(target.url)
    damaged = damage(target, store)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "GB_TEST_DB": target.url}
    env.pop("GOATBEAT_APP", None)
    command = [sys.executable, "-m", "goatbeat", "--app", spec]
    proc = subprocess.Popen(
        [*command, "--log-format", "json", "scheduler", "--max-sleep", "1s"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # a guard, not an expectation
        while time.monotonic() < deadline and proc.poll() is None:
            if len(store.executions(name="good")) >= 4:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    invalid = [e for e in events if e["event"] == "schedule.invalid"]
    assert sorted((e["schedule"], e["column"]) for e in invalid) == sorted(damaged.items())
    assert [e for e in events if e["event"] == "scheduler.error"] == []
    runs = sorted(e.scheduled_at for e in store.executions(name="good"))
    assert_every_second(runs)
    assert all(store.executions(name=name) == [] for name in damaged)
    store.close()

    # The listings name every damaged row and its column instead of failing.
    monkeypatch.setenv("GB_TEST_DB", target.url)
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = CliRunner()
    listed = runner.invoke(cli, ["--app", spec, "schedule", "list"])
    assert listed.exit_code == 0, listed.output
    assert f"{len(damaged)} damaged schedule(s)" in listed.output
    for name, column in damaged.items():
        assert f"DAMAGED ({column})" in listed.output
        assert f"  {name}: {column} column holds " in listed.output
    as_json = runner.invoke(cli, ["--app", spec, "schedule", "list", "--json"])
    assert as_json.exit_code == 0, as_json.output
    by_name = {d["name"]: d for d in json.loads(as_json.stdout)}
    assert by_name["good"]["damaged"] is None and by_name["good"]["total_run_count"] >= 4
    for name, column in damaged.items():
        assert by_name[name]["damaged"]["column"] == column
        assert by_name[name]["last_status"] == SCHEDULE_INVALID

    shown = runner.invoke(cli, ["--app", spec, "schedule", "show", "args-object"])
    assert shown.exit_code == 0, shown.output
    assert "args-object  (admin, enabled) DAMAGED" in shown.output
    assert "damaged:    args column holds {'a': 1}" in shown.output
    assert "quarantined by the scheduler" in shown.output
    shown_json = runner.invoke(cli, ["--app", spec, "schedule", "show", "kwargs-array", "--json"])
    assert shown_json.exit_code == 0, shown_json.output
    data = json.loads(shown_json.output)
    assert data["damaged"]["column"] == "kwargs" and data["damaged"]["value"] == [1]
    assert data["columns"]["task"] == "tasks.damaged" and data["executions"] == []
