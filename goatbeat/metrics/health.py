"""Per-replica probes: is THIS scheduler process's loop alive, and is it a working member?

``goatbeat status --check`` judges the *system* (a scheduler holds the lease, nothing due
waits), so every replica answers it alike and it cannot single out a frozen one.
:class:`LoopHealth` judges the process it runs in, from what that process itself saw: it is a
:class:`~goatbeat.core.scheduler.SchedulerObserver`, told by the loop each time an iteration
ends, and :mod:`goatbeat.metrics.server` serves its verdicts as ``/healthz`` and ``/readyz``.
Nothing here reads the database or the heartbeat rows, so the answer does not depend on how
the schedulers name themselves there.

- **Liveness** (``/healthz``): an iteration ended less than ``timeout`` seconds ago (or, before
  the first one, the process started or reported waiting out an outage that recently). The
  loop ends an iteration at least every ``max_sleep`` plus the iteration itself, leader and
  standby alike, so a loop that stays silent for ``timeout`` (``max_sleep + lease_ttl`` by
  default) is wedged: stuck in a broker call, a deadlock, a frozen thread. A process stopped
  whole (SIGSTOP, a frozen VM) does not answer at all, which fails a probe just the same. A
  database that is down does not fail liveness: the loop keeps iterating (and backing off),
  and restarting the process would not bring the database back.
- **Readiness** (``/readyz``): alive, and the last iteration reached the database (as the
  leader or as a standby). Not ready before the first iteration, nor while the database
  cannot be reached.

Only the standard library: the probes need no optional package.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from goatbeat.core.clock import Clock, SystemClock
from goatbeat.core.scheduler import IterationResult

__all__ = ["LoopHealth", "Probe"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One probe's verdict: ``ok`` and the one line saying why."""

    ok: bool
    reason: str

    @property
    def line(self) -> str:
        return f"{'ok' if self.ok else 'unhealthy'}: {self.reason}"


class LoopHealth:
    """What the loop of this process last did, judged for the probes. Thread-safe: the loop
    reports on its thread, the probes are answered on the HTTP server's."""

    def __init__(self, *, timeout: float, clock: Clock | None = None) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout: {timeout!r} must be positive")
        self.timeout = timeout
        self.clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._started = self.clock.monotonic()
        self._progress_at = self._started
        self._waiting: str | None = None
        self._last: IterationResult | None = None
        self._iterations = 0

    # -- what the process reports ----------------------------------------------------------------

    def waiting(self, what: str) -> None:
        """The process is alive and waits for something before its loop starts (the database,
        for the start-up publication): liveness holds while it keeps saying so."""
        with self._lock:
            self._progress_at = self.clock.monotonic()
            self._waiting = what

    def iteration(self, result: IterationResult, duration: float) -> None:
        with self._lock:
            self._progress_at = self.clock.monotonic()
            self._last = result
            self._iterations += 1
            self._waiting = None

    def submitted(self, lateness: float) -> None:
        pass  # liveness follows iterations, not submissions

    # -- the verdicts ----------------------------------------------------------------------------

    def liveness(self) -> Probe:
        with self._lock:
            now = self.clock.monotonic()
            quiet = now - self._progress_at
            last, count, waiting = self._last, self._iterations, self._waiting
        limit = f"limit {self.timeout:g}s"
        if quiet > self.timeout:
            if last is None:
                return Probe(
                    ok=False,
                    reason=f"stalled: no scheduler iteration in the {quiet:.1f}s since the "
                    f"process started ({limit})",
                )
            return Probe(
                ok=False,
                reason=f"stalled: the scheduler loop's last iteration ended {quiet:.1f}s ago "
                f"({limit})",
            )
        if last is None:
            doing = f"waiting for {waiting}" if waiting else "no iteration yet"
            return Probe(ok=True, reason=f"starting: {doing} ({quiet:.1f}s ago, {limit})")
        return Probe(
            ok=True,
            reason=f"alive: iteration {count} ended {quiet:.1f}s ago, {_role(last)} ({limit})",
        )

    def readiness(self) -> Probe:
        live = self.liveness()
        if not live.ok:
            return live
        with self._lock:
            last, waiting = self._last, self._waiting
        if last is None:
            doing = f"waiting for {waiting}" if waiting else "no iteration yet"
            return Probe(ok=False, reason=f"starting: {doing}")
        if last.error:
            return Probe(
                ok=False,
                reason=f"the last iteration could not reach the database: {last.error}",
            )
        return Probe(ok=True, reason=f"ready: {_role(last)}")


def _role(result: IterationResult) -> str:
    if result.leader and result.fencing_token is not None:
        return f"leader (fencing token {result.fencing_token})"
    if result.leader:
        return "leader"
    return "standby"
