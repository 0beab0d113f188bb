"""``celery -A proj beat -S goatbeat.compat:Scheduler`` (or ``-S goatbeat``): a drop-in beat.

A :class:`celery.beat.Scheduler` subclass that keeps celery beat's interface (``tick()``,
``close()``, ``lazy=True``, ``max_interval``) but not its single-process design:

* at start-up it publishes the app's ``beat_schedule`` (plus celery's own default entries) into
  the goatbeat store, converted with :func:`goatbeat.compat.to_trigger`, and disables
  celery-sourced schedules no longer declared (as beat drops them from its shelve file);
* interval entries keep the phase stock beat gave them when ``goatbeat_last_runs`` names the
  JSON of their last runs (dumped from beat's ``celerybeat-schedule``, see docs/migration): the
  first run after the switch is then the one stock beat would have made next. The phase is
  decided once, by the first publish; later starts (on any host, with or without it) keep it;
* every ``tick()`` is one iteration of :class:`goatbeat.core.scheduler.Scheduler`: the lease,
  the fencing token and the idempotency key decide who dispatches, so any number of
  ``celery beat`` replicas (and ``goatbeat scheduler`` processes, which use the same lease)
  can run against one PostgreSQL database and each occurrence is sent once.

Configuration (Celery settings, with the ``CELERY_`` prefix under Django):
``goatbeat_database`` (else the ``GOATBEAT_DATABASE`` environment variable, else
``sqlite:///celerybeat-goatbeat.sqlite3``), and optionally ``goatbeat_lease_ttl``,
``goatbeat_lease_renew_interval``, ``goatbeat_claim_ahead``, ``goatbeat_scheduler_id``,
``goatbeat_last_runs``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import beat
from celery.utils.log import get_logger

from goatbeat.core.config import parse_settings
from goatbeat.core.model import Schedule, Source
from goatbeat.core.scheduler import Scheduler as CoreScheduler
from goatbeat.core.store import ScheduleStore
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.importers.celery_beat import app_timezone, read_beat_schedule, read_last_runs
from goatbeat.stores import redact_url

__all__ = ["Scheduler", "DEFAULT_DATABASE"]

DEFAULT_DATABASE = "sqlite:///celerybeat-goatbeat.sqlite3"

logger = get_logger(__name__)


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """celery beat, with schedules in the goatbeat store and dispatch behind its lease."""

    #: celery beat's default is 300 s; goatbeat wakes for each due schedule anyway.
    max_interval = 60

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self._gb_store: ScheduleStore | None = None
        self._gb_scheduler: CoreScheduler | None = None
        self._gb_submitter: Any = None
        self._gb_closed = False
        self._gb_problems: list[tuple[str, str]] = []
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # -- configuration ------------------------------------------------------------------------

    def _conf(self, key: str) -> Any:
        conf = self.app.conf
        try:
            return conf[key]
        except KeyError:
            return conf.get(key.upper())

    @property
    def database_url(self) -> str:
        return str(
            self._conf("goatbeat_database")
            or os.environ.get("GOATBEAT_DATABASE")
            or DEFAULT_DATABASE
        )

    def _settings(self) -> Any:
        raw: dict[str, Any] = {"database": self.database_url}
        for key in ("lease_ttl", "lease_renew_interval", "claim_ahead", "scheduler_id"):
            value = self._conf(f"goatbeat_{key}")
            if value is not None:
                raw[key] = value
        raw["max_sleep"] = timedelta(seconds=float(self.max_interval))
        return parse_settings(raw)

    # -- celery beat's interface --------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the store, publish the beat schedule, build the goatbeat loop."""
        from goatbeat.stores import open_store
        from goatbeat.submitters.celery import CelerySubmitter

        settings = self._settings()
        store = open_store(settings.database)
        self._gb_store = store
        store.migrate()
        self._publish(store)
        self._gb_submitter = CelerySubmitter(self.app)
        self._gb_scheduler = CoreScheduler(store, self._gb_submitter, settings=settings)

    def _publish(self, store: ScheduleStore) -> None:
        data: dict[str, Any] = {}
        self._collect_defaults(data)
        data.update(self.app.conf.beat_schedule or {})
        entries = read_beat_schedule(
            data, timezone=app_timezone(self.app), last_runs=self._last_runs()
        )
        schedules = _keep_phase(store, [e.schedule for e in entries if e.schedule is not None])
        self._gb_problems = [(e.name, e.problem or "") for e in entries if e.schedule is None]
        for name, reason in self._gb_problems:
            logger.error("goatbeat: beat_schedule entry %r not scheduled: %s", name, reason)
        for entry in entries:
            for note in entry.notes:
                logger.warning("goatbeat: beat_schedule entry %r: %s", entry.name, note)
        result = store.publish(schedules, source=Source.CELERY)
        pruned = store.prune({e.name for e in entries}, source=Source.CELERY)
        logger.info(
            "goatbeat: published %d schedule(s) (%d new, %d changed), disabled %d, %d failed",
            len(schedules),
            len(result.created),
            len(result.updated),
            len(pruned),
            len(self._gb_problems),
        )

    def _last_runs(self) -> dict[str, datetime]:
        """Stock beat's last runs, from the JSON ``goatbeat_last_runs`` names (if any). A file
        that cannot be read stops beat: the operator asked for it."""
        path = self._conf("goatbeat_last_runs")
        if not path:
            return {}
        runs = read_last_runs(str(path))
        logger.info("goatbeat: read the last runs of %d entries from %s", len(runs), path)
        return runs

    def _collect_defaults(self, data: dict[str, Any]) -> None:
        # celery.backend_cleanup, as celery beat installs it, without touching our data dict.
        saved: Any = vars(self).get("data")
        defaults: dict[str, Any] = {}
        self.data = defaults
        try:
            super().install_default_entries(defaults)
            for name, entry in defaults.items():
                data[name] = {
                    "task": entry.task,
                    "schedule": entry.schedule,
                    "args": entry.args,
                    "kwargs": entry.kwargs,
                    "options": entry.options,
                }
        finally:
            self.data = saved

    def install_default_entries(self, data: Any) -> None:
        return None  # folded into _publish

    def merge_inplace(self, b: Any) -> None:
        return None  # the store holds the schedule

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One goatbeat iteration; returns the seconds to sleep (at most ``max_interval``)."""
        if self._gb_closed:
            return float(self.max_interval)
        if self._gb_scheduler is None:
            self.setup_schedule()
        assert self._gb_scheduler is not None
        result = self._gb_scheduler.run_once()
        return max(0.0, min(float(result.sleep), float(self.max_interval)))

    def sync(self) -> None:
        return None  # every change is already committed to the store

    def close(self) -> None:
        """Release the lease (a standby takes over at once) and every connection. Idempotent."""
        if self._gb_closed:
            return
        self._gb_closed = True
        try:
            if self._gb_scheduler is not None:
                self._gb_scheduler.release()
        finally:
            if self._gb_submitter is not None:
                self._gb_submitter.close()
            if self._gb_store is not None:
                self._gb_store.close()
            super().close()

    @property
    def info(self) -> str:
        return f"    . db -> {redact_url(self.database_url)} (goatbeat)"

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Entries of the beat schedule that could not be scheduled: (name, reason)."""
        return list(self._gb_problems)


def _keep_phase(store: ScheduleStore, schedules: Sequence[Schedule]) -> list[Schedule]:
    """An interval already published keeps its anchor: replicas read different schedule files
    (or none), and each restart must not move the phase the first publish chose."""
    published = {
        s.name: s.trigger
        for s in store.list_schedules(source=Source.CELERY)
        if isinstance(s, Schedule) and isinstance(s.trigger, IntervalTrigger)
    }
    kept: list[Schedule] = []
    for schedule in schedules:
        old = published.get(schedule.name)
        new = schedule.trigger
        if isinstance(new, IntervalTrigger) and old is not None and old.every == new.every:
            schedule = dataclasses.replace(schedule, trigger=old, last_run_at=None)
        kept.append(schedule)
    return kept
