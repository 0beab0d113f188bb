"""Alerts: telling a person (or a pager) that a schedule missed, keeps failing, or is overdue.

The leading scheduler raises an :class:`Alert` once per event:

- ``missed``: a claim's misfire policy dropped occurrences of a schedule (one alert per
  schedule and claim);
- ``failing``: a schedule's workers reported ``alert_after_failures`` failures in a row
  (raised when the streak reaches that count; again only after a success ended it);
- ``overdue``: :func:`goatbeat.core.health.is_overdue` holds for a schedule (raised when it
  starts to; again only after it stopped).

The leader keeps in memory which ``failing`` and ``overdue`` conditions it has raised, so a
new leader raises once more those that still hold when it takes over.

Delivery never blocks dispatch: :meth:`Alerter.emit` puts the alert on a bounded queue and a
daemon thread hands it to each handler (a callable named by the ``alert_hook`` setting, and/or
:func:`webhook`, which POSTs the JSON of :meth:`Alert.to_dict` to ``alert_webhook`` with a
timeout). A full queue drops the alert, a failing handler is logged; neither stops anything
(events ``alert.sent``, ``alert.failed``, ``alert.dropped``).
"""

from __future__ import annotations

import base64
import enum
import json
import logging
import queue
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from goatbeat.core.health import ScheduleHealth
from goatbeat.core.model import Miss
from goatbeat.core.observability import log_event
from goatbeat.core.timeutil import iso_z

if TYPE_CHECKING:
    from goatbeat.core.store import EndedRun

__all__ = [
    "AlertKind",
    "Alert",
    "AlertHandler",
    "Alerter",
    "AlertTracker",
    "redact_webhook",
    "webhook",
    "webhook_target",
    "WEBHOOK_TIMEOUT",
    "QUEUE_SIZE",
]

WEBHOOK_TIMEOUT = 5.0
"""Seconds a webhook POST may take (connect and answer)."""

QUEUE_SIZE = 1000
"""Alerts waiting for delivery at most; beyond, new ones are dropped (and logged)."""


class AlertKind(enum.StrEnum):
    MISSED = "missed"
    FAILING = "failing"
    OVERDUE = "overdue"
    LOST = "lost"  # a run ended lost (or expired): no worker will report it
    REFUSED = "refused"  # the scheduler would not run a schedule's task (allow-list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """One event worth a person's attention. ``text`` is one line for a chat message;
    ``details`` holds the facts behind it (JSON-able)."""

    kind: AlertKind
    schedule: str
    at: datetime
    scheduler_id: str
    text: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The webhook's JSON body (``text`` first: Slack and Mattermost show it as is)."""
        return {
            "text": self.text,
            "event": f"schedule.{self.kind.value}",
            "kind": self.kind.value,
            "schedule": self.schedule,
            "at": iso_z(self.at),
            "scheduler_id": self.scheduler_id,
            "details": dict(self.details),
        }

    @classmethod
    def missed(cls, miss: Miss, *, at: datetime, scheduler_id: str) -> Alert:
        span = ""
        if miss.first_at is not None and miss.last_at is not None:
            span = f" ({iso_z(miss.first_at)} to {iso_z(miss.last_at)})"
        return cls(
            kind=AlertKind.MISSED,
            schedule=miss.schedule_name,
            at=at,
            scheduler_id=scheduler_id,
            text=(
                f"goatbeat: schedule {miss.schedule_name!r} missed {miss.count} run(s){span}: "
                "they were late past the misfire grace and its misfire policy dropped them"
            ),
            details={
                "missed": miss.count,
                "first_at": None if miss.first_at is None else iso_z(miss.first_at),
                "last_at": None if miss.last_at is None else iso_z(miss.last_at),
            },
        )

    @classmethod
    def failing(cls, health: ScheduleHealth, *, at: datetime, scheduler_id: str) -> Alert:
        last = (
            "" if health.last_failure_at is None else f", last at {iso_z(health.last_failure_at)}"
        )
        return cls(
            kind=AlertKind.FAILING,
            schedule=health.name,
            at=at,
            scheduler_id=scheduler_id,
            text=(
                f"goatbeat: schedule {health.name!r} failed "
                f"{health.consecutive_failures} time(s) in a row{last}"
            ),
            details=health.to_dict(),
        )

    @classmethod
    def lost(cls, run: EndedRun, *, at: datetime, scheduler_id: str) -> Alert:
        return cls(
            kind=AlertKind.LOST,
            schedule=run.schedule_name,
            at=at,
            scheduler_id=scheduler_id,
            text=f"goatbeat: schedule {run.schedule_name!r}: run {run.idempotency_key} "
            f"{run.reason}",
            details={
                "idempotency_key": run.idempotency_key,
                "status": run.status,
                "reason": run.reason,
            },
        )

    @classmethod
    def refused(cls, schedule: str, reason: str, *, at: datetime, scheduler_id: str) -> Alert:
        return cls(
            kind=AlertKind.REFUSED,
            schedule=schedule,
            at=at,
            scheduler_id=scheduler_id,
            text=f"goatbeat: schedule {schedule!r} was not run: {reason}",
            details={"reason": reason},
        )

    @classmethod
    def overdue(cls, health: ScheduleHealth, *, at: datetime, scheduler_id: str) -> Alert:
        success = (
            "never succeeded"
            if health.last_success_at is None
            else f"last succeeded at {iso_z(health.last_success_at)}"
        )
        due = ""
        if health.next_run_at is not None and health.next_run_at <= at:
            due = f"; its run due at {iso_z(health.next_run_at)} was not claimed"
        elif health.last_run_at is not None:
            due = f"; its run due at {iso_z(health.last_run_at)} has not succeeded"
        return cls(
            kind=AlertKind.OVERDUE,
            schedule=health.name,
            at=at,
            scheduler_id=scheduler_id,
            text=f"goatbeat: schedule {health.name!r} is overdue: {success}{due}",
            details=health.to_dict(),
        )


