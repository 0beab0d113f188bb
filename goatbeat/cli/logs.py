"""The command's log handler on stderr: :class:`TextFormatter` lines, or JSON with
``--log-format json``. Attached when a command starts and removed when it ends, so a process
that embeds the group (tests, Django's management command) keeps no handler bound to a stream
that may be gone.
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


def configure_logging(fmt: str, level: str) -> int:
    """Attach the CLI's handler; returns the logger's previous level."""
    previous = logger.level
    for handler in list(logger.handlers):
        if getattr(handler, _MARK, False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
    logger.setLevel(level)
    return previous


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
