"""Logging: the ``goatbeat`` logger, its event names, and a JSON formatter that keeps them.

The event name is the log message (``lease.acquired``); the details are structured fields
passed through ``extra`` (a field named like a LogRecord attribute, ``created``, as
``goatbeat_created``) and also collected under ``record.goatbeat`` so the formatter can find
them. A plain formatter prints only the event name; :class:`JsonFormatter` writes one JSON
object per line with every field::

    {"ts": "2026-12-01T08:00:00.012Z", "level": "INFO", "logger": "goatbeat",
     "event": "occurrence.submitted", "schedule": "daily-report",
     "idempotency_key": "daily-report:2026-12-01T08:00:00Z", "scheduler_id": "web-1", ...}
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import Any

__all__ = ["logger", "log_event", "JsonFormatter", "EVENTS"]

logger = logging.getLogger("goatbeat")

EVENTS = frozenset(
    {
        "scheduler.started",
        "scheduler.stopped",
        "scheduler.error",
        "store.reconnected",
        "lease.acquired",
        "lease.renewed",
        "lease.lost",
        "lease.released",
        "lease.standby",
        "claim.refused",
        "claim.conflict",
        "occurrence.claimed",
        "occurrence.submitted",
        "occurrence.submit_retry",
        "occurrence.submit_failed",
        "occurrence.resubmitted",
        "occurrence.missed",
        "occurrence.finished",
        "occurrence.lost",
        "occurrence.skipped",
        "schedule.published",
        "schedule.changed",
        "schedule.orphaned",
        "schedule.pruned",
        "schedule.deleted",
        "schedule.run_requested",
        "schedule.refused",
        "schedule.readmitted",
        "submitter.unchecked",
        "submitter.publish_timeout",
        "submitter.recovered",
        "store.frozen",
        "delivery.skipped",
        "delivery.error",
        "schedule.invalid",
        "alert.sent",
        "alert.failed",
        "alert.dropped",
        "metrics.serving",
        "occurrence.started",
        "occurrence.relay_started",
        "occurrence.relay_gone",
    }
)

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "goatbeat",
}


def log_event(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` with structured ``fields`` on the goatbeat logger."""
    if not logger.isEnabledFor(level):
        return
    # Every field is an attribute of the record (a project's formatter reads %(schedule)s); one
    # named like a LogRecord attribute (``created``) is ``goatbeat_created`` there.
    extra = {(f"goatbeat_{k}" if k in _RESERVED else k): v for k, v in fields.items()}
    extra["goatbeat"] = fields
    logger.log(level, event, extra=extra)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
            return value.replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, keeping every structured field of the record."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _jsonable(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "goatbeat", None)
        if isinstance(fields, dict):
            source = fields
        else:
            source = {k: v for k, v in record.__dict__.items() if k not in _RESERVED}
        for key, value in source.items():
            if key not in data:
                data[key] = _jsonable(value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, sort_keys=False)
