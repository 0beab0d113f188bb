"""Prometheus metrics for one scheduler process (``pip install goatbeat[metrics]``).

``goatbeat scheduler --metrics-port 9464`` serves ``/metrics`` from a thread of the scheduler
process: :class:`PrometheusObserver` is the scheduler's
:class:`~goatbeat.core.scheduler.SchedulerObserver`, :func:`renderer` gives
:mod:`goatbeat.metrics.server` (which also answers the probes) the ``/metrics`` page.

Two kinds of metrics (docs/operations.md lists them with their types and labels):

- what this process did (counters and histograms since it started, ``goatbeat_lease_held``),
  from the scheduler's own reports;
- what the database says (backlog, lease validity, and per schedule: last success, last
  failure, failures in a row, misses, overdue), the same from every replica. They are read by
  the scheduler's own thread, after an iteration, at most once per ``refresh`` seconds (the
  status, the schedules' health and the refused schedules), never by the scrape: a scrape only reads what was read last, so it costs
  the database nothing and never waits for it.

Cardinality. Per-schedule series exist only for schedules with something to say (a
worker-reported success or failure, a miss, overdue), at most ``schedule_limit`` of them:
overdue ones first, then the most failing, then by name
(:meth:`~goatbeat.core.store.ScheduleStore.schedule_health`).
``goatbeat_schedule_series_truncated`` is 1 when some were left out. 100,000 quiet schedules
make no series at all. A refused schedule (its task outside a scheduler's allow-list: it does
not run) has its own series, with its task and reason, as long as it stays refused; the count
of them, ``goatbeat_schedules_refused``, is always there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.errors import GoatbeatError
from goatbeat.core.health import Refusals, ScheduleHealth, StatusSnapshot
from goatbeat.core.observability import log_event
from goatbeat.core.scheduler import IterationResult
from goatbeat.core.store import ScheduleStore
from goatbeat.metrics import server
from goatbeat.metrics.health import LoopHealth
from goatbeat.metrics.server import DEFAULT_ADDRESS, MetricsRenderer

__all__ = [
    "PrometheusObserver",
    "renderer",
    "serve",
    "DEFAULT_PORT",
    "DEFAULT_SCHEDULE_LIMIT",
    "REFRESH",
    "LATENESS_BUCKETS",
]

DEFAULT_PORT = 9464
DEFAULT_SCHEDULE_LIMIT = 500
REFRESH = 15.0
"""Seconds between two reads of the database for the store-derived metrics."""

REASON_LABEL_LIMIT = 200
"""Characters of a refusal's reason kept in its label."""

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True, slots=True)
class _Read:
    status: StatusSnapshot
    schedules: list[ScheduleHealth]
    truncated: bool
    refusals: Refusals = Refusals()


