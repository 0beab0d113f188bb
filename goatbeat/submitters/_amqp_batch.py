"""A chunk's messages to RabbitMQ in one socket write, and with confirms one wait for the lot.

kombu (>= 5.7) publishes inside ``Producer.batch()`` through a session the channel creates
(``channel.create_publish_batch``); py-amqp's channel has none, so each ``basic.publish`` is
written to the socket on its own (one ``sendall`` per message, after reading whatever the
broker sent, with the socket's timeout set and reset), and with ``confirm_publish`` each one
waits for its ack before the next goes out.

:class:`FrameBatch` is that session for a py-amqp channel. kombu and Celery still build every
message (``Producer.publish``, ``prepare_message``): the session receives the finished
``amqp.Message`` and frames it into a buffer (:mod:`~goatbeat.submitters._amqp_wire`: the
bytes py-amqp's frame writer would have written, in the same order, at a fraction of its
cost; the ``basic.publish`` method frame of a route made once per channel). :meth:`FrameBatch.settle` writes the
buffer in one go, then, with confirms, waits for the broker's acks of the whole chunk (acks
and nacks with ``multiple`` set settle every tag up to theirs), each tag attributed to the
message, and so the occurrence, that carried it; without confirms the caller ends the chunk
with a round trip.

Delivery tags are the channel's count of publishes since ``confirm.select``: the session
selects confirms itself on a channel that has not yet, and keeps the count on the channel, so
it only takes channels on which every publish went through it (:func:`batchable`); another
publish on the channel would shift the count, and the channel is then left to py-amqp's
one-by-one publish.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from goatbeat.submitters._amqp_wire import MethodFrames, publish_frames

__all__ = [
    "FrameBatch",
    "Settled",
    "after_classic",
    "await_confirms",
    "batchable",
    "before_classic",
    "forget_tags",
]

_TAGS = "_goatbeat_tags"
"""The channel attribute holding the last delivery tag a :class:`FrameBatch` gave out."""

_METHODS = "_goatbeat_methods"
"""The channel attribute holding its :class:`~goatbeat.submitters._amqp_wire.MethodFrames`
(with the connection they were made for), made once."""


def _amqp_modules() -> tuple[Any, Any]:
    import amqp  # type: ignore[import-untyped]
    from amqp import spec

    return amqp, spec


def batchable(channel: Any) -> bool:
    """Whether ``channel`` is a py-amqp channel a :class:`FrameBatch` can publish on: open,
    and with confirms either not yet selected or selected by a FrameBatch (which knows the
    delivery tags)."""
    try:
        amqp, _ = _amqp_modules()
        connection = channel.connection
        if not isinstance(connection, amqp.Connection) or not channel.is_open:
            return False
        if not getattr(connection, "confirm_publish", False):
            return True
        return not channel._confirm_selected or _TAGS in vars(channel)
    except Exception:  # a channel unlike py-amqp's
        return False


def before_classic(channel: Any) -> tuple[bool, bool]:
    """Taken before a publish outside a :class:`FrameBatch` (the blocked-broker probe):
    whether ``channel`` had confirms selected, and whether a FrameBatch counts its tags."""
    try:
        return bool(channel._confirm_selected), _TAGS in vars(channel)
    except Exception:  # not a concrete py-amqp channel yet: nothing selected on it
        return False, False


def after_classic(channel: Any, before: tuple[bool, bool]) -> None:
    """Count a publish that went out on ``channel`` outside a FrameBatch and was confirmed,
    so the delivery tags the next FrameBatch expects stay right."""
    try:
        if not getattr(channel.connection, "confirm_publish", False):
            return
        selected, counted = before
        if not selected:
            vars(channel)[_TAGS] = 1  # py-amqp selected confirms for it: its tag is 1
        elif counted:
            vars(channel)[_TAGS] += 1
    except Exception:  # a channel unlike py-amqp's: nothing counts tags on it
        return


def forget_tags(channel: Any) -> None:
    """A publish outside a FrameBatch failed on ``channel``: its confirm may still come, so
    the delivery tags are no longer known and no FrameBatch takes the channel."""
    with contextlib.suppress(Exception):
        vars(channel).pop(_TAGS, None)


def await_confirms(
    channel: Any, owed: dict[int, str], timeout: float | None, landed: set[str]
) -> None:
    """Wait up to ``timeout`` for the broker's confirms of the delivery tags in ``owed`` (tag
    to task id) on ``channel``, left by a chunk whose wait timed out; each one settled leaves
    ``owed``, and an acked one's task id joins ``landed``. Raises what stopped the wait
    (TimeoutError while the broker still withholds them)."""
    _, spec = _amqp_modules()

    def on_confirm(method_sig: Any, tag: int, multiple: bool, *_: Any) -> None:
        for t in [t for t in owed if t <= tag] if multiple else [tag]:
            key = owed.pop(t, None)
            if key is not None and method_sig != spec.Basic.Nack:
                landed.add(key)

    deadline = None if timeout is None else time.monotonic() + timeout
    while owed:
        left = None if deadline is None else max(0.001, deadline - time.monotonic())
        channel.wait([spec.Basic.Ack, spec.Basic.Nack], callback=on_confirm, timeout=left)


class Settled:
    """How a settled chunk ended: per buffered message (in the order published), ``"ok"``,
    ``"nack"``, or ``"unknown"``; and the error that stopped the wait, if any."""

    def __init__(self, count: int) -> None:
        self.outcomes: list[str] = ["unknown"] * count
        self.error: BaseException | None = None
        self.written = False
        self.base = 0
        """The delivery tag before the chunk's first: message ``i`` carries ``base + 1 + i``."""


