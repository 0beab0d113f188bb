"""goatbeat's schedules back to celery beat: ``beat_schedule`` code or django-celery-beat rows.

The inverse of the importers, for a rollback after schedules were edited in goatbeat: each
goatbeat schedule becomes what the importer reads back as the same schedule. That is checked,
not assumed: every exported entry (the rendered Python code, executed; the row, as the
importer reads rows) is imported again in memory and compared with the goatbeat schedule on
every field both sides have (:func:`differences`). A schedule that does not come back equal
is refused by name and field (:class:`Refusal`), never exported as something else:

* goatbeat-only settings: ``jitter``, ``overlap``, ``max_runtime``, ``pause_on_failure``, a
  ``misfire`` policy other than ``run_once``, a ``misfire_grace`` or ``catch_up_limit`` that
  is neither goatbeat's default nor what an import sets;
* a cron expression celery's ``crontab`` cannot say (seconds, ``L``, ``W``, ``#``, both day
  fields restricted: cron ORs them, celery ANDs), a fixed-time field written as a full range
  (celery reads it as ``*``, a wildcard for the DST rules), a sub-second interval;
* for ``beat_schedule``: a crontab in a zone other than the app's, a start time, an end with a
  message expiry as well (both are ``options.expires``), a one-off, a once-at trigger;
* for django-celery-beat: what its columns cannot hold (a priority outside 0-255, an expiry
  that is not whole seconds, a coordinate with more than 6 decimals), and a one-off that has
  not run whose phase or start would need a ``last_run_at`` (an interval without a start
  time still to come, a crontab or solar row with a start time), which a one-off row reads as
  its run.

Phase. celery counts an interval from its last run, so an interval's phase is handed over as
a last run on goatbeat's grid: the grid instant before goatbeat's next one
(:func:`interval_last_run`), in the row's ``last_run_at`` or in the last runs JSON for stock
beat's ``celerybeat-schedule``. A crontab or solar schedule gets goatbeat's last run (the later
of it and the row's), so celery runs nothing goatbeat ran, or, when it never ran, a second
before goatbeat's next instant (:func:`before_next`), so celery runs an instant goatbeat still
owes (at once, as goatbeat would) and starts a start_time row with its first instant.

Pure planning here (:func:`plan_beat_schedule`, :func:`plan_django_celery_beat`); the writes to
django-celery-beat's tables are :func:`write_django_celery_beat`; the command is
:mod:`goatbeat.cli.export`.
"""

from __future__ import annotations

from goatbeat.importers.comparison import differences
from goatbeat.importers.export_beat import (
    BeatEntry,
    BeatSchedulePlan,
    plan_beat_schedule,
    render_beat_schedule,
)
from goatbeat.importers.export_dcb import (
    DcbPlan,
    DcbRow,
    plan_django_celery_beat,
    read_rows,
    write_django_celery_beat,
)
from goatbeat.importers.export_rules import (
    BEAT_SOURCES,
    DCB_SOURCES,
    Refusal,
    before_next,
    interval_last_run,
)

__all__ = [
    "BEAT_SOURCES",
    "DCB_SOURCES",
    "BeatEntry",
    "BeatSchedulePlan",
    "DcbPlan",
    "DcbRow",
    "Refusal",
    "differences",
    "before_next",
    "interval_last_run",
    "plan_beat_schedule",
    "plan_django_celery_beat",
    "read_rows",
    "render_beat_schedule",
    "write_django_celery_beat",
]