class PrometheusObserver:
    """Counts what the scheduler reports and reads the store for the rest.

    ``registry``: where the metrics go (a new one by default, with the process and platform
    collectors; :func:`serve` exposes it)."""

    def __init__(
        self,
        store: ScheduleStore,
        *,
        scheduler_id: str,
        lease_name: str = "scheduler",
        overdue_after: timedelta = timedelta(minutes=10),
        schedule_limit: int = DEFAULT_SCHEDULE_LIMIT,
        refresh: float = REFRESH,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        version: str = "",
    ) -> None:
        self.store = store
        self.lease_name = lease_name
        self.overdue_after = overdue_after
        self.schedule_limit = schedule_limit
        self.refresh = refresh
        self.clock = clock or SystemClock()
        if registry is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
        self.registry = registry
        self._read: _Read | None = None
        self._read_at: float | None = None
        self._store_up = True
        self._lock = threading.Lock()

        info = Info("goatbeat_scheduler", "This scheduler process.", registry=registry)
        info.info({"scheduler_id": scheduler_id, "version": version, "lease": lease_name})
        self.lease_held = Gauge(
            "goatbeat_lease_held",
            "1 when this process held the lease (within its local deadline) in its last iteration.",
            registry=registry,
        )
        self.iterations = Counter(
            "goatbeat_iterations", "Scheduler iterations run.", registry=registry
        )
        self.iteration_errors = Counter(
            "goatbeat_iteration_errors",
            "Iterations that met a store error (the loop backed off).",
            registry=registry,
        )
        self.iteration_duration = Histogram(
            "goatbeat_iteration_duration_seconds",
            "Time an iteration took (lease, pending rows, claims, submissions).",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.claimed = Counter(
            "goatbeat_occurrences_claimed",
            "Occurrences this process claimed.",
            registry=registry,
        )
        self.submissions = Counter(
            "goatbeat_occurrences_submitted",
            "Occurrences the backend accepted from this process (resubmissions included).",
            registry=registry,
        )
        self.submit_failures = Counter(
            "goatbeat_submit_failures",
            'Failed submissions; final="true" when given up (submit_failed).',
            ["final"],
            registry=registry,
        )
        self.missed = Counter(
            "goatbeat_occurrences_missed",
            "Occurrences this process's claims dropped by misfire policy.",
            registry=registry,
        )
        self.lateness = Histogram(
            "goatbeat_lateness_seconds",
            "From an occurrence's instant to the backend accepting it (database clock).",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        for final in ("true", "false"):
            self.submit_failures.labels(final=final)
        registry.register(_StoreCollector(self))

    # -- the SchedulerObserver -------------------------------------------------------------------

    def iteration(self, result: IterationResult, duration: float) -> None:
        self.iterations.inc()
        self.iteration_duration.observe(max(0.0, duration))
        self.lease_held.set(1 if result.leader else 0)
        if result.error:
            self.iteration_errors.inc()
        self.claimed.inc(result.claimed)
        self.missed.inc(result.missed)
        self.submit_failures.labels(final="true").inc(result.failed)
        self.submit_failures.labels(final="false").inc(result.retrying)
        # submitted is counted per occurrence, with its lateness.
        self.refresh_if_due()

    def submitted(self, lateness: float) -> None:
        self.submissions.inc()
        self.lateness.observe(max(0.0, lateness))

    # -- the store's side ------------------------------------------------------------------------

    def refresh_if_due(self) -> None:
        """Read the store when ``refresh`` seconds have passed since the last read (on the
        scheduler's thread, between iterations). A failing read is logged; the metrics then
        say ``goatbeat_store_up 0`` until a read succeeds."""
        now = self.clock.monotonic()
        if self._read_at is not None and now - self._read_at < self.refresh:
            return
        self.read_now()

    def read_now(self) -> None:
        """Read the store at once (the CLI does before it serves, and again once the code
        schedules are published, so the first scrape already has every per-schedule series
        rather than waiting for the first iteration's read)."""
        self._read_at = self.clock.monotonic()
        try:
            status = self.store.status(lease_name=self.lease_name)
            schedules = self.store.schedule_health(
                overdue_after=self.overdue_after, limit=self.schedule_limit + 1
            )
            refusals = self.store.refusals(limit=self.schedule_limit)
        except GoatbeatError as exc:
            log_event("scheduler.error", level=logging.WARNING, stage="metrics", error=str(exc))
            with self._lock:
                self._store_up = False
            return
        read = _Read(
            status=status,
            schedules=schedules[: self.schedule_limit],
            truncated=len(schedules) > self.schedule_limit,
            refusals=refusals,
        )
        with self._lock:
            self._read = read
            self._store_up = True

    def snapshot(self) -> tuple[_Read | None, bool]:
        with self._lock:
            return self._read, self._store_up


class _StoreCollector(Collector):
    """The store-derived metrics, from the observer's last read."""

    def __init__(self, observer: PrometheusObserver) -> None:
        self.observer = observer

    def describe(self) -> list[Metric]:
        return []  # collected lazily: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        read, up = self.observer.snapshot()
        yield GaugeMetricFamily(
            "goatbeat_store_up",
            "1 when the last read of the database for these metrics succeeded.",
            value=1 if up else 0,
        )
        if read is None:
            return
        status = read.status
        lease = status.lease
        shards = status.shards
        held = all(s.valid for s in shards) if shards else lease is not None and lease.valid
        yield GaugeMetricFamily(
            "goatbeat_lease_valid",
            "1 when some scheduler holds the lease (with shards: every shard's lease), "
            "unexpired by the database clock.",
            value=1 if held else 0,
        )
        schedulers = GaugeMetricFamily(
            "goatbeat_schedulers",
            "Scheduler processes with a live heartbeat, by role.",
            labels=["role"],
        )
        for role in ("leader", "standby"):
            count = sum(1 for p in status.schedulers if p.role.value == role and not p.stale)
            schedulers.add_metric([role], count)
        yield schedulers
        yield GaugeMetricFamily(
            "goatbeat_schedules_due",
            "Enabled schedules whose next run has come and is not claimed yet.",
            value=status.due,
        )
        yield GaugeMetricFamily(
            "goatbeat_executions_pending",
            "Executions claimed and due, not accepted by the backend yet.",
            value=status.pending,
        )
        yield GaugeMetricFamily(
            "goatbeat_backlog_lag_seconds",
            "How long the oldest due occurrence has waited (0 when none waits).",
            value=status.lag,
        )
        labels = ["schedule"]
        success = GaugeMetricFamily(
            "goatbeat_schedule_last_success_timestamp_seconds",
            "When a worker last reported the schedule's run succeeded (Unix time).",
            labels=labels,
        )
        failure = GaugeMetricFamily(
            "goatbeat_schedule_last_failure_timestamp_seconds",
            "When a worker last reported the schedule's run failed for good (Unix time).",
            labels=labels,
        )
        streak = GaugeMetricFamily(
            "goatbeat_schedule_consecutive_failures",
            "Failures reported since the schedule's last success.",
            labels=labels,
        )
        missed = CounterMetricFamily(
            "goatbeat_schedule_missed",
            "Occurrences of the schedule dropped by its misfire policy, ever.",
            labels=labels,
        )
        overdue = GaugeMetricFamily(
            "goatbeat_schedule_overdue",
            "1 when the schedule's last success is older than expected (see overdue_after).",
            labels=labels,
        )
        for h in read.schedules:
            name = [h.name]
            if h.last_success_at is not None:
                success.add_metric(name, h.last_success_at.timestamp())
            if h.last_failure_at is not None:
                failure.add_metric(name, h.last_failure_at.timestamp())
            streak.add_metric(name, h.consecutive_failures)
            missed.add_metric(name, h.missed_count)
            overdue.add_metric(name, 1 if h.overdue else 0)
        yield from (success, failure, streak, missed, overdue)
        yield GaugeMetricFamily(
            "goatbeat_schedules_refused",
            "Schedules a scheduler refused to run (their task outside its allow-list) that "
            "stay refused: they do not run.",
            value=read.refusals.total,
        )
        refused = GaugeMetricFamily(
            "goatbeat_schedule_refused_since_timestamp_seconds",
            "When the schedule's refusals began (Unix time), while it stays refused; reason: "
            "the scheduler's, of its latest refused run.",
            labels=["schedule", "task", "reason"],
        )
        for r in read.refusals.schedules:
            if r.since is not None:
                reason = (r.reason or "")[:REASON_LABEL_LIMIT]
                refused.add_metric([r.name, r.task, reason], r.since.timestamp())
        yield refused
        yield GaugeMetricFamily(
            "goatbeat_schedule_series_truncated",
            "1 when more schedules had something to report than --metrics-schedules allows.",
            value=1 if read.truncated else 0,
        )


def renderer(observer: PrometheusObserver) -> MetricsRenderer:
    """What :mod:`goatbeat.metrics.server` calls for ``/metrics``: the registry in the format
    the scraper's ``Accept`` header asks for (Prometheus text, or OpenMetrics)."""

    def render(accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(observer.registry), content_type

    return render


def serve(
    observer: PrometheusObserver,
    port: int,
    address: str = DEFAULT_ADDRESS,
    *,
    health: LoopHealth | None = None,
) -> int:
    """Serve ``observer.registry`` on ``http://address:port/metrics`` (and ``health``'s
    ``/healthz`` and ``/readyz``) from a daemon thread; returns the port (useful with port 0)
    and logs ``metrics.serving``."""
    return server.serve(port, address, health=health, metrics=renderer(observer)).port