AlertHandler = Callable[[Alert], object]
"""Receives each alert on the delivery thread; what it returns is ignored, what it raises is
logged (``alert.failed``)."""


def redact_webhook(url: str) -> str:
    """``url`` as logs, errors and status may show it: scheme, host and port only. A webhook's
    secret is usually its path or query (Slack's ``/services/T…/B…/<token>``, Discord's, a
    ``?token=``), sometimes its ``user:password@``: each becomes ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<an unreadable URL>"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if "@" in parts.netloc:
        netloc = f"***@{netloc}"
    secret = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{parts.scheme}://{netloc}{'/***' if secret else parts.path}"


def webhook_target(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@``, and the HTTP basic ``Authorization`` header
    value they make (None when it has none). ``ValueError`` when its credentials cannot be
    sent (a user name with a ``:``, RFC 7617)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    if ":" in user:
        raise ValueError("its user name holds a ':', which HTTP basic authentication cannot send")
    netloc = parts.netloc.rpartition("@")[2]
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), f"Basic {token}"


def _scrub(text: str, url: str) -> str:
    """``text`` (an error's message) with every piece of ``url`` that may be secret masked."""
    shown = redact_webhook(url)
    text = text.replace(url, shown)
    try:
        parts = urllib.parse.urlsplit(url)
        password, user = parts.password, parts.username
    except ValueError:
        return text
    secrets = [parts.path + (f"?{parts.query}" if parts.query else ""), parts.query, password]
    secrets += [user, urllib.parse.unquote(password or ""), urllib.parse.unquote(user or "")]
    for secret in sorted({s for s in secrets if s and len(s) > 1 and s != "/"}, key=len)[::-1]:
        text = text.replace(secret, "***")
    return text


def webhook(url: str, *, timeout: float = WEBHOOK_TIMEOUT) -> AlertHandler:
    """A handler that POSTs ``alert.to_dict()`` as JSON to ``url``; an answer other than 2xx
    (or none within ``timeout``) raises, and is logged. Credentials in ``url``
    (``https://user:password@host/...``) are sent as HTTP basic authentication, never in the
    request line. A redirect is not followed (it would carry the credentials elsewhere, and
    turn the POST into a GET): it fails, naming the status. What the handler raises and how
    it is named show :func:`redact_webhook`'s form of ``url``, never its secrets."""
    import urllib.error
    import urllib.request  # here: every scheduler imports this module, few post webhooks

    target, authorization = webhook_target(url)
    shown = redact_webhook(url)
    opener = urllib.request.build_opener(_no_redirect())
    headers = {"Content-Type": "application/json", "User-Agent": "goatbeat"}
    if authorization is not None:
        headers["Authorization"] = authorization

    def post(alert: Alert) -> None:
        body = json.dumps(alert.to_dict()).encode("utf-8")
        request = urllib.request.Request(target, data=body, method="POST", headers=headers)
        # The URL is the operator's own setting (http or https, checked when it is read).
        try:
            with opener.open(request, timeout=timeout) as response:
                status = int(response.status)
        except urllib.error.HTTPError as exc:
            status = int(exc.code)
            exc.close()  # it holds the answer's connection
        except Exception as exc:
            # Its message may quote the URL (or a piece of it): raised again without it.
            raise OSError(f"{shown}: {_scrub(f'{type(exc).__name__}: {exc}', url)}") from None
        if not 200 <= status < 300:
            moved = " (a redirect: set alert_webhook to its target)" if 300 <= status < 400 else ""
            raise OSError(f"{shown} answered {status}{moved}")

    post.__qualname__ = f"webhook({shown!r})"
    return post


def _no_redirect() -> Any:
    """A urllib handler that answers a redirect with its own status instead of following it."""
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoRedirect()


class Alerter:
    """Hands alerts to ``handlers`` from one daemon thread, started on the first alert."""

    def __init__(self, handlers: Sequence[AlertHandler], *, maxsize: int = QUEUE_SIZE) -> None:
        self.handlers = list(handlers)
        self._queue: queue.Queue[Alert | None] = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def emit(self, alert: Alert) -> bool:
        """Queue ``alert`` for delivery; False (and ``alert.dropped``) when the queue is full."""
        if not self.handlers:
            return False
        self._start()
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            log_event(
                "alert.dropped",
                level=logging.WARNING,
                kind=alert.kind,
                schedule=alert.schedule,
                queued=self._queue.qsize(),
            )
            return False
        return True

    def emit_all(self, alerts: Iterable[Alert]) -> None:
        for alert in alerts:
            self.emit(alert)

    def close(self, timeout: float = WEBHOOK_TIMEOUT) -> None:
        """Deliver what is queued (waiting up to about ``timeout``), then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return  # the daemon thread dies with the process
        thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._deliver, name="goatbeat-alerts", daemon=True
                )
                self._thread.start()

    def _deliver(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is None:
                return
            for handler in self.handlers:
                try:
                    handler(alert)
                except Exception as exc:  # a handler's failure is its own, never the loop's
                    log_event(
                        "alert.failed",
                        level=logging.ERROR,
                        kind=alert.kind,
                        schedule=alert.schedule,
                        handler=getattr(handler, "__qualname__", repr(handler)),
                        error=f"{type(exc).__name__}: {exc}",
                    )
                else:
                    log_event(
                        "alert.sent",
                        kind=alert.kind,
                        schedule=alert.schedule,
                        handler=getattr(handler, "__qualname__", repr(handler)),
                    )


class AlertTracker:
    """Which ``failing`` and ``overdue`` conditions were raised, so each is raised once per
    event: :meth:`update` answers the alerts for the conditions that began since the last
    call, and forgets those that ended (so they are raised again if they come back)."""

    def __init__(self, *, after_failures: int) -> None:
        self.after_failures = after_failures
        self._raised: set[tuple[AlertKind, str]] = set()

    def update(
        self, health: Sequence[ScheduleHealth], *, at: datetime, scheduler_id: str
    ) -> list[Alert]:
        now_holding: dict[tuple[AlertKind, str], Alert] = {}
        for h in health:
            if h.enabled and h.consecutive_failures >= self.after_failures:
                key = (AlertKind.FAILING, h.name)
                now_holding[key] = Alert.failing(h, at=at, scheduler_id=scheduler_id)
            if h.overdue:
                key = (AlertKind.OVERDUE, h.name)
                now_holding[key] = Alert.overdue(h, at=at, scheduler_id=scheduler_id)
        new = [alert for key, alert in now_holding.items() if key not in self._raised]
        self._raised = set(now_holding)
        return new

    def reset(self) -> None:
        """Forget everything (this scheduler stopped leading)."""
        self._raised.clear()
