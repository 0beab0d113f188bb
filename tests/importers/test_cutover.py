"""The cutover as the guide plays it, against real django-celery-beat tables (SQLite): rehearsal
import, celery keeps running, cutover import after a gap, goatbeat runs, rollback (celery runs
again), re-cutover. Each import must leave exactly the occurrences celery had not run: the gap's
owed one once, nothing celery or goatbeat already ran. Plus django-celery-beat's own semantics
for rows that never ran (``start_time``, ``clocked``), and an operator's edit never silently
overwritten.

Time is a FakeClock; celery's progress is written into its table the way its scheduler syncs it
(``last_run_at``, ``total_run_count``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")

from goatbeat.core.clock import FakeClock  # noqa: E402
from goatbeat.core.model import Schedule  # noqa: E402
from goatbeat.core.triggers import CronTrigger  # noqa: E402
from goatbeat.diff import celery_fire_times, compute_diff  # noqa: E402
from goatbeat.importers import import_entries, read_django_celery_beat  # noqa: E402
from goatbeat.stores import MemoryStore  # noqa: E402
from tests.conformance.helpers import claim_all, lease  # noqa: E402

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def at(hhmm: str, day: int = 10) -> datetime:
    hour, minute = hhmm.split(":")
    return datetime(2026, 6, day, int(hour), int(minute), tzinfo=UTC)


class Tables:
    """django-celery-beat's tables in a SQLite file, and what its scheduler writes to them."""

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.path = path

    def sql(self, statement: str, *params: Any) -> None:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            conn.execute(statement, params)

    def ran(self, name: str, when: datetime) -> None:
        """celery ran ``name`` at ``when`` and synced it (as DatabaseScheduler.sync does)."""
        self.sql(
            "UPDATE django_celery_beat_periodictask SET last_run_at = ?, "
            "total_run_count = total_run_count + 1 WHERE name = ?",
            _naive(when),
            name,
        )

    def changed(self, name: str, when: datetime) -> None:
        self.sql(
            "UPDATE django_celery_beat_periodictask SET date_changed = ? WHERE name = ?",
            _naive(when),
            name,
        )


def _naive(when: datetime) -> str:
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")


@pytest.fixture
def tables(tmp_path: Path, dcb_tables: Callable[..., None]) -> Tables:
    t = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        t.url,
        [
            {
                "name": "every-10m",
                "task": "ping",
                "interval": {"every": 10, "period": "minutes"},
                "last_run_at": "2026-06-10T11:55:00+00:00",
            },
            {
                "name": "quarter",
                "task": "ping",
                "crontab": {"minute": "*/15", "timezone": "UTC"},
                "last_run_at": "2026-06-10T11:45:00+00:00",
            },
        ],
    )
    return t


def imported(store: MemoryStore, tables: Tables, **kw: Any) -> Any:
    report = import_entries(store, read_django_celery_beat(tables.url), **kw)
    assert report.failed == [], report.failed
    return report


def claimed(store: MemoryStore, now: datetime) -> dict[str, list[datetime]]:
    out: dict[str, list[datetime]] = {}
    for o in claim_all(store, lease(store), now):
        out.setdefault(o.schedule_name, []).append(o.scheduled_at)
    return out


def test_the_cutover_import_keeps_celerys_phase_and_owes_the_gap_occurrence(
    tables: Tables,
) -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)  # the rehearsal, while celery beat still runs
    assert store.get("every-10m").next_run_at == at("12:05")

    # celery runs on, then is stopped at 12:07; the cutover import comes at 12:19.
    tables.ran("every-10m", at("12:05"))
    tables.ran("quarter", at("12:00"))
    clock.set(at("12:19"))
    report = imported(store, tables)

    # Same definitions (the interval's new anchor is on its old grid), later last runs.
    assert sorted(report.refreshed) == ["every-10m", "quarter"] and report.updated == []
    # Both owe the instant that fell in the gap: it runs once, at the cutover.
    assert store.get("every-10m").next_run_at == at("12:15")
    assert store.get("quarter").next_run_at == at("12:15")
    assert claimed(store, at("12:19")) == {"every-10m": [at("12:15")], "quarter": [at("12:15")]}
    assert {s.name: s.missed_count for s in store.list_schedules()} == {
        "every-10m": 0,
        "quarter": 0,
    }


