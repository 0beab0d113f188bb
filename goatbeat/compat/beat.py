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
``goatbeat_database`` (else the ``GOATBEAT_DATABASE`` environment variable; with neither, beat
refuses to start: a local SQLite file per host would let two replicas both dispatch; write
``sqlite:///celerybeat-goatbeat.sqlite3`` to mean one host), and optionally
``goatbeat_lease_ttl``, ``goatbeat_lease_renew_interval``, ``goatbeat_claim_ahead``,
``goatbeat_scheduler_id``, ``goatbeat_last_runs``.

Logging: celery beat's formatter prints a record's message only, and goatbeat's details
(schedule, instant, idempotency key...) are structured fields. Unless the ``goatbeat`` logger
has handlers of its own (the JSON recipe), the drop-in writes them into the message:
``occurrence.submitted schedule=nightly scheduled_at=2026-12-01T02:00:00Z
idempotency_key=nightly:2026-12-01T02:00:00Z ...``, so the cutover can be watched in beat's log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import beat
from celery.utils.log import get_logger

from goatbeat.core.config import parse_settings
from goatbeat.core.errors import ConfigError
from goatbeat.core.model import Schedule, Source
from goatbeat.core.scheduler import Scheduler as CoreScheduler
from goatbeat.core.store import ScheduleStore
from goatbeat.core.timeutil import iso_z
from goatbeat.core.triggers import IntervalTrigger
from goatbeat.importers.celery_beat import (
    app_timezone,
    beat_schedule_of,
    read_beat_schedule,
    read_last_runs,
)
from goatbeat.importers.entries import late_on_grid
from goatbeat.stores import redact_url

__all__ = ["Scheduler", "NO_DATABASE", "FieldsInMessage", "BeatRefused"]

NO_DATABASE = (
    "goatbeat: no database configured for celery beat -S goatbeat: set goatbeat_database "
    "(CELERY_GOATBEAT_DATABASE under Django) or GOATBEAT_DATABASE to the PostgreSQL database "
    "every beat replica shares. goatbeat no longer falls back to a local SQLite file: two "
    "replicas would then each have their own and both dispatch. For a single host, set it to "
    "sqlite:///celerybeat-goatbeat.sqlite3 explicitly"
)

logger = get_logger(__name__)


class BeatRefused(SystemExit):
    """celery beat -S goatbeat cannot start (no database, a bad goatbeat_* setting).

    celery beat logs any ``Exception`` out of its scheduler with the whole traceback, which
    buried the one line that mattered. The reason is logged as one CRITICAL line instead, and
    this ``SystemExit`` (exit status 1) stops beat without another word: celery lets it pass,
    and in a worker's embedded beat (``-B``) it ends the beat thread only, as an exception did.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(1)
        self.reason = reason
        logger.critical("%s", reason)

    def __str__(self) -> str:
        return self.reason


class FieldsInMessage(logging.Filter):
    """Writes a goatbeat record's structured fields into its message (``event key=value ...``)
    for formatters that print the message only, as celery beat's does."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "goatbeat", None)
        if isinstance(fields, dict) and not getattr(record, "_goatbeat_rendered", False):
            parts = [str(record.getMessage())]
            parts += [f"{k}={_text(v)}" for k, v in fields.items() if v is not None]
            record.msg = " ".join(parts)
            record.args = ()
            record._goatbeat_rendered = True
        return True


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return iso_z(value) if value.tzinfo is not None else value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, float):
        return f"{value:g}"
    text = str(getattr(value, "value", value)) if not isinstance(value, str) else value
    return json.dumps(text) if (not text or " " in text) else text


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
        self._gb_ticking = False
        self._gb_deferred: tuple[Any, int, Any] | None = None
        self._gb_shielded = False
        self._gb_signals: dict[int, tuple[Any, Any]] = {}  # signal: (beat's handler, ours)
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # -- configuration ------------------------------------------------------------------------

    def _conf(self, key: str) -> Any:
        conf = self.app.conf
        try:
            return conf[key]
        except KeyError:
            return conf.get(key.upper())

    @property
    def database_url(self) -> str | None:
        """``goatbeat_database``, else ``GOATBEAT_DATABASE``; None when neither is set."""
        url = self._conf("goatbeat_database") or os.environ.get("GOATBEAT_DATABASE")
        return str(url) if url else None

    def _settings(self) -> Any:
        url = self.database_url
        if url is None:
            raise BeatRefused(NO_DATABASE)
        raw: dict[str, Any] = {"database": url}
        for key in (
            "lease_ttl",
            "lease_renew_interval",
            "claim_ahead",
            "scheduler_id",
            "listen_database",
            "pooled",
            "poll_interval",
        ):
            value = self._conf(f"goatbeat_{key}")
            if value is not None:
                raw[key] = value
        raw["max_sleep"] = timedelta(seconds=float(self.max_interval))
        try:
            return parse_settings(raw)
        except ConfigError as exc:
            raise BeatRefused(f"goatbeat: {exc} (celery's goatbeat_<key> settings)") from None

    # -- celery beat's interface --------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the store, publish the beat schedule, build the goatbeat loop."""
        from goatbeat.stores import open_store
        from goatbeat.submitters.celery import CelerySubmitter

        settings = self._settings()
        self._show_fields()
        store = open_store(
            settings.database,
            pooled=settings.pooled,
            listen_database=settings.listen_database,
            poll_interval=settings.poll_interval.total_seconds(),
        )
        self._gb_store = store
        store.migrate()
        self._publish(store)
        self._gb_submitter = CelerySubmitter(self.app)
        self._gb_scheduler = CoreScheduler(store, self._gb_submitter, settings=settings)

    def _show_fields(self) -> None:
        gb_logger = logging.getLogger("goatbeat")
        if gb_logger.handlers:
            return  # the project configured goatbeat's logging (JSON recipe): keep the fields
        if not any(isinstance(f, FieldsInMessage) for f in gb_logger.filters):
            gb_logger.addFilter(FieldsInMessage())

    def _publish(self, store: ScheduleStore) -> None:
        data = beat_schedule_of(self.app)
        entries = read_beat_schedule(
            data, timezone=app_timezone(self.app), last_runs=self._last_runs()
        )
        schedules = _keep_phase(store, [e.schedule for e in entries if e.schedule is not None])
        self._gb_problems = [(e.name, e.problem or "") for e in entries if e.schedule is None]
        for name, reason in self._gb_problems:
            logger.error("goatbeat: FAILED  %s: %s (not scheduled)", name, reason)
        for entry in entries:
            for note in entry.notes:
                logger.warning("goatbeat: beat_schedule entry %r: %s", entry.name, note)
        result = store.publish(schedules, source=Source.CELERY, follow_last_run=True)
        # An entry that no longer converts (a custom schedule class goatbeat now refuses) is
        # disabled like one no longer declared: a row an earlier publish left would otherwise
        # run it as something else.
        pruned = store.prune({e.name for e in entries if e.ok}, source=Source.CELERY)
        for name in sorted(set(pruned) & {n for n, _ in self._gb_problems}):
            logger.error("goatbeat: %s: its earlier published schedule is disabled", name)
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

    def install_default_entries(self, data: Any) -> None:
        return None  # published with the schedule (importers.celery_beat.beat_schedule_of)

    def merge_inplace(self, b: Any) -> None:
        return None  # the store holds the schedule

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One goatbeat iteration; returns the seconds to sleep (at most ``max_interval``)."""
        if self._gb_closed:
            return float(self.max_interval)
        if self._gb_scheduler is None:
            self.setup_schedule()
        assert self._gb_scheduler is not None
        self._shield_signals()
        self._gb_ticking = True
        try:
            result = self._gb_scheduler.run_once()
        finally:
            self._gb_ticking = False
            deferred, self._gb_deferred = self._gb_deferred, None
        if deferred is not None:
            handler, signum, frame = deferred
            handler(signum, frame)  # beat's own: sync, then SystemExit out of the loop
        return max(0.0, min(float(result.sleep), float(self.max_interval)))

    def _shield_signals(self) -> None:
        """celery beat stops on SIGTERM/SIGINT by raising SystemExit wherever its main thread
        is. Inside an iteration that is between a claim's commit and its submission (an
        occurrence claimed ahead waits for its instant there): the claimed batch was left
        unsent, and after a rollback (the guide's export of goatbeat's last runs, stock beat
        again) nobody would ever send it. So while an iteration runs, the signal waits for it
        to end; between iterations beat's own handler runs at once. Installed at the first
        tick, after beat installed its handlers; only from the main thread (an embedded beat,
        ``worker -B``, keeps its own)."""
        if self._gb_shielded or threading.current_thread() is not threading.main_thread():
            return
        self._gb_shielded = True
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)
            if not callable(previous):
                continue

            def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                if self._gb_ticking:
                    if self._gb_deferred is None:
                        self._gb_deferred = (previous, signum, frame)
                    return
                previous(signum, frame)

            signal.signal(sig, handler)
            self._gb_signals[sig] = (previous, handler)

    def _unshield_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, (previous, ours) in self._gb_signals.items():
            if signal.getsignal(sig) is ours:
                signal.signal(sig, previous)
        self._gb_signals.clear()

    def sync(self) -> None:
        return None  # every change is already committed to the store

    def close(self) -> None:
        """Release the lease (a standby takes over at once) and every connection. Idempotent."""
        if self._gb_closed:
            return
        self._gb_closed = True
        self._unshield_signals()
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
        url = self.database_url
        where = redact_url(url) if url else "NOT CONFIGURED (set goatbeat_database)"
        return f"    . db -> {where} (goatbeat)"

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Entries of the beat schedule that could not be scheduled: (name, reason)."""
        return list(self._gb_problems)


