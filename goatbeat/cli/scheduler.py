"""``goatbeat migrate`` and ``goatbeat scheduler``: the tables, and the process that runs them.

``scheduler --metrics-port`` also serves Prometheus metrics (:mod:`goatbeat.metrics`) and this
process's probes, ``/healthz`` (its loop iterates) and ``/readyz`` (and reaches the database);
``--health-port`` serves the probes alone.
``scheduler`` publishes the app's code schedules (logging what it changed, and with
``prune_on_publish`` disabling the orphaned ones), only when it starts and not at all with
``--no-publish``, then runs the loop until SIGTERM/SIGINT
(graceful: the lease is released, exit 0); ``--once`` runs one iteration and prints its result
as JSON. A database that is down at start-up is waited out, as a running replica would; one
without goatbeat's tables (or with an older schema) is refused at once, saying which migrate
command to run, rather than retried forever.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from goatbeat.cli.context import BeatLike, CliContext, cli_context, open_app
from goatbeat.cli.errors import OperationalError, UserError
from goatbeat.cli.output import store_info
from goatbeat.cli.publish import release_option, use_release
from goatbeat.core.durations import parse_duration
from goatbeat.core.errors import InvalidValue, StoreError
from goatbeat.core.observability import log_event
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.submit import BaseSubmitter, capability
from goatbeat.metrics.health import LoopHealth
from goatbeat.stores import schema

if TYPE_CHECKING:
    from goatbeat.metrics.prometheus import PrometheusObserver

__all__ = ["migrate", "require_schema", "scheduler"]


@click.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade goatbeat's tables (idempotent)."""
    with open_app(ctx) as app:
        app.migrate()
        info = store_info(app.store)
        click.echo(f"goatbeat: schema up to date ({info})")


def _duration_option(name: str, help_text: str) -> Callable[[Callable[..., Any]], Any]:
    return click.option(name, default=None, metavar="DURATION", help=help_text)