def test_rollback_then_recutover_runs_nothing_celery_already_ran(tables: Tables) -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    clock.set(at("12:21"))
    assert claimed(store, at("12:21")) == {"every-10m": [at("12:15")], "quarter": [at("12:15")]}

    # Rollback at 12:22: celery beat runs again (from its own last runs) and runs the
    # 12:30 and 12:45 quarters, the interval at 12:30 and 12:40; re-cutover at 12:47.
    tables.ran("quarter", at("12:30"))
    tables.ran("quarter", at("12:45"))
    tables.ran("every-10m", at("12:30"))
    tables.ran("every-10m", at("12:40"))
    clock.set(at("12:47"))
    imported(store, tables)

    assert store.get("quarter").next_run_at == at("13:00")  # not 12:30 or 12:45 again
    assert store.get("every-10m").next_run_at == at("12:50")
    assert claimed(store, at("12:47")) == {}
    assert claimed(store, at("13:00")) == {"every-10m": [at("12:50"), at("13:00")][-1:]} | {
        "quarter": [at("13:00")]
    }


def test_a_reimport_after_goatbeat_ran_never_moves_the_phase_back(tables: Tables) -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    clock.set(at("12:31"))
    claimed(store, at("12:31"))
    state = {s.name: (s.next_run_at, s.last_run_at, s.version) for s in store.list_schedules()}

    report = imported(store, tables)  # celery's table still says 11:55 / 11:45

    assert sorted(report.unchanged) == ["every-10m", "quarter"]
    assert {s.name: (s.next_run_at, s.last_run_at, s.version) for s in store.list_schedules()} == (
        state
    )


def test_an_interval_with_start_time_that_never_ran_fires_at_start_time_and_keeps_it(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "daily-from-tomorrow",
                "task": "ping",
                "interval": {"every": 1, "period": "days"},
                "start_time": "2026-06-11T07:30:00+00:00",
            }
        ],
    )
    tables.changed("daily-from-tomorrow", at("12:00"))  # created today at noon
    store = MemoryStore(clock=FakeClock(NOW))
    imported(store, tables)

    row = store.get("daily-from-tomorrow")
    assert row.next_fire_times(3, NOW) == [at("07:30", 11), at("07:30", 12), at("07:30", 13)]
    # diff's celery side is django-celery-beat's: it fires at start_time too.
    (entry,) = read_django_celery_beat(tables.url)
    assert celery_fire_times(entry, NOW, NOW + timedelta(days=3))[:2] == [
        at("07:30", 11),
        at("07:30", 12),
    ]


def test_a_clocked_row_whose_time_passed_unrun_runs_once_at_the_cutover(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "owed",
                "task": "ping",
                "clocked": {"clocked_time": "2026-06-10T11:00:00+00:00"},
                "one_off": True,
            },
            {
                "name": "already-ran",
                "task": "ping",
                "clocked": {"clocked_time": "2026-06-10T10:00:00+00:00"},
                "one_off": True,
                "last_run_at": "2026-06-10T10:00:02+00:00",
                "total_run_count": 1,
            },
            {
                "name": "later",
                "task": "ping",
                "clocked": {"clocked_time": "2026-06-10T15:00:00+00:00"},
                "one_off": True,
            },
        ],
    )
    for name in ("owed", "already-ran", "later"):
        tables.changed(name, at("11:30"))  # edited after the time passed: still owed
    store = MemoryStore(clock=FakeClock(NOW))
    imported(store, tables)

    assert store.get("owed").next_run_at == at("11:00")
    assert store.get("already-ran").next_run_at is None
    assert store.get("later").next_run_at == at("15:00")
    assert claimed(store, NOW) == {"owed": [at("11:00")]}
    assert claimed(store, at("15:00")) == {"later": [at("15:00")]}
    assert claimed(store, at("18:00")) == {}  # once each

    # diff compares with django-celery-beat's behaviour, which agrees: the owed row at once,
    # the other at its time, the one that ran never.
    entries = read_django_celery_beat(tables.url)
    report = compute_diff(entries, _fresh(tables, entries), start=NOW, horizon=timedelta(days=1))
    assert report.equal, [s.to_dict() for s in report.schedules if s.differs()]
    owed = next(e for e in entries if e.name == "owed")
    assert celery_fire_times(owed, NOW, NOW + timedelta(days=1)) == [NOW]


