"""A schedule's backend routing options (queue, exchange, routing key, priority, expiry,
headers), checked when they are built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from goatbeat.core.errors import InvalidSchedule, short_repr
from goatbeat.core.jsonvalues import check_json

__all__ = ["Routing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """Backend routing options. Submitters reject the ones they cannot honour at publish time."""

    queue: str | None = None
    exchange: str | None = None
    routing_key: str | None = None
    priority: int | None = None
    expires: float | None = None  # seconds after submission after which the task is dropped
    headers: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("queue", "exchange", "routing_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidSchedule(
                    name, value, f"{short_repr(value)} must be a non-empty string"
                )
        if self.priority is not None and (
            isinstance(self.priority, bool) or not isinstance(self.priority, int)
        ):
            raise InvalidSchedule(
                "priority", self.priority, f"{short_repr(self.priority)} is not an integer"
            )
        if self.priority is not None and not -100 <= self.priority <= 255:
            raise InvalidSchedule(
                "priority", self.priority, f"{short_repr(self.priority)} is out of range"
            )
        if self.expires is not None:
            if isinstance(self.expires, bool) or not isinstance(self.expires, (int, float)):
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} is not seconds"
                )
            if isinstance(self.expires, int) and not -(10**15) < self.expires < 10**15:
                # math.isfinite would overflow converting a huge int to float.
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} is out of range"
                )
            if not math.isfinite(self.expires) or self.expires <= 0:
                raise InvalidSchedule(
                    "expires", self.expires, f"{short_repr(self.expires)} must be > 0"
                )
        if not isinstance(self.headers, Mapping):
            raise InvalidSchedule(
                "headers", self.headers, f"{short_repr(self.headers)} is not a mapping"
            )
        check_json("headers", dict(self.headers))
        object.__setattr__(self, "headers", dict(self.headers))

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "exchange": self.exchange,
            "routing_key": self.routing_key,
            "priority": self.priority,
            "expires": self.expires,
            "headers": dict(self.headers),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Routing:
        data = dict(data or {})
        unknown = set(data) - {"queue", "exchange", "routing_key", "priority", "expires", "headers"}
        if unknown:
            raise InvalidSchedule("routing", data, f"unknown option(s) {sorted(unknown)}")
        return cls(**{k: v for k, v in data.items() if not (k == "headers" and v is None)})

    def is_default(self) -> bool:
        return self == Routing()

    @classmethod
    def _trusted(
        cls,
        *,
        queue: str | None,
        exchange: str | None,
        routing_key: str | None,
        priority: int | None,
        expires: float | None,
        headers: dict[str, Any],
    ) -> Routing:
        """For stores (and Beat's declarations without routing options): a Routing from values
        that were validated when they were written (a row goatbeat stored) or are the
        defaults, without running :meth:`__post_init__` again. ``headers`` must be a fresh
        dict the caller does not keep."""
        self = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(self, "queue", queue)
        setattr_(self, "exchange", exchange)
        setattr_(self, "routing_key", routing_key)
        setattr_(self, "priority", priority)
        setattr_(self, "expires", expires)
        setattr_(self, "headers", headers)
        return self