@click.command()
@click.option("--once", is_flag=True, help="Run a single iteration, then release the lease.")
@click.option("--scheduler-id", default=None, help="Name in the lease and the executions.")
@_duration_option("--lease-ttl", "Lease time-to-live (default 30s).")
@_duration_option("--lease-renew-interval", "Renew the lease this often (default 10s).")
@_duration_option("--max-sleep", "Longest sleep between iterations (default 60s).")
@_duration_option(
    "--claim-ahead",
    "Claim this long before an occurrence's instant, submit at the instant (default 250ms; "
    "0 to claim only what is due).",
)
@click.option("--batch-size", type=int, default=None, help="Claims per transaction (500).")
@click.option(
    "--shards",
    type=int,
    default=None,
    metavar="N",
    help="Split the schedules into N shards, each with its own lease, shared out among the "
    "live schedulers (default 1: a single leader; more needs PostgreSQL; docs/scaling.md).",
)
@click.option(
    "--no-publish",
    is_flag=True,
    help="Do not publish code schedules at start (publish them as a release step instead, "
    "so a replica of an older release can never revert a definition).",
)
@release_option
@click.option(
    "--max-submit-retries",
    type=int,
    default=None,
    metavar="N",
    help="Retries a failed submission gets even when its misfire grace is shorter (default 5); "
    "within the grace it is retried until the grace runs out.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on http://ADDRESS:PORT/metrics (goatbeat[metrics]; "
    "9464 is the usual port).",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    metavar="ADDRESS",
    help="Address the metrics and probe server binds: loopback unless told (in Kubernetes, "
    "whose kubelet probes the pod's address: 0.0.0.0).",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve this process's liveness and readiness probes on http://ADDRESS:PORT/healthz "
    "and /readyz (no extra needed; --metrics-port serves them too).",
)
@_duration_option(
    "--liveness-timeout",
    "/healthz fails when the scheduler loop has not ended an iteration for this long "
    "(default: max-sleep + lease-ttl, 90s).",
)
@click.option(
    "--metrics-schedules",
    type=click.IntRange(0, 100_000),
    default=500,
    show_default=True,
    metavar="N",
    help="At most N schedules get per-schedule series (the overdue and failing first).",
)
@click.pass_context
def scheduler(
    ctx: click.Context,
    once: bool,
    scheduler_id: str | None,
    lease_ttl: str | None,
    lease_renew_interval: str | None,
    max_sleep: str | None,
    claim_ahead: str | None,
    batch_size: int | None,
    shards: int | None,
    no_publish: bool,
    release: str | None,
    max_submit_retries: int | None,
    metrics_port: int | None,
    metrics_address: str,
    health_port: int | None,
    liveness_timeout: str | None,
    metrics_schedules: int,
) -> None:
    """Publish code schedules, then run the scheduler until SIGTERM/SIGINT."""
    overrides = {
        key: value
        for key, value in (
            ("scheduler_id", scheduler_id),
            ("lease_ttl", lease_ttl),
            ("lease_renew_interval", lease_renew_interval),
            ("max_sleep", max_sleep),
            ("claim_ahead", claim_ahead),
            ("batch_size", batch_size),
            ("shards", shards),
            ("max_submit_retries", max_submit_retries),
        )
        if value is not None
    }
    collector = _CollectorPause()
    with collector, open_app(ctx) as app:
        use_release(app, release)
        loop = app.scheduler(**overrides)  # validates the options before anything is written
        obj = cli_context(ctx)
        require_schema(app, obj)
        health = _loop_health(loop, liveness_timeout)  # validates --liveness-timeout
        observer = None
        if metrics_port is not None:
            observer = _serve_metrics(
                loop, app, metrics_port, metrics_address, metrics_schedules, health
            )
        if health_port is not None and health_port != metrics_port:
            _serve_health(health, health_port, metrics_address)
        if metrics_port is not None or health_port is not None:
            loop.observe(health)  # only a process that answers probes keeps the record
        _prepare_submitter(loop.submitter)
        if no_publish:
            pass
        elif once:
            app.publish_at_start()
        else:
            _publish_when_reachable(app, obj, health)
        if observer is not None and not no_publish:
            observer.read_now()  # the schedules just published have their series at once
        if once:
            collector.end()
            try:
                result = loop.run_once()
            finally:
                loop.release()
                loop.close()  # delivers the alerts it raised
            summary = {
                k: v for k, v in dataclasses.asdict(result).items() if v not in (None, 0, False)
            }
            click.echo(json.dumps({"leader": result.leader, **summary}, default=str))
            if result.error:
                raise OperationalError(f"store error: {result.error}")
            return
        release = getattr(app, "release_declarations", None)

        def settle() -> None:
            if callable(release):
                release()  # published: a process that runs for weeks need not hold them all
                _return_freed_memory()
            # What survives start-up (modules, the app, the broker's client) lives as long as
            # the loop: frozen, the collector's full passes stop walking it every time a burst
            # of claims allocates (about 8 % of a 10,000-occurrence burst's time).
            collector.freeze()
            # On again once the declarations are gone: turned on before, its first
            # collection would walk all of them (about 0.07 s at 100,000) just to keep them.
            collector.end()

        # Once the first iteration has dispatched what was due: letting go of 100,000
        # declarations and collecting takes about 0.1 s that the start need not wait for.
        loop.observe(_AfterFirstIteration(settle))
        loop.run()


class _CollectorPause:
    """The cyclic garbage collector paused while the app loads, publishes, runs its first
    iteration and lets go of its declarations: start-up allocates a few long-lived objects per declaration and frees none in
    cycles, so the collections it would trigger (about a tenth of the declaring time at
    100,000) only walk them. :meth:`end` (or leaving the block) turns it back on, as it was.
    :meth:`freeze` moves what is alive into the collector's permanent generation for the rest
    of the block (``gc.freeze``); leaving the block unfreezes it."""

    def __init__(self) -> None:
        self._resume = False
        self._frozen = False

    def __enter__(self) -> _CollectorPause:
        self._resume = gc.isenabled()
        gc.disable()
        return self

    def freeze(self) -> None:
        gc.freeze()
        self._frozen = True

    def end(self) -> None:
        if self._resume:
            self._resume = False
            gc.enable()

    def __exit__(self, *exc: object) -> None:
        self.end()
        if self._frozen:
            self._frozen = False
            gc.unfreeze()


