"""One reporter process per forking worker: completion reports travel over a Unix socket.

A worker that forks a child per task (RQ's work horse) would otherwise open a new connection
to goatbeat's database in every child, twice the cost of a no-op job. Instead the worker's
long-lived main process starts, before its first fork, one small *reporter process*
(``python -m goatbeat.completion.relay``) that owns the only connection and reads reports from
a Unix datagram socket pair; the children inherit the sending end. A report is one small
datagram (``started``, or ``finished`` with outcome, error, runtime and worker), sent without
waiting for the database; the socket keeps them in the order they were sent, so the main
process's own report (a work horse that died: ``lost``) lands after the horse's ``started``.

The reporter writes them in arrival order. It exits when the process that started it is gone
(polled), after writing what is already in the socket. A sender whose reporter is gone (killed,
exited) or stuck (the socket full for :data:`SEND_WAIT` seconds) writes directly, as without
the relay, so a report is not lost to a dead reporter; one still inside a reporter killed by
SIGKILL is (the leading scheduler then ends the run by its bound).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Any

from goatbeat.completion import DATABASE_ENV, Reporter
from goatbeat.core.health import Outcome
from goatbeat.core.observability import log_event

__all__ = ["Relay", "RelayedReporter", "SEND_WAIT", "POLL_INTERVAL", "MAX_REPORT"]

SEND_WAIT = 5.0
"""Seconds a sender waits for room in a full socket before writing directly."""
POLL_INTERVAL = 0.5
"""Seconds between the reporter's checks that its parent is alive."""
MAX_REPORT = 16_000
"""Characters of an error a datagram carries (a longer one is cut, with a mark)."""


class Relay:
    """The sending end, held by the worker's main process and inherited by its children.

    ``Relay(database_url)`` starts the reporter process at once."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.owner = os.getpid()
        send, receive = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "goatbeat.completion.relay",
                    str(receive.fileno()),
                    str(self.owner),
                ],
                pass_fds=(receive.fileno(),),
                # The URL may hold a password: the environment, not the command line.
                env={**os.environ, DATABASE_ENV: database},
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            send.close()
            raise
        finally:
            receive.close()
        self.sock = send
        self.gone = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, report: dict[str, Any]) -> bool:
        """Hand ``report`` to the reporter process: False when it is gone or stuck (then the
        caller writes directly)."""
        if self.gone:
            return False
        data = json.dumps(report, separators=(",", ":")).encode()
        waited = False
        while True:
            try:
                self.sock.send(data, socket.MSG_DONTWAIT)
                return True
            except BlockingIOError:
                # Full: the reporter is behind. Wait for room once, then write directly.
                if waited:
                    return False
                select.select([], [self.sock], [], SEND_WAIT)
                waited = True
            except InterruptedError:
                continue
            except OSError as exc:  # ECONNREFUSED: the reporter is gone; EMSGSIZE: too big
                if not isinstance(exc, ConnectionError):
                    return False
                self.gone = True
                if os.getpid() == self.owner:
                    self.process.poll()  # reap it
                log_event(
                    "occurrence.relay_gone",
                    level=logging.WARNING,
                    pid=self.process.pid,
                    hint="the completion reporter process is gone: reports are written "
                    "directly from here on",
                )
                return False

    def close(self) -> None:
        """Close the sending end (the reporter exits once its parent is gone)."""
        self.sock.close()
        self.gone = True


class RelayedReporter(Reporter):
    """A :class:`~goatbeat.completion.Reporter` that sends through ``relay`` while it is
    there and writes directly otherwise."""

    relay: Relay | None = None

    def started(self, key: str | None, *, worker: str | None = None) -> bool:
        if not key:
            return False
        from goatbeat.completion import worker_name

        report = {"event": "started", "key": key, "worker": worker or worker_name()}
        if self.relay is not None and self.relay.send(report):
            return True
        return super().started(key, worker=worker)

    def finished(
        self,
        key: str | None,
        outcome: Outcome,
        *,
        error: str | None = None,
        runtime: float | None = None,
        worker: str | None = None,
    ) -> bool:
        if not key:
            return False
        from goatbeat.completion import worker_name

        worker = worker or worker_name()
        sent = error
        if sent is not None and len(sent) > MAX_REPORT:
            sent = sent[:MAX_REPORT] + " …(cut)"
        report = {
            "event": "finished",
            "key": key,
            "outcome": outcome.value,
            "error": sent,
            "runtime": runtime,
            "worker": worker,
        }
        if self.relay is not None and self.relay.send(report):
            return True
        return super().finished(key, outcome, error=error, runtime=runtime, worker=worker)


def _write(reporter: Reporter, data: bytes) -> None:
    try:
        report = json.loads(data)
        key = report["key"]
        if report["event"] == "started":
            reporter.started(key, worker=report.get("worker"))
        else:
            reporter.finished(
                key,
                Outcome(report["outcome"]),
                error=report.get("error"),
                runtime=report.get("runtime"),
                worker=report.get("worker"),
            )
    except Exception as exc:  # noqa: BLE001 - one bad datagram must not stop the others
        log_event(
            "occurrence.finished",
            level=logging.WARNING,
            recorded=False,
            report_error=f"{type(exc).__name__}: {exc}",
        )


def serve(sock: socket.socket, parent: int, reporter: Reporter) -> int:
    """The reporter process's loop: write each datagram in arrival order until ``parent`` is
    gone, then what is left in the socket; the number written."""
    written = 0
    sock.settimeout(POLL_INTERVAL)
    while os.getppid() == parent:
        try:
            data = sock.recv(1 << 17)
        except TimeoutError:
            continue
        except InterruptedError:
            continue
        _write(reporter, data)
        written += 1
    sock.setblocking(False)
    while True:
        try:
            data = sock.recv(1 << 17)
        except (BlockingIOError, InterruptedError):
            break
        _write(reporter, data)
        written += 1
    return written


def main(argv: list[str]) -> int:
    # Ctrl-C and a warm shutdown's SIGTERM are for the worker: it finishes its job, then
    # exits, and this process follows once it has written what the job reported.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd, parent = int(argv[0]), int(argv[1])
    sock = socket.socket(fileno=fd)
    reporter = Reporter(os.environ.get(DATABASE_ENV) or None)
    try:
        serve(sock, parent, reporter)
    finally:
        reporter.close()
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
