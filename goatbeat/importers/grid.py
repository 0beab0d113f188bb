"""Celery's interval grid: whether a run celery dated is the run of a grid instant, late.

Below both the importers (:mod:`.entries`) and the export's comparison (:mod:`.comparison`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["late_on_grid", "celery_lateness", "grid_offset"]


def late_on_grid(instant: datetime, every: timedelta, anchor: datetime | None) -> bool:
    """Whether celery's run dated ``instant`` is the run of an instant of the grid ``anchor + k
    * every`` (the epoch's grid without an anchor), run late.

    Celery dates a run when it sends it, a little after the instant it was due (a few ms on a
    quiet machine, more under load), and an interval counts from that date: the lateness adds
    up run after run. A run within ``min(every / 4, 1 s)`` after a grid instant is that
    instant's run: the grid goatbeat handed over (or the ``start_time`` the row declares)
    still holds. Beyond it celery has really moved the phase, and celery's phase is kept."""
    return grid_offset(instant, every, anchor) <= celery_lateness(every)


def celery_lateness(every: timedelta) -> timedelta:
    """How late celery's run of an interval's instant may be dated and still be that
    instant's run (:func:`late_on_grid`)."""
    return min(every / 4, _LATENESS)


def grid_offset(instant: datetime, every: timedelta, anchor: datetime | None) -> timedelta:
    """How far ``instant`` lies after the last instant of the grid ``anchor + k * every``."""
    return (instant - (anchor or _EPOCH)) % every


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LATENESS = timedelta(seconds=1)
