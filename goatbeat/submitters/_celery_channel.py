"""The producer's channel, below kombu: a py-amqp channel that publishes without confirms
and the round trip that makes the broker's refusal arrive, the channel of a connected
producer, a chunk's batch session, and releasing a producer."""

from __future__ import annotations

from typing import Any

from goatbeat.submitters._amqp_batch import FrameBatch
from goatbeat.submitters._celery_errors import is_timeout

__all__ = ["unconfirmed_channel", "round_trip", "concrete_channel", "same", "release"]


def unconfirmed_channel(producer: Any) -> Any | None:
    """``producer``'s py-amqp channel when it publishes without confirms, else None (other
    transports, or a channel whose publishes wait for the broker's confirm)."""
    try:
        channel = producer._channel
        connection = channel.connection
        if connection is None or not callable(getattr(channel, "send_method", None)):
            return None
        if getattr(connection, "confirm_publish", False):
            return None
        import amqp  # type: ignore[import-untyped]

        if not isinstance(connection, amqp.Connection):
            return None
    except Exception:  # a channel promise not yet kept, a transport unlike py-amqp's
        return None
    return channel


def round_trip(producer: Any, channel: Any, timeout: float | None) -> None:
    """One ``basic.qos`` (prefetch unchanged: this channel consumes nothing) and its
    ``qos-ok`` on ``channel``, and the answers owed to earlier round trips that timed out
    (each would otherwise satisfy a later wait too early). Raises the channel error the
    broker sent instead, or TimeoutError after ``timeout`` seconds."""
    from amqp import spec

    owed = getattr(producer, "_goatbeat_owed", None)
    waits = 1 + (owed[1] if owed is not None and owed[0] is channel else 0)
    with channel.connection.transport.having_timeout(timeout):
        channel.send_method(spec.Basic.Qos, "lBb", (0, 0, False))
    try:
        while waits:
            channel.wait(spec.Basic.QosOk, timeout=timeout)
            waits -= 1
    except Exception as exc:
        # A closed channel owes nothing (py-amqp reopens it); a timeout leaves it owing.
        producer._goatbeat_owed = (channel, waits if is_timeout(exc) else 0)
        raise
    producer._goatbeat_owed = None


def concrete_channel(producer: Any) -> Any | None:
    """``producer``'s channel when its connection is up (made concrete), else None."""
    try:
        return producer.channel if producer.connection.connected else None
    except Exception:  # the publish will meet it
        return None


def same(session: FrameBatch, max_size: int = 0) -> FrameBatch:
    """``channel.create_publish_batch`` for one chunk: the session already made for it."""
    return session


def release(producer: Any) -> None:
    if producer is not None:
        try:
            producer.release()
        except Exception:  # noqa: BLE001 - best effort: closing, or an already failing connection
            pass