class FrameBatch:
    """kombu's publish-batch session for one py-amqp channel (see the module docstring)."""

    def __init__(self, channel: Any, timeout: float | None) -> None:
        _, self._spec = _amqp_modules()
        self.channel = channel
        self.timeout = timeout
        connection = channel.connection
        self.confirm = bool(getattr(connection, "confirm_publish", False))
        found = vars(channel).get(_METHODS)
        if found is None or found[0] is not connection:
            found = (connection, MethodFrames())
            vars(channel)[_METHODS] = found
        self._methods: MethodFrames = found[1]
        self._parts: list[bytes] = []
        self.count = 0
        self.owners: list[Any] = []
        self.owner: Any = None
        """Set by the caller before each publish: whose message the next ones are."""

    # -- kombu's session protocol (kombu.messaging._ProducerBatchState) -------------------------

    def publish(
        self,
        message: Any,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        timeout: float | None = None,
        confirm_timeout: float | None = None,
    ) -> None:
        """Frame one ``basic.publish`` of ``message`` into the buffer, as py-amqp's
        ``basic_publish`` would write it."""
        channel = self.channel
        channel_id = channel.channel_id
        connection = channel.connection
        method = self._methods.get(channel_id, exchange, routing_key, mandatory, immediate)
        publish_frames(method, channel_id, connection.frame_max, message, self._parts)
        connection.bytes_sent += 1  # as py-amqp's frame writer counts, for its heartbeats
        self.count += 1
        self.owners.append(self.owner)

    def flush(self) -> None:
        """kombu's flush at the end of the batch: the caller settles the chunk itself
        (:meth:`settle`), so nothing is left here but what it did not settle."""
        if self.count:
            self.settle()

    def discard(self) -> None:
        self._parts = []
        self.count = 0
        self.owners = []

    def close(self) -> None:
        self._parts = []

    # -- the chunk ------------------------------------------------------------------------------

    def settle(self) -> Settled:
        """Write every buffered frame in one socket write (bounded by ``timeout``) and, with
        confirms, wait for the acks of all of them. Never raises: what went wrong is in the
        answer (``error``), and what is not known stays ``"unknown"``."""
        settled = Settled(self.count)
        if not self.count:
            return settled
        data = b"".join(self._parts)
        count, self.count = self.count, 0
        self._parts = []
        channel = self.channel
        base = 0
        if self.confirm:
            try:
                if not channel._confirm_selected:
                    channel._confirm_selected = True
                    channel.confirm_select()
                    vars(channel)[_TAGS] = 0
                base = settled.base = vars(channel)[_TAGS]
                vars(channel)[_TAGS] = base + count
            except Exception as exc:
                settled.error = exc
                return settled
        try:
            transport = channel.connection.transport
            with transport.having_timeout(self.timeout):
                transport.write(data)
        except Exception as exc:
            settled.error = exc
            return settled
        settled.written = True
        if not self.confirm:
            return settled
        spec = self._spec
        pending = set(range(base + 1, base + count + 1))
        outcomes = settled.outcomes

        def on_confirm(method_sig: Any, tag: int, multiple: bool, *_: Any) -> None:
            result = "nack" if method_sig == spec.Basic.Nack else "ok"
            done = [t for t in pending if t <= tag] if multiple else [tag]
            for t in done:
                if t in pending:
                    pending.discard(t)
                    outcomes[t - base - 1] = result

        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            while pending:
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                channel.wait([spec.Basic.Ack, spec.Basic.Nack], callback=on_confirm, timeout=left)
        except Exception as exc:
            settled.error = exc
        return settled
