"""One reporter process per worker: completion reports travel over a pipe, not the database.

A worker that forks a child per task (RQ's work horse) would otherwise open a new connection
to goatbeat's database in every child, and every worker waits for each report's commit. Instead
the worker's long-lived process starts, before it forks (RQ's first work horse, Celery's
``worker_init``, Dramatiq's worker boot), one small *reporter process* (``python -m
goatbeat.completion.relay``) that owns the only connection and reads reports from a pipe; the
children inherit its writing end. A report is one line of JSON (``started``, or ``finished``
with outcome, error, runtime and worker), written at once (one write of at most ``PIPE_BUF``
bytes: whole, never interleaved with another process's), without waiting for the database;
the pipe keeps them in the order they were written, so the main process's own report (a work
horse that died: ``lost``) lands after the horse's ``started``.

The reporter writes them in arrival order, what is pending in one transaction. It exits when
the process that started it is gone (polled) or every writer closed the pipe, after writing
what is already in it. A writer whose reporter is gone (killed, exited) or stuck (the pipe
full for :data:`SEND_WAIT` seconds) writes directly, as without the relay, so a report is not
lost to a dead reporter; one still inside a reporter killed by SIGKILL is (the leading
scheduler then ends the run by its bound).

On PostgreSQL the reporter also records the idempotency guard's successes
(:mod:`goatbeat.idempotency`): a reporter started for a ``postgresql://`` URL offers its pipe
to the guards of this process whose ledger has that URL (:mod:`goatbeat.core.handoff`), and a
``delivery_succeeded`` line is written with the ledger's own statement in the batch's
transaction, with the reports read before and after it (one commit for all). A batch the
store refuses is written again report by report, each success on its own.

An RQ work horse also hands it the guard's ``delivery_begin`` (``Relay(url, begins=True)``),
which must be committed before the body runs: the reporter listens on a Unix socket of its
own (in a directory only this user can enter), and for each request first writes what the
pipe holds (so an earlier end of that key applies), then commits the begin (and, the key not
taken, counts the duplicate) and answers. Requests are served while the reporter gathers a
batch, never held for it. A horse with no answer (the reporter gone, stuck for
:data:`BEGIN_WAIT` seconds, or the database refusing) takes the key on its own connection, as
without the relay (:mod:`goatbeat.idempotency` then checks whether the reporter's commit of
that very delivery landed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from goatbeat.completion import DATABASE_ENV, Reporter, worker_name
from goatbeat.core import handoff
from goatbeat.core.health import Outcome
from goatbeat.core.observability import log_event

__all__ = ["Relay", "RelayedReporter", "SEND_WAIT", "POLL_INTERVAL", "MAX_REPORT"]

SEND_WAIT = 5.0
"""Seconds a writer waits for room in a full pipe before writing directly."""
PIPE_SIZE = 1 << 20
"""Bytes the pipe holds (asked of the kernel; Linux's default unprivileged maximum)."""
POLL_INTERVAL = 0.5
"""Seconds between the reporter's checks that its parent is alive."""
GATHER = 0.1
"""Seconds the reporter waits, once a report arrived, for the others to write with it: a
report lands up to this much later, and the reporter wakes (and takes the CPU from the
worker) ten times a second at most instead of once per report."""
NICE = 10
"""The reporter's niceness (added): the worker's tasks come first."""
MAX_REPORT = select.PIPE_BUF
"""Bytes of one report: a longer error is cut (with a mark) so the write stays atomic."""
BEGIN_WAIT = 10.0
"""Seconds a work horse waits for the reporter's answer to a ``delivery_begin`` before it
takes the key on its own connection."""
BEGIN = "delivery_begin"
"""The event of a guard's request to take a key: ``key``, ``owner``, ``lease`` (seconds or
None), ``until`` (``time.monotonic()``, the host's clock: past it the reporter runs nothing),
answered ``{"taken": bool, "state": str | None}`` or ``{"error": str}``."""


class Relay:
    """The sending end, held by the worker's main process and inherited by its children.

    ``Relay(database_url)`` starts the reporter process at once; ``begins=True``: one that
    also takes the guard's keys (:meth:`begin`)."""

    def __init__(self, database: str, *, begins: bool = False) -> None:
        self.database = database
        self.owner = os.getpid()
        self.begin_path: str | None = None
        """The reporter's Unix socket for :meth:`begin` (None: it takes no keys)."""
        receive, send = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(send, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        listener: socket.socket | None = None
        args = [str(receive), str(self.owner)]
        try:
            if begins:
                listener, path = _listen()
                self.begin_path = path
                args += [str(listener.fileno()), path]
            self.process = subprocess.Popen(
                [sys.executable, "-m", "goatbeat.completion.relay", *args],
                pass_fds=(receive,) if listener is None else (receive, listener.fileno()),
                # The URL may hold a password: the environment, not the command line.
                env={**os.environ, DATABASE_ENV: database},
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(send)
            self._remove_socket()
            raise
        finally:
            os.close(receive)
            if listener is not None:
                listener.close()  # the reporter holds it
        os.set_blocking(send, False)
        self.fd = send
        self.gone = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, report: dict[str, Any]) -> bool:
        """Hand ``report`` to the reporter process: False when it is gone or stuck (then the
        caller writes directly)."""
        if self.gone:
            return False
        data = _encode(report)
        if len(data) > MAX_REPORT:
            return False  # too long to write whole (a huge key): written directly
        waited = False
        while True:
            try:
                os.write(self.fd, data)  # <= PIPE_BUF on a pipe: all of it, or EAGAIN
                return True
            except BlockingIOError:
                # Full: the reporter is behind. Wait for room once, then write directly.
                if waited:
                    return False
                select.select([], [self.fd], [], SEND_WAIT)
                waited = True
            except InterruptedError:
                continue
            except OSError:  # EPIPE: the reporter is gone (or the pipe was closed)
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

    def begin(self, key: str, owner: str, lease: float | None) -> tuple[bool, str | None] | None:
        """Ask the reporter to take ``key`` for ``owner`` (the guard's ``delivery_begin``,
        committed before it answers): ``(taken, state)``, or None without an answer (then the
        caller takes it itself: :data:`goatbeat.core.handoff.Beginner`)."""
        path = self.begin_path
        if path is None or self.gone:
            return None
        # Past "until" the reporter runs nothing: a begin committed after this process gave up
        # waiting (and took the key itself, and maybe failed and released it) must not happen.
        until = time.monotonic() + BEGIN_WAIT / 2
        request = _ENCODER.encode(
            {"event": BEGIN, "key": key, "owner": owner, "lease": lease, "until": until}
        )
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(BEGIN_WAIT)
                conn.connect(path)
                conn.sendall(request.encode() + b"\n")
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        raise ConnectionResetError("the reporter closed the socket")
                    reply += chunk
            answer = json.loads(reply)
            if not isinstance(answer, dict) or not isinstance(answer.get("taken"), bool):
                raise ValueError(str(answer.get("error") if isinstance(answer, dict) else answer))
        except (OSError, ValueError) as exc:
            log_event(
                "delivery.error",
                level=logging.WARNING,
                idempotency_key=key,
                error=f"{type(exc).__name__}: {exc}",
                hint="the completion reporter did not take the key: this process takes it "
                "on its own connection",
            )
            return None
        state = answer.get("state")
        return answer["taken"], state if isinstance(state, str) else None

    def _remove_socket(self) -> None:
        if self.begin_path is not None and os.getpid() == self.owner:
            shutil.rmtree(os.path.dirname(self.begin_path), ignore_errors=True)

    def close(self) -> None:
        """Close the writing end (the reporter exits once every writer closed it)."""
        handoff.withdraw(self.database, self.send)
        handoff.withdraw_begin(self.database, self.begin)
        self._remove_socket()
        if not self.gone:
            self.gone = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _listen() -> tuple[socket.socket, str]:
    """A listening Unix socket in a new directory only this user may enter."""
    directory = tempfile.mkdtemp(prefix="goatbeat-relay-")  # mode 0700
    path = os.path.join(directory, "begin")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(64)
    except BaseException:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return listener, path


def _encode(report: dict[str, Any]) -> bytes:
    data = _ENCODER.encode(report).encode() + b"\n"
    error = report.get("error")
    room = len(error) if isinstance(error, str) else 0
    while len(data) > MAX_REPORT and room > 0:
        # Keep the start of the error, the line a person needs: the write must stay atomic.
        room = max(0, room * MAX_REPORT // len(data) - 32)
        cut = {**report, "error": f"{error[:room]} …(cut)"} if isinstance(error, str) else report
        data = _ENCODER.encode(cut).encode() + b"\n"
    return data


class RelayedReporter(Reporter):
    """A :class:`~goatbeat.completion.Reporter` that sends through ``relay`` while it is
    there and writes directly otherwise."""

    relay: Relay | None = None

    def start_relay(self, *, begins: bool = False) -> Relay | None:
        """Start this process's reporter process (again, if it died); None when the target is
        not a URL (a store or a function: reports are written directly). Call it in the
        worker's long-lived process before it forks its children, which inherit it.
        ``begins``: on PostgreSQL, the guards of its children also take their keys through it
        (RQ's work horses: no connection of their own)."""
        if not isinstance(self.target, str):
            return None
        relay = self.relay
        if relay is not None and relay.owner == os.getpid():
            if not relay.gone and relay.process.poll() is None:
                return relay
            relay.close()
        postgres = self.target.startswith(("postgresql://", "postgres://"))
        self.relay = relay = Relay(self.target, begins=begins and postgres)
        if postgres:
            # The guards of this process (and its children) whose ledger is this database
            # hand their successes to it (the reporter process writes them: LedgerReporter).
            handoff.offer(self.target, relay.send)
            if relay.begin_path is not None:
                handoff.offer_begin(self.target, relay.begin)
        log_event("occurrence.relay_started", level=logging.DEBUG, pid=relay.pid)
        return relay

    def started(self, key: str | None, *, worker: str | None = None) -> bool:
        if not key:
            return False
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
        worker = worker or worker_name()
        report = {
            "event": "finished",
            "key": key,
            "outcome": outcome.value,
            "error": error,
            "runtime": runtime,
            "worker": worker,
        }
        if self.relay is not None and self.relay.send(report):
            return True
        return super().finished(key, outcome, error=error, runtime=runtime, worker=worker)


BATCH = 500
"""Reports at most the reporter writes in one transaction."""


def _write(reporter: Reporter, report: dict[str, Any]) -> None:
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


SUCCEEDED = "delivery_succeeded"
"""The event of a guard's success (:mod:`goatbeat.idempotency`): ``key``, ``owner``."""


class LedgerReporter(Reporter):
    """The reporter process's writer on PostgreSQL: the store on a connection of its own,
    on which it also runs the idempotency ledger's ``delivery_succeeded``, in the store's
    batch transaction (:meth:`transaction`)."""

    def __init__(self, database: str) -> None:
        from goatbeat.stores import schema
        from goatbeat.stores.postgres import DsnConnectionProvider, PostgresStore

        self.provider = DsnConnectionProvider(database, application_name="goatbeat-reporter")
        super().__init__(PostgresStore(connection_provider=self.provider))
        queries = schema.queries("postgres")
        self._succeeded_sql = queries["delivery_succeeded"]
        self._begin_sql = queries["delivery_begin"]
        self._duplicate_sql = queries["delivery_duplicate"]
        self._read_sql = queries["delivery_read"]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Callable[[dict[str, Any]], None]]:
        """One transaction on the store's connection: the store's batch inside it is a
        savepoint, and what is yielded records a guard's success in it."""
        conn = self.provider.get()
        with conn.transaction():
            yield lambda success: self._succeeded(conn, success)

    def _drop(self) -> None:
        # Its store is not one Reporter opened (a target store is never closed there): the
        # connection goes, and the next write opens another.
        self.provider.discard()

    def succeeded(self, success: dict[str, Any]) -> None:
        """A guard's success on its own (autocommit)."""
        self._succeeded(self.provider.get(), success)

    def _succeeded(self, conn: Any, success: dict[str, Any]) -> None:
        params = {"key": success["key"], "owner": success["owner"], "counted": True}
        conn.execute(self._succeeded_sql, params)

    def begin(self, key: str, owner: str, lease: float | None) -> tuple[bool, str | None]:
        """A guard's ``delivery_begin`` (autocommit: committed when this returns): taken, or
        not taken with the duplicate counted and the key's state, as the ledger would."""
        from psycopg.rows import tuple_row

        conn = self.provider.get()
        params = {
            "key": key,
            "owner": owner,
            "lease": None if lease is None else timedelta(seconds=lease),
        }
        with conn.cursor(row_factory=tuple_row) as cur:
            if cur.execute(self._begin_sql, params).fetchone() is not None:
                return True, None
            # This very begin, committed once already (an answer lost with a connection
            # that broke at its commit, then asked again): still this delivery's.
            held = cur.execute(self._read_sql, {"key": key}).fetchone()
            if held is not None and (held[1], held[2]) == ("running", owner):
                return True, None
            row = cur.execute(self._duplicate_sql, {"key": key}).fetchone()
        return False, None if row is None else str(row[0])


def _log_success(success: dict[str, Any], recorded: bool, error: str | None = None) -> None:
    if recorded:
        return  # as the guard's own success: nothing logged
    log_event(
        "delivery.error",
        level=logging.WARNING,
        idempotency_key=success["key"],
        succeeded=True,
        error=error,
        hint="the guard's success was not recorded: the key stays running, as after a "
        "delivery that died mid-body",
    )


def _write_success(reporter: Reporter, success: dict[str, Any]) -> None:
    if not isinstance(reporter, LedgerReporter):
        _log_success(success, False, "this reporter writes no idempotency ledger")
        return
    try:
        reporter.succeeded(success)
    except Exception as exc:  # noqa: BLE001 - the next line goes on
        reporter.close()  # reconnect
        _log_success(success, False, f"{type(exc).__name__}: {exc}")
    else:
        _log_success(success, True)


def _log_reports(reports: list[dict[str, Any]], matched: list[bool]) -> None:
    for report, recorded in zip(reports, matched, strict=True):
        event = f"occurrence.{report['event']}"
        level = logging.DEBUG if report["event"] == "started" else logging.INFO
        if report.get("outcome") not in (None, Outcome.SUCCEEDED.value):
            level = logging.WARNING
        fields = {k: report.get(k) for k in ("outcome", "error", "runtime") if k in report}
        log_event(event, level=level, idempotency_key=report["key"], recorded=recorded, **fields)


def _parse(batch: list[bytes]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The reports and the guard's successes of ``batch`` (a bad line logged and left out)."""
    reports: list[dict[str, Any]] = []
    successes: list[dict[str, Any]] = []
    for data in batch:
        try:
            report = json.loads(data)
            if not isinstance(report, dict) or not isinstance(report.get("key"), str):
                raise ValueError(f"not a report: {data[:200]!r}")
            if report.get("event") == SUCCEEDED:
                if not isinstance(report.get("owner"), str):
                    raise ValueError(f"not a guard's success: {data[:200]!r}")
                successes.append(report)
            else:
                reports.append(report)
        except ValueError as exc:  # one bad line must not stop the others
            log_event(
                "occurrence.finished",
                level=logging.WARNING,
                recorded=False,
                report_error=f"{type(exc).__name__}: {exc}",
            )
    return reports, successes


def write(reporter: Reporter, batch: list[bytes]) -> None:
    """Write ``batch`` in order: in one transaction where the store can (one commit for all,
    the guard's successes with the reports), else (or when that fails) one by one, each
    logged as the reporter logs it."""
    reports, successes = _parse(batch)
    if successes and isinstance(reporter, LedgerReporter):
        try:
            with reporter.transaction() as record_success:
                store = reporter.store()
                matched = store.record_reports(reports) if reports else []  # type: ignore[attr-defined]
                for success in successes:
                    record_success(success)
        except Exception:  # noqa: BLE001 - a refused report, a failure: one by one
            reporter.close()  # reconnect
        else:
            _log_reports(reports, matched)
            for success in successes:
                _log_success(success, True)
            return
        _write_reports(reporter, reports)
        for success in successes:
            _write_success(reporter, success)
        return
    _write_reports(reporter, reports)
    for success in successes:
        _write_success(reporter, success)


def _write_reports(reporter: Reporter, reports: list[dict[str, Any]]) -> None:
    if len(reports) > 1:
        try:
            store = reporter.store()
            matched = store.record_reports(reports)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no batches here, or a failure: one by one
            reporter.close()  # reconnect
        else:
            _log_reports(reports, matched)
            return
    for report in reports:
        try:
            _write(reporter, report)
        except Exception as exc:  # noqa: BLE001 - a bad outcome name, say: the next goes on
            log_event(
                "occurrence.finished",
                level=logging.WARNING,
                idempotency_key=report.get("key"),
                recorded=False,
                report_error=f"{type(exc).__name__}: {exc}",
            )


def _refuse_begin(reporter: Reporter, request: dict[str, Any]) -> str | None:
    """Why the reporter runs nothing for ``request`` (None: it runs it)."""
    key, owner, lease = request.get("key"), request.get("owner"), request.get("lease")
    if not (isinstance(key, str) and isinstance(owner, str)) or not (
        lease is None or (isinstance(lease, (int, float)) and lease > 0)
    ):
        return f"not a guard's begin: {str(request)[:200]}"
    if not isinstance(reporter, LedgerReporter):
        return "this reporter writes no idempotency ledger"
    until = request.get("until")
    if not isinstance(until, (int, float)) or time.monotonic() > until:
        return "too late: the guard no longer waits for this answer"
    return None


def write_then_begin(
    reporter: Reporter, batch: list[bytes], request: dict[str, Any]
) -> dict[str, Any]:
    """What the pipe held (``batch``), then a guard's begin, committed: in one transaction
    where it can (one commit), else ``batch`` as :func:`write` writes it and the begin on
    its own. The answer :meth:`Relay.begin` reads."""
    refused = _refuse_begin(reporter, request)
    if refused is not None:
        if batch:
            write(reporter, batch)
        return {"error": refused}
    assert isinstance(reporter, LedgerReporter)
    key, owner, lease = request["key"], request["owner"], request.get("lease")
    if batch:
        reports, successes = _parse(batch)
        try:
            with reporter.transaction() as record_success:
                store = reporter.store()
                matched = store.record_reports(reports) if reports else []  # type: ignore[attr-defined]
                for success in successes:
                    record_success(success)
                taken, state = reporter.begin(key, owner, lease)
        except Exception:  # noqa: BLE001 - rolled back: the lines one by one, then the begin
            reporter.close()  # reconnect
            _write_reports(reporter, reports)
            for success in successes:
                _write_success(reporter, success)
        else:
            _log_reports(reports, matched)
            for success in successes:
                _log_success(success, True)
            return {"taken": taken, "state": state}
    try:
        taken, state = reporter.begin(key, owner, lease)
    except Exception as exc:  # noqa: BLE001 - the guard takes the key itself
        reporter.close()  # reconnect
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"taken": taken, "state": state}


class _Serving:
    """The reporter process's state: the pipe (what is buffered of it), the socket for the
    guards' begins (when it has one) and the connections waiting to be answered."""

    def __init__(self, fd: int, reporter: Reporter, listener: socket.socket | None) -> None:
        self.fd = fd
        self.reporter = reporter
        self.listener = listener
        self.clients: dict[socket.socket, bytes] = {}
        self.buffered = b""
        self.written = 0
        self.closed = False
        """Every writer closed the pipe."""

    def _take(self) -> list[bytes] | None:
        """The whole lines the pipe holds now (None: nothing came)."""
        try:
            chunk = os.read(self.fd, 1 << 20)
        except (BlockingIOError, InterruptedError):
            return None
        if not chunk:
            self.closed = True
            return None
        *lines, self.buffered = (self.buffered + chunk).split(b"\n")
        return lines

    def _write(self, lines: list[bytes]) -> None:
        for start in range(0, len(lines), BATCH):
            batch = lines[start : start + BATCH]
            write(self.reporter, batch)
            self.written += len(batch)

    def read_pipe(self) -> bool:
        """Write what the pipe holds now; False when it held nothing."""
        lines = self._take()
        if lines is None:
            return False
        self._write(lines)
        return True

    def begin(self, request: dict[str, Any]) -> dict[str, Any]:
        """A guard's begin, after what the pipe holds (sent earlier: this delivery's
        started, an earlier delivery's end), the last batch of it in the begin's
        transaction."""
        pending: list[bytes] = []
        while (lines := self._take()) is not None:
            pending += lines
        cut = max(0, len(pending) - BATCH)
        self._write(pending[:cut])
        self.written += len(pending) - cut
        return write_then_begin(self.reporter, pending[cut:], request)

    def wait(self, seconds: float, *, for_pipe: bool) -> bool:
        """Serve the guards' begins for up to ``seconds``; True as soon as the pipe is
        readable (``for_pipe``)."""
        until = time.monotonic() + seconds
        while True:
            watched: list[Any] = list(self.clients)
            if self.listener is not None:
                watched.append(self.listener)
            if for_pipe:
                watched.append(self.fd)
            left = until - time.monotonic()
            if left <= 0:
                return False
            try:
                ready, _, _ = select.select(watched, [], [], left)
            except InterruptedError:
                continue
            for one in ready:
                if one is self.fd:
                    continue
                if one is self.listener:
                    self._accept()
                else:
                    self._receive(one)
            if for_pipe and self.fd in ready:
                return True

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.clients[conn] = b""

    def _receive(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        data = self.clients[conn] + chunk
        if chunk and not data.endswith(b"\n") and len(data) < MAX_REPORT:
            self.clients[conn] = data
            return
        del self.clients[conn]
        with conn:
            if not chunk:
                return  # gone before asking
            try:
                request = json.loads(data)
                if not isinstance(request, dict):
                    raise ValueError(f"not a request: {data[:200]!r}")
            except ValueError as exc:
                answer: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"}
            else:
                answer = self.begin(request)
            conn.setblocking(True)
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                conn.sendall(_ENCODER.encode(answer).encode() + b"\n")


def serve(fd: int, parent: int, reporter: Reporter, listener: socket.socket | None = None) -> int:
    """The reporter process's loop: write the reports read from the pipe ``fd`` in arrival
    order (what is pending in one transaction) until ``parent`` is gone or every writer
    closed the pipe, then what is left in it; the number of reports written. ``listener``:
    the socket the guards' begins arrive on, answered as they come."""
    os.set_blocking(fd, False)
    serving = _Serving(fd, reporter, listener)
    draining = False
    while True:
        if not draining:
            draining = os.getppid() != parent
            if not draining and serving.wait(POLL_INTERVAL, for_pipe=True):
                serving.wait(GATHER, for_pipe=False)
        if not serving.read_pipe():
            if serving.closed or draining:
                break  # every writer closed it, or the parent is gone and the pipe is empty
    for conn in serving.clients:
        conn.close()
    return serving.written


def open_reporter(database: str | None) -> Reporter:
    """The reporter process's writer: on PostgreSQL one that also records the guard's
    successes (:class:`LedgerReporter`)."""
    if database and database.startswith(("postgresql://", "postgres://")):
        try:
            return LedgerReporter(database)
        except ImportError:
            pass  # no psycopg: the plain reporter says so at its first write
    return Reporter(database)


def main(argv: list[str]) -> int:
    # Ctrl-C and a warm shutdown's SIGTERM are for the worker: it finishes its job, then
    # exits, and this process follows once it has written what the job reported.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    fd, parent = int(argv[0]), int(argv[1])
    listener = None
    if len(argv) > 3:
        listener = socket.socket(fileno=int(argv[2]))
        listener.setblocking(False)
    reporter = open_reporter(os.environ.get(DATABASE_ENV) or None)
    try:
        serve(fd, parent, reporter, listener)
    finally:
        if listener is not None:
            listener.close()
            shutil.rmtree(os.path.dirname(argv[3]), ignore_errors=True)
        reporter.close()
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
