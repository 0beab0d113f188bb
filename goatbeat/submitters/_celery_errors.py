"""What the broker answers a Celery publish that did not land: RabbitMQ's refusals no retry
fixes (:class:`BrokerRefused`, told apart by :func:`refusal`), a publish that timed out
(:class:`PublishTimedOut`), and which results say a producer may be broken."""

from __future__ import annotations

import re

from goatbeat.core.errors import PermanentSubmitError, RetryableSubmitError
from goatbeat.core.model import Occurrence

__all__ = [
    "BrokerRefused",
    "Refused",
    "PublishTimedOut",
    "Abandoned",
    "REFUSALS",
    "refusal",
    "named_exchange",
    "is_timeout",
    "no_retry_after_timeout",
    "suspect",
]


class BrokerRefused(PermanentSubmitError):
    """RabbitMQ closed the channel on this occurrence's message with an error no retry can
    fix: 404 NOT_FOUND (no such exchange) or 406 PRECONDITION_FAILED (an exchange or queue
    declared otherwise than it exists). The occurrence fails at once (``submit_failed``),
    naming the reply, the exchange and the schedule."""

    def __init__(self, occurrence: Occurrence, error: BaseException, exchange: str | None):
        self.reply_code: int | None = getattr(error, "reply_code", None)
        self.reply_text: str = str(getattr(error, "reply_text", None) or error)
        self.exchange = exchange
        self.schedule = occurrence.schedule_name
        method = getattr(error, "method_name", "") or "the broker"
        super().__init__(
            f"RabbitMQ refused schedule {occurrence.schedule_name!r}'s message "
            f"({occurrence.idempotency_key}) to exchange {exchange!r}: "
            f"({self.reply_code}) {self.reply_text} (on {method}); no retry can fix this"
        )


class Refused(RetryableSubmitError):
    """A channel error :func:`refusal` picked out, on its way to :meth:`_attribute` (which
    always replaces it in the results)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


REFUSALS = frozenset({404, 406})
"""AMQP channel error codes no retry fixes: NOT_FOUND, PRECONDITION_FAILED."""


_EXCHANGE_NAME = re.compile(r"exchange '((?:[^'\\]|\\.)*)'")


def refusal(exc: BaseException) -> BaseException | None:
    """The py-amqp channel error behind ``exc`` (itself or what it wraps) when its reply
    code is one no retry fixes (:data:`REFUSALS`), else None."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        if getattr(seen, "reply_code", None) in REFUSALS and hasattr(seen, "method_sig"):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def named_exchange(error: BaseException) -> str | None:
    """The exchange a broker's reply text names (``no exchange 'x' in vhost '/'``)."""
    found = _EXCHANGE_NAME.search(str(getattr(error, "reply_text", "") or ""))
    return found.group(1) if found else None


class PublishTimedOut(RetryableSubmitError):
    """A publish that took longer than ``publish_timeout``: the broker may hold it, or not."""


class Abandoned(Exception):
    """Raised from kombu's retry errback to stop it publishing again after a timeout."""


def is_timeout(exc: BaseException) -> bool:
    # py-amqp: socket.timeout (TimeoutError) waiting for a confirm; RecoverableConnectionError
    # "basic_publish: timed out" for a write the broker did not read in time.
    return isinstance(exc, TimeoutError) or "timed out" in str(exc)


def no_retry_after_timeout(exc: BaseException, interval: float) -> None:
    if is_timeout(exc):
        raise Abandoned(str(exc)) from exc


def suspect(result: object) -> bool:
    """Whether a submission's result says the producer's connection or channel may be
    broken: any failure but a permanent one raised before the broker was asked (a broker's
    refusal closed the channel)."""
    return isinstance(result, Exception) and (
        not isinstance(result, PermanentSubmitError) or isinstance(result, BrokerRefused)
    )
