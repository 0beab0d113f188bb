"""Bounded calls: how long the scheduler waits for a server it does not control.

A leader trusts its lease until its local deadline (``lease_ttl - lease_renew_interval`` after
it asked, see :mod:`goatbeat.core.lease`). A call that blocks longer than that on a broker, a
DNS resolver or a database that stopped answering (a frozen process, a partitioned host, a dead
primary whose SYNs go nowhere) outlives the lease: the leader neither renews nor stands down,
a standby takes over, and whatever the blocked call does when it wakes races the new leader.
So every such call is bounded *below* the local deadline (:func:`io_timeout`), gives up with
one log line naming what it waited for (``io.timeout``, ERROR), and the leader, back in
control, checks its deadline before it sends anything else.

Two ways to bound a call, for the two kinds of blocking:

- a call whose socket the caller owns is bounded by a socket timeout, or by a watchdog that
  shuts the socket down (:class:`Watchdog`: PostgreSQL statements);
- a call that nothing can interrupt (``getaddrinfo``, a library's whole connect or publish) runs
  in a worker thread and is waited for at most the bound (:class:`BoundedCall`). What outlives
  its bound keeps running in that thread; it is never started a second time while it runs, so
  a hung resolver costs one thread, not one per attempt.

Standard library only: the stores and the submitters (Redis, the AMQP publish path of the
RabbitMQ work) reuse these.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any

from goatbeat.core.clock import SystemClock
from goatbeat.core.errors import GoatbeatError
from goatbeat.core.observability import log_event

__all__ = [
    "IO_TIMEOUT_CAP",
    "IO_TIMEOUT_FLOOR",
    "BoundedCall",
    "CallBusy",
    "CallTimedOut",
    "Watchdog",
    "bound_calls",
    "io_timeout",
    "shutdown_socket",
]

_CLOCK = SystemClock()

IO_TIMEOUT_CAP = 10.0
"""No call to an outside server waits longer than this, however long the lease."""
IO_TIMEOUT_FLOOR = 0.2
"""Nor less (a lease shorter than this is for tests only)."""


def io_timeout(valid_for: timedelta) -> float:
    """The bound of one call to a server the scheduler does not control: half of what the
    lease is trusted for (``lease_ttl - lease_renew_interval``), at most
    :data:`IO_TIMEOUT_CAP`. 10 s with the default lease (30 s, renewed every 10 s), 1 s with
    a 3 s lease renewed every second. Half, so that a call started well into the lease's
    window still ends before its deadline, and a renewal fits in the rest."""
    half = valid_for.total_seconds() / 2
    return max(IO_TIMEOUT_FLOOR, min(IO_TIMEOUT_CAP, half))


class CallTimedOut(GoatbeatError, TimeoutError):
    """A bounded call gave up: the server did not answer within the bound. Whether the call
    had an effect (a message the broker took before it stalled) is unknown."""


class CallBusy(CallTimedOut):
    """A bounded call was not started: the previous one, which gave up, still runs."""


def bound_calls(target: object, seconds: float) -> bool:
    """Give ``target`` (a store, a submitter) the bound of its calls to outside servers
    through its optional ``bound_calls(seconds)``; False when it has none."""
    method = getattr(target, "bound_calls", None)
    if not callable(method):
        return False
    method(seconds)
    return True


class BoundedCall:
    """One kind of call (``what``: ``"postgres connect"``, ``"broker publish"``) run in a
    worker thread and waited for at most a bound.

    ``keep_late``: a call that outlived its bound and then *succeeded* hands its result to
    the next :meth:`call` instead of running again (a connection that took long to open is
    still a connection); otherwise a late result goes to ``on_late`` (a connection to close,
    a log line) and the next call runs afresh. Either way, while a call that gave up still
    runs, a new one is never started: with ``keep_late`` the next caller waits for it (up to
    its own bound), without, :class:`CallBusy` is raised at once. So at most ``workers``
    threads ever block on a hung server."""

    def __init__(
        self,
        what: str,
        *,
        keep_late: bool = False,
        on_late: Callable[[Any], None] | None = None,
        workers: int = 1,
        **fields: Any,
    ) -> None:
        self.what = what
        self.fields = fields
        self.keep_late = keep_late
        self.on_late = on_late
        self._workers = max(1, workers)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._abandoned: set[Future[Any]] = set()

    def call(self, fn: Callable[[], Any], timeout: float, **fields: Any) -> Any:
        """``fn()``'s result, or :class:`CallTimedOut` after ``timeout`` seconds (logged as
        ``io.timeout``); ``fn``'s own exceptions are raised as they are."""
        future = self._start(fn)
        try:
            return future.result(timeout=max(0.0, timeout))
        except FutureTimeout:
            with self._lock:
                self._abandoned.add(future)
            future.add_done_callback(self._late)
            log_event(
                "io.timeout",
                level=logging.ERROR,
                what=self.what,
                timeout=round(timeout, 3),
                **{**self.fields, **fields},
            )
            raise CallTimedOut(
                f"{self.what}: no answer within {timeout:.3g}s (the server may be frozen, "
                "partitioned or unreachable)"
            ) from None

    def _start(self, fn: Callable[[], Any]) -> Future[Any]:
        with self._lock:
            running = [f for f in self._abandoned if not f.done()]
            if self.keep_late:
                finished = [f for f in self._abandoned if f.done()]
                for f in finished:
                    self._abandoned.discard(f)
                if running:
                    future = running[0]
                    self._abandoned.discard(future)
                    return future  # wait for the attempt already under way
                for f in finished:
                    if f.exception() is None:
                        return f  # it succeeded after its caller gave up: use it
            else:
                self._abandoned = set(running)
                if len(running) >= self._workers:
                    raise CallBusy(
                        f"{self.what}: not started, the previous call (which gave up) has "
                        "not returned yet"
                    )
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._workers + len(running),
                    thread_name_prefix=f"goatbeat-{self.what.replace(' ', '-')}",
                )
            elif running:
                # A worker is stuck: give the next call a fresh pool of its own.
                self._executor.shutdown(wait=False)
                self._executor = ThreadPoolExecutor(
                    max_workers=self._workers,
                    thread_name_prefix=f"goatbeat-{self.what.replace(' ', '-')}",
                )
            return self._executor.submit(fn)

    def _late(self, future: Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        if self.keep_late:
            return  # kept for the next call
        with self._lock:
            self._abandoned.discard(future)
        if self.on_late is not None:
            self.on_late(future.result())

    def close(self) -> None:
        """Close what finished late and was kept, and stop the workers (a hung one is left to
        end on its own: it is a daemon thread's business)."""
        with self._lock:
            executor, self._executor = self._executor, None
            kept, self._abandoned = self._abandoned, set()
        for future in kept:
            if self.on_late is not None:
                future.add_done_callback(self._close_late)
        if executor is not None:
            executor.shutdown(wait=False)

    def _close_late(self, future: Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None and self.on_late is not None:
            self.on_late(future.result())


class Watchdog:
    """Shuts a socket down when a call on it has waited longer than its bound.

    For clients that block in a socket read with no timeout of their own (psycopg waiting for
    a statement's answer): :meth:`arm` before the call, :meth:`disarm` after. When the bound
    passes first, ``expire`` runs (from the watchdog's thread): shutting the socket down makes
    the blocked read return at once with an error, the connection is then known dead and
    discarded. One thread per watchdog, started on first use; one guarded call at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._seconds = 0.0
        self._woke_late = False
        self._expire: Callable[[], None] | None = None
        self._generation = 0
        self.fired = False
        """Whether the last guarded call was cut short (read it after :meth:`disarm`)."""
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, expire: Callable[[], None]) -> None:
        with self._cond:
            self._generation += 1
            self._deadline = _CLOCK.monotonic() + seconds
            self._seconds = seconds
            self._woke_late = False
            self._expire = expire
            self.fired = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name=f"goatbeat-watchdog-{self.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> bool:
        """End the guarded call; True when the watchdog cut it short."""
        with self._cond:
            self._deadline = None
            self._expire = None
            self._generation += 1
            return self.fired

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                now = _CLOCK.monotonic()
                left = self._deadline - now
                if left > 0:
                    self._cond.wait(left)
                    # (Disarmed or armed again meanwhile: the deadline is None, or new.)
                    deadline = self._deadline
                    self._woke_late = (
                        deadline is not None and _CLOCK.monotonic() - deadline > _OVERSLEPT
                    )
                    continue
                if self._woke_late and self._seconds > 0:
                    # This process itself was stopped (SIGSTOP, a VM pause) past the deadline:
                    # the answer may be waiting in the socket. The bound is on waiting for the
                    # server, so the call gets its bound again from now.
                    self._woke_late = False
                    self._deadline = now + self._seconds
                    continue
                expire, self._expire, self._deadline = self._expire, None, None
                self.fired = True
                if expire is not None:
                    try:
                        expire()
                    except OSError:
                        pass  # already closed: the call ends by itself


_OVERSLEPT = 0.25
"""A watchdog that wakes this much past its deadline was not running (the process stopped)."""


def shutdown_socket(fileno: int) -> None:
    """Shut the socket behind ``fileno`` down (both ways) without closing the descriptor,
    which its owner still holds: a read blocked on it returns at once."""
    dup = os.dup(fileno)
    try:
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        raise
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()