def _fresh(tables: Tables, entries: Any) -> list[Schedule]:
    store = MemoryStore(clock=FakeClock(NOW))
    import_entries(store, entries)
    return store.list_schedules()


def test_an_operator_edit_is_a_conflict_kept_until_overwrite(tables: Tables) -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    edited = store.get("quarter").evolve(trigger=CronTrigger("*/20 * * * *", timezone="UTC"))
    store.update(edited)

    report = import_entries(store, read_django_celery_beat(tables.url))
    assert [name for name, _ in report.conflicts] == ["quarter"]
    assert "--overwrite" in report.conflicts[0][1]
    assert store.get("quarter").trigger == CronTrigger("*/20 * * * *", timezone="UTC")
    dry = import_entries(store, read_django_celery_beat(tables.url), dry_run=True)
    assert [name for name, _ in dry.conflicts] == ["quarter"]

    forced = import_entries(store, read_django_celery_beat(tables.url), overwrite=True)
    assert forced.conflicts == [] and forced.updated == ["quarter"]
    assert store.get("quarter").trigger == CronTrigger("*/15 * * * *", timezone="UTC")
    again = import_entries(store, read_django_celery_beat(tables.url))
    assert again.conflicts == [] and sorted(again.unchanged) == ["every-10m", "quarter"]


def test_a_start_time_moved_earlier_onto_the_same_grid_is_followed(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    # Rehearsal with a far start_time, then the row is edited to start soon: an interval never
    # fires before its anchor, so the old (later) anchor must not be kept even on the same grid.
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "from-start",
                "task": "ping",
                "interval": {"every": 5, "period": "seconds"},
                "start_time": "2099-01-01T00:00:00+00:00",
            }
        ],
    )
    store = MemoryStore(clock=FakeClock(NOW))
    imported(store, tables)
    tables.sql(
        "UPDATE django_celery_beat_periodictask SET start_time = ?, date_changed = ?",
        _naive(NOW + timedelta(seconds=5)),
        _naive(NOW),
    )
    report = imported(store, tables)
    assert report.updated == ["from-start"]
    assert store.get("from-start").next_fire_times(2, NOW) == [
        NOW + timedelta(seconds=5),
        NOW + timedelta(seconds=10),
    ]


LATE = timedelta(microseconds=171)  # celery dates a run when it sends it, a little late


def test_celerys_late_runs_after_a_rollback_keep_the_start_time_phase(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    # The live cutover's failure: every 5 s from start_time 12:00:05, goatbeat ran it, handed
    # its last run back, django-celery-beat ran 12:00:25 171 us late; the re-cutover moved the
    # phase onto that date (next run 12:00:30.000171, a key with microseconds).
    start = NOW + timedelta(seconds=5)
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "from-start",
                "task": "ping",
                "interval": {"every": 5, "period": "seconds"},
                "start_time": start.isoformat(),
            }
        ],
    )
    tables.changed("from-start", NOW)
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    for k in (0, 1, 2):
        clock.set(start + k * timedelta(seconds=5))
        assert claimed(store, clock.now()) == {"from-start": [clock.now()]}

    # Rollback: goatbeat's last run (12:00:15) handed back; celery runs 12:00:20 and 12:00:25,
    # each dated a little later than the last.
    tables.ran("from-start", start + timedelta(seconds=15) + LATE)
    tables.ran("from-start", start + timedelta(seconds=20) + 2 * LATE)
    clock.set(start + timedelta(seconds=21))
    report = imported(store, tables)

    assert report.refreshed == ["from-start"] and report.updated == []
    row = store.get("from-start")
    assert row.next_run_at == start + timedelta(seconds=25)
    assert row.next_fire_times(2, clock.now()) == [
        start + timedelta(seconds=25),
        start + timedelta(seconds=30),
    ]


