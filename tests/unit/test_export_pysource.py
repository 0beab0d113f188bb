"""The export reads its generated beat_schedule back by parsing it, never by running it."""

from __future__ import annotations

import datetime

import pytest

pytest.importorskip("celery")

from celery.schedules import crontab, schedule  # noqa: E402

from goatbeat.importers.pysource import UnreadableSource, read_beat_schedule_source  # noqa: E402

SOURCE = """import datetime

from celery.schedules import crontab, schedule

beat_schedule = {
    "nightly": {"task": "t.nightly", "schedule": crontab(minute="0", hour="3"), "args": (1, -2.5)},
    "often": {"task": "t.often", "schedule": schedule(datetime.timedelta(seconds=30)),
              "kwargs": {"at": datetime.datetime.fromisoformat("2026-12-02T08:00:00+00:00")}},
}
"""


def test_what_the_export_writes_reads_back_as_celery_objects() -> None:
    read = read_beat_schedule_source(SOURCE)
    assert read["nightly"]["schedule"] == crontab(minute="0", hour="3")
    assert read["nightly"]["args"] == (1, -2.5)
    assert read["often"]["schedule"] == schedule(datetime.timedelta(seconds=30))
    assert read["often"]["kwargs"]["at"].tzinfo is not None


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("import os\nbeat_schedule = {}", "unexpected statement"),
        ("beat_schedule = {'x': __import__('os').system('true')}", "unexpected Call"),
        ("beat_schedule = {'x': eval('1')}", "a call of eval"),
        ("import datetime\nbeat_schedule = {'x': datetime.sys}", "unexpected Attribute"),
        ("beat_schedule = {'x': [i for i in range(3)]}", "unexpected ListComp"),
        ("beat_schedule = {**{}}", r"a \*\* in a dict"),
        ("x = 1", "unexpected statement"),
        ("import datetime", "no beat_schedule"),
        ("beat_schedule = {", "not Python"),
    ],
)
def test_anything_else_is_refused_by_name_and_never_run(source: str, named: str) -> None:
    with pytest.raises(UnreadableSource, match=named):
        read_beat_schedule_source(source)
