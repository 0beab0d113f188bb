"""Metrics adapters: what a scheduler process exposes to a monitoring system.

:mod:`goatbeat.metrics.prometheus` (the ``metrics`` extra, ``prometheus_client``) serves
``/metrics`` for ``goatbeat scheduler --metrics-port``. The core knows none of it: the scheduler
tells a :class:`~goatbeat.core.scheduler.SchedulerObserver` what happened, and the adapter
turns that, and a periodic read of the store, into metrics. docs/operations.md lists them.

:mod:`goatbeat.metrics.health` (standard library only) judges this process's own loop for the
per-replica probes, and :mod:`goatbeat.metrics.server` serves ``/healthz``, ``/readyz`` and
``/metrics`` (``--health-port`` needs no optional package).
"""