def test_celerys_catch_up_run_at_a_rollback_never_moves_the_start_time_phase(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    # The rollback's django-celery-beat started 7.3 s after goatbeat's last run (12:00:15):
    # the 12:00:20 instant had passed, so it ran at once (12:00:22.3) and counted from there.
    # The re-cutover keeps start_time's grid: the next run is 12:00:25, not 12:00:27.3; diff
    # says why celery's instants differ, as a known difference.
    start = NOW + timedelta(seconds=5)
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "from-start",
                "task": "ping",
                "interval": {"every": 5, "period": "seconds"},
                "start_time": start.isoformat(),
            }
        ],
    )
    tables.changed("from-start", NOW)
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    for k in (0, 1, 2):
        clock.set(start + k * timedelta(seconds=5))
        assert claimed(store, clock.now()) == {"from-start": [clock.now()]}
    caught_up = start + timedelta(seconds=17, milliseconds=300)
    tables.ran("from-start", caught_up)
    clock.set(caught_up + timedelta(seconds=1))
    report = imported(store, tables)
    assert report.refreshed == ["from-start"] and report.updated == []
    assert store.get("from-start").next_run_at == start + timedelta(seconds=20)

    entries = read_django_celery_beat(tables.url)
    diff = compute_diff(entries, store.list_schedules(), start=clock.now(), horizon=20 * MIN)
    (d,) = diff.schedules
    assert d.status == "different" and d.fire_times
    assert all(f.known and "start_time's phase" in (f.reason or "") for f in d.fire_times), d
    assert not d.differs(accept_known=True)


def test_a_first_import_of_a_row_celery_ran_late_from_start_time_keeps_start_time(
    tmp_path: Path, dcb_tables: Callable[..., None]
) -> None:
    start = NOW - timedelta(minutes=10)
    tables = Tables(tmp_path / "dcb.sqlite3")
    dcb_tables(
        tables.url,
        [
            {
                "name": "from-start",
                "task": "ping",
                "interval": {"every": 1, "period": "minutes"},
                "start_time": start.isoformat(),
                "last_run_at": (NOW - MIN + timedelta(milliseconds=40)).isoformat(),
            }
        ],
    )
    store = MemoryStore(clock=FakeClock(NOW))
    imported(store, tables)
    assert store.get("from-start").next_fire_times(2, NOW) == [NOW, NOW + MIN]


def test_a_last_run_far_off_the_stored_grid_is_celerys_new_phase(tables: Tables) -> None:
    # celery's lateness added up past min(every / 4, 1 s): its phase has moved for real, and
    # the next run comes one interval after its last (celery's meaning).
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    drifted = at("12:05") + timedelta(seconds=3)
    tables.ran("every-10m", drifted)
    clock.set(at("12:06"))
    report = imported(store, tables)
    assert report.updated == ["every-10m"]
    assert store.get("every-10m").next_run_at == drifted + 10 * MIN


def test_a_re_cutover_keeps_goatbeats_interval_grid_under_celerys_lateness(
    tables: Tables,
) -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock)
    imported(store, tables)
    before = store.get("every-10m").trigger
    tables.ran("every-10m", at("12:05") + LATE)
    tables.ran("every-10m", at("12:15") + 3 * LATE)
    clock.set(at("12:16"))
    report = imported(store, tables)
    assert "every-10m" in report.refreshed and report.updated == []
    assert store.get("every-10m").trigger == before
    assert store.get("every-10m").next_run_at == at("12:25")
    # diff calls them the same occurrences and says by how much celery's would be later.
    entries = read_django_celery_beat(tables.url)
    diff = compute_diff(
        entries, store.list_schedules(), start=at("12:16"), horizon=timedelta(days=1)
    )
    (every,) = [d for d in diff.schedules if d.name == "every-10m"]
    assert every.status == "equal", every
    assert any("0.000513 s after an instant of goatbeat's grid" in n for n in every.notes), every
    # Whatever the window: a pair split by either end is no difference.
    for edge in (at("12:25") - 3 * LATE, at("12:25"), at("12:25") + LATE):
        for start in (at("12:16"), edge):
            end = edge if start != edge else edge + timedelta(hours=1)
            window = compute_diff(entries, store.list_schedules(), start=start, horizon=end - start)
            (d,) = [d for d in window.schedules if d.name == "every-10m"]
            assert d.status == "equal", (start, end, d)
