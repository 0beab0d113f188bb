"""The command's log handler on stderr: :class:`TextFormatter` lines, or JSON with
``--log-format json``. Attached when a command starts and removed when it ends, so a process
that embeds the group (tests, Django's management command) keeps no handler bound to a stream
that may be gone.

In a Django project the project's ``LOGGING`` comes first: when its handlers already receive
goatbeat's records (a handler on the ``goatbeat`` logger, or on the root logger it propagates
to), the command adds none of its own, so no line is printed twice and each handler's format
(one JSON object per line with :class:`~goatbeat.core.observability.JsonFormatter`) holds.
The level is then the project's, unless ``--log-level`` or ``-v`` asks for one.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from goatbeat.cli.output import iso
from goatbeat.core.observability import JsonFormatter, logger

__all__ = [
    "TextFormatter",
    "configure_logging",
    "defer_to_project_logging",
    "project_handles_logs",
    "hide_events",
    "quiet_cli_handlers",
    "remove_cli_handlers",
]

_MARK = "_goatbeat_cli"


class TextFormatter(logging.Formatter):
    """``2026-12-01 08:00:00Z INFO occurrence.submitted schedule=x idempotency_key=...``"""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%d %H:%M:%S")
        parts = [f"{stamp}Z", f"{record.levelname:<7}", record.getMessage()]
        fields = getattr(record, "goatbeat", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                if value is not None:
                    parts.append(f"{key}={_text_value(value)}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    if isinstance(value, datetime):
        return iso(value).replace(" ", "T")
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_text_value(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    text = (
        str(value.value) if hasattr(value, "value") and not isinstance(value, str) else str(value)
    )
    return json.dumps(text) if (" " in text or not text) else text


def configure_logging(
    fmt: str, level: str, *, defer_to_project: bool = False, explicit: bool = True
) -> int:
    """Attach the CLI's handler; returns the logger's previous level.

    ``defer_to_project`` (a Django project, already set up): when the project's handlers
    receive goatbeat's records, attach nothing, and set ``level`` only if it is ``explicit``
    or the project left the logger's level unset."""
    previous = logger.level
    _remove_ours()
    if defer_to_project and project_handles_logs():
        if explicit or logger.level == logging.NOTSET:
            logger.setLevel(level)
        return previous
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
    logger.setLevel(level)
    return previous


def _remove_ours() -> None:
    for handler in list(logger.handlers):
        if getattr(handler, _MARK, False):
            logger.removeHandler(handler)


def project_handles_logs() -> bool:
    """Whether a handler other than the command's receives goatbeat's records: one on the
    ``goatbeat`` logger or on a logger it propagates to (the root), as a project's
    ``LOGGING`` sets up. Null handlers do not count: they print nothing."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if not getattr(handler, _MARK, False) and not isinstance(handler, logging.NullHandler):
                return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def defer_to_project_logging(level: str | None) -> None:
    """Called once a Django project has been set up (its ``LOGGING`` applied) after the
    command attached its handler: drop the handler if the project's handlers receive
    goatbeat's records. ``level`` (an explicit ``--log-level``) still applies."""
    if not any(getattr(h, _MARK, False) for h in logger.handlers):
        if level is not None:
            logger.setLevel(level)
        return
    if project_handles_logs():
        _remove_ours()
        if level is not None:
            logger.setLevel(level)


def quiet_cli_handlers(level: int) -> None:
    """Raise the CLI's handler to ``level`` (a command printing its own lines keeps stderr for
    real errors)."""
    for handler in list(logger.handlers):
        if getattr(handler, _MARK, False):
            handler.setLevel(level)


class _HideEvents(logging.Filter):
    def __init__(self, events: frozenset[str]) -> None:
        super().__init__()
        self.events = events

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in self.events


def hide_events(events: frozenset[str]) -> None:
    """Keep ``events`` off the CLI's handler (a command that reports them in its own words);
    other handlers, Django's LOGGING included, still get them. Ends with the handler."""
    for handler in list(logger.handlers):
        if getattr(handler, _MARK, False):
            handler.addFilter(_HideEvents(events))


def remove_cli_handlers(previous_level: int) -> None:
    """Detach the CLI's handler and restore the logger's level; called when the command ends."""
    for handler in list(logger.handlers):
        if getattr(handler, _MARK, False):
            logger.removeHandler(handler)
    logger.setLevel(previous_level)
