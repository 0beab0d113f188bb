"""Test doubles shared across the suite (also imported by the scheduler processes that the
integration and chaos tests start, with the repository on ``PYTHONPATH``)."""

from __future__ import annotations

from typing import ClassVar

from goatbeat.core.model import Schedule

__all__ = ["AcceptingSubmitter"]


class AcceptingSubmitter:
    """Base for test submitters: honours every routing option and accepts every schedule, so a
    subclass only says what ``submit`` does (and gives itself a ``name``)."""

    supports_queue: ClassVar[bool] = True
    supports_priority: ClassVar[bool] = True
    supports_exchange: ClassVar[bool] = True
    supports_expires: ClassVar[bool] = True
    supports_headers: ClassVar[bool] = True

    def validate(self, schedule: Schedule) -> None:
        return None

    def close(self) -> None:
        return None