class _AfterFirstIteration:
    """A :class:`~goatbeat.core.scheduler.SchedulerObserver` that runs ``action`` once, when
    the scheduler's first iteration ends (whatever its outcome)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action

    def iteration(self, result: object, duration: float) -> None:
        action, self._action = self._action, None
        if action is not None:
            action()

    def submitted(self, lateness: float) -> None:
        pass


def _prepare_submitter(submitter: object) -> None:
    """Let the submitter open its broker connection (its optional ``prepare()``) from a thread
    while the schedules are published: the publication mostly waits for the database, and the
    first message then goes out without waiting for the transport's import and connection
    (~20-30 ms for Celery over Redis). Nothing waits for the thread."""
    prepare = capability(submitter, "prepare")
    if getattr(prepare, "__func__", None) is not BaseSubmitter.prepare:  # one of its own
        threading.Thread(target=prepare, name="goatbeat-prepare", daemon=True).start()


def _return_freed_memory() -> None:
    """Hand what the start-up publication freed back to the operating system. The C library
    keeps freed heap for later (a publication of 100,000 declarations frees about 80 MB that
    the loop never needs again); glibc's ``malloc_trim`` returns it. Elsewhere: nothing."""
    gc.collect()
    try:
        libc = ctypes.CDLL(None)  # the symbols the process already has: glibc on Linux
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return  # not glibc (musl, macOS ...)
    trim(0)


def require_schema(app: BeatLike, obj: CliContext) -> None:
    """Refuse a database that has no goatbeat tables, or older ones, naming the command that
    creates them: retrying would never help. An unreachable database passes (it is waited
    out, as an outage is)."""
    try:
        info = app.store.info()
    except StoreError:
        return
    kind = info.get("kind")
    if kind not in ("postgres", "sqlite"):
        return  # the memory store needs no tables
    have = int(info.get("schema_version") or 0)
    need = schema.latest_version(kind)
    if have >= need:
        return
    where = f"{kind} {info.get('database') or ''}".strip()
    state = (
        f"goatbeat's tables are missing from {where}"
        if have == 0
        else f"goatbeat's tables in {where} are at schema version {have}, this release needs {need}"
    )
    if obj.django:
        how = "run `python manage.py migrate` first"
    else:
        how = "run `goatbeat migrate` first, with the same --app and --database"
    raise UserError(f"{state}: {how}")


def _loop_health(loop: Scheduler, timeout: str | None) -> LoopHealth:
    """This process's liveness and readiness (:mod:`goatbeat.metrics.health`)."""
    if timeout is None:
        seconds = (loop.settings.max_sleep + loop.settings.lease_ttl).total_seconds()
    else:
        try:
            seconds = parse_duration(timeout, field="--liveness-timeout").total_seconds()
        except InvalidValue as exc:
            raise UserError(str(exc)) from None
        if seconds <= 0:
            raise UserError(f"--liveness-timeout: {timeout!r} must be longer than 0")
    return LoopHealth(timeout=seconds)


def _serve_health(health: LoopHealth, port: int, address: str) -> None:
    from goatbeat.metrics import server  # http.server: only for a process that serves

    try:
        server.serve(port, address, health=health)
    except OSError as exc:
        raise UserError(f"--health-port {port}: cannot serve on {address}: {exc}") from None


def _serve_metrics(
    loop: Scheduler,
    app: BeatLike,
    port: int,
    address: str,
    schedule_limit: int,
    health: LoopHealth,
) -> PrometheusObserver:
    """Serve the Prometheus metrics of ``loop`` (see :mod:`goatbeat.metrics.prometheus`)."""
    try:
        from goatbeat.metrics.prometheus import PrometheusObserver, serve
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_client":
            raise
        raise UserError(
            "--metrics-port needs prometheus_client: pip install 'goatbeat[metrics]'"
        ) from None
    observer = PrometheusObserver(
        app.store,
        scheduler_id=loop.scheduler_id,
        lease_name=loop.lease_name,
        overdue_after=loop.settings.overdue_after,
        schedule_limit=schedule_limit,
        version=loop.version,
    )
    observer.read_now()  # the first scrape has the per-schedule series (a failed read: up 0)
    try:
        serve(observer, port, address, health=health)
    except OSError as exc:
        raise UserError(f"--metrics-port {port}: cannot serve on {address}: {exc}") from None
    loop.observe(observer)
    return observer


def _publish_when_reachable(app: BeatLike, obj: CliContext, health: LoopHealth) -> None:
    """Publish code schedules, waiting out a database that is down at start-up (a replica
    restarted during an outage must back off like a running one, not exit; its liveness
    probe passes meanwhile, its readiness does not)."""
    delay = 0.5
    while True:
        try:
            app.publish_at_start()
            return
        except StoreError as exc:
            require_schema(app, obj)  # back, but without the tables: say so and stop
            health.waiting("the database (publishing the code schedules)")
            log_event(
                "scheduler.error",
                level=logging.WARNING,
                stage="publish",
                error=str(exc),
                retry_in=delay,
            )
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