def _keep_phase(store: ScheduleStore, schedules: Sequence[Schedule]) -> list[Schedule]:
    """An interval already published keeps its anchor: replicas read different schedule files
    (or none), and each restart must not move the phase the first publish chose. Only a newer
    last run than goatbeat knows (stock beat ran it since: a rollback, then a new cutover with
    a new dump) moves it, and then the publish follows that run (``follow_last_run``)."""
    published = {
        s.name: s
        for s in store.list_schedules(source=Source.CELERY)
        if isinstance(s, Schedule) and isinstance(s.trigger, IntervalTrigger)
    }
    kept: list[Schedule] = []
    for schedule in schedules:
        old = published.get(schedule.name)
        new = schedule.trigger
        if (
            isinstance(new, IntervalTrigger)
            and old is not None
            and isinstance(old.trigger, IntervalTrigger)
            and old.trigger.every == new.every
        ):
            theirs = schedule.last_run_at
            if not _newer(theirs, old.last_run_at):
                schedule = dataclasses.replace(schedule, trigger=old.trigger, last_run_at=None)
            elif theirs is not None and late_on_grid(theirs, new.every, old.trigger.anchor):
                # Stock beat ran on from goatbeat's grid, a little late each time: the same
                # phase, one run further on.
                schedule = dataclasses.replace(schedule, trigger=old.trigger)
        kept.append(schedule)
    return kept


def _newer(theirs: datetime | None, ours: datetime | None) -> bool:
    return theirs is not None and (ours is None or theirs > ours)
